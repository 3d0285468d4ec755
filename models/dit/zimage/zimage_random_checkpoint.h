// A random-weight ZImageTransformer2DModel checkpoint of any size, for benchmarks and tests that
// need real dimensions without a download (the class defaults are Z-Image-Turbo's: dim 3840, 30
// layers, 2 + 2 refiner layers, 30 heads, cap_feat_dim 2560): every tensor the config implies, in
// `dtype` (bf16, as released, or f32), deterministic, filled in parallel. Linear weights are
// scaled by 1/sqrt(fan_in) so activations stay in range through the blocks.
#pragma once

#include "core/safetensors.h"
#include "models/dit/zimage/zimage_config.h"

namespace mmgen::dit {

NamedTensors zimage_random_checkpoint(const ZImageConfig& config, DType dtype = DType::BF16);

}  // namespace mmgen::dit
