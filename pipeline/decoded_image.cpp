#include "pipeline/decoded_image.h"

#include <algorithm>

#include "core/error.h"

namespace mmgen {

Tensor decoded_images_to_frames(const Tensor& images) {
  check(images.dim() == 4, "decode: expected [N, C, H, W] images, got {}",
        shape_string(images.shape()));
  const Tensor in = images.to(Device::CPU).to(DType::F32).contiguous();
  const int64_t count = in.size(0), channels = in.size(1), pixels = in.size(2) * in.size(3);
  Tensor frames = Tensor::empty({count, in.size(2), in.size(3), channels});
  for (int64_t n = 0; n < count; ++n) {
    const float* from = in.data<float>() + n * channels * pixels;
    float* to = frames.data<float>() + n * channels * pixels;
    for (int64_t c = 0; c < channels; ++c)
      for (int64_t i = 0; i < pixels; ++i)
        to[i * channels + c] = std::clamp(from[c * pixels + i] / 2.0f + 0.5f, 0.0f, 1.0f);
  }
  return frames;
}

}  // namespace mmgen
