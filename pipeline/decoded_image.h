// A VAE's decoded images as a pipeline returns them: VaeImageProcessor's postprocess (x / 2 + 0.5
// clamped to [0, 1], channels last), shared by the image pipelines (Z-Image, FLUX, Qwen-Image).
#pragma once

#include "core/tensor.h"

namespace mmgen {

// [N, C, H, W] in [-1, 1], any float dtype, on the host → [N, H, W, C] float32 in [0, 1]. One pass
// reading each channel plane in order (it runs on the host after every decode).
Tensor decoded_images_to_frames(const Tensor& images);

}  // namespace mmgen
