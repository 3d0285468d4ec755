#include "models/dit/wan/wan_patchify.h"

#include <cmath>

#include "core/error.h"

namespace mmgen::dit {

Tensor patchify(const Tensor& latents, const std::array<int64_t, 3>& patch, const PatchGrid& grid) {
  const Tensor x = latents.to(DType::F32);
  const int64_t batch = x.size(0), channels = x.size(1);
  const int64_t frames = x.size(2), height = x.size(3), width = x.size(4);
  // Plain variables, not a structured binding: clang 14 cannot use one inside the OpenMP loop.
  const int64_t pt = patch[0], ph = patch[1], pw = patch[2];
  const int64_t row = channels * pt * ph * pw;
  Tensor out = Tensor::empty({batch, grid.tokens(), row});
  const float* src = x.data<float>();
  float* dst = out.data<float>();
#pragma omp parallel for collapse(2) schedule(static) if (batch * grid.tokens() > 256)
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t token = 0; token < grid.tokens(); ++token) {
      const int64_t gt = token / (grid.h * grid.w), gh = (token / grid.w) % grid.h,
                    gw = token % grid.w;
      float* out_row = dst + (b * grid.tokens() + token) * row;
      int64_t i = 0;
      for (int64_t c = 0; c < channels; ++c)
        for (int64_t a = 0; a < pt; ++a)
          for (int64_t y = 0; y < ph; ++y)
            for (int64_t z = 0; z < pw; ++z)
              out_row[i++] =
                  src[(((b * channels + c) * frames + gt * pt + a) * height + gh * ph + y) * width +
                      gw * pw + z];
    }
  return out;
}

Tensor unpatchify(const Tensor& rows, const std::array<int64_t, 3>& patch, const PatchGrid& grid,
                  int64_t channels) {
  // Plain variables, not a structured binding: clang 14 cannot use one inside the OpenMP loop.
  const int64_t pt = patch[0], ph = patch[1], pw = patch[2];
  const int64_t batch = rows.size(0), row = rows.size(2);
  check(row == channels * pt * ph * pw, "unpatchify: rows of {} for {} channels", row, channels);
  const int64_t frames = grid.t * pt, height = grid.h * ph, width = grid.w * pw;
  Tensor out = Tensor::empty({batch, channels, frames, height, width});
  const float* src = rows.data<float>();
  float* dst = out.data<float>();
#pragma omp parallel for collapse(2) schedule(static) if (batch * grid.tokens() > 256)
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t token = 0; token < grid.tokens(); ++token) {
      const int64_t gt = token / (grid.h * grid.w), gh = (token / grid.w) % grid.h,
                    gw = token % grid.w;
      const float* in_row = src + (b * grid.tokens() + token) * row;
      int64_t i = 0;
      for (int64_t a = 0; a < pt; ++a)
        for (int64_t y = 0; y < ph; ++y)
          for (int64_t z = 0; z < pw; ++z)
            for (int64_t c = 0; c < channels; ++c)
              dst[(((b * channels + c) * frames + gt * pt + a) * height + gh * ph + y) * width +
                  gw * pw + z] = in_row[i++];
    }
  return out;
}

std::vector<float> timestep_sinusoid(float timestep, int64_t dim) {
  const int64_t half = dim / 2;
  std::vector<float> out(size_t(2 * half));
  // torch: exponent = −ln(10000)·arange(half) / half and exp() all in float32; the product with
  // the timestep also in float32. Matching these roundings matters: at t ≈ 1000 one ulp of a
  // frequency moves the angle by ~1e-4.
  const float log_period = float(-std::log(10000.0));
  for (int64_t i = 0; i < half; ++i) {
    const float exponent = (log_period * float(i)) / float(half);
    const float frequency = std::exp(exponent);
    const float angle = timestep * frequency;
    out[size_t(i)] = float(std::cos(double(angle)));
    out[size_t(half + i)] = float(std::sin(double(angle)));
  }
  return out;
}

}  // namespace mmgen::dit
