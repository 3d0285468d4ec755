// The CPU convolution (core/conv_cpu.cpp) against a direct sum in double precision: 2-D and causal
// 3-D kernels, leading zero taps with and without remembered frames, the ×2 nearest-neighbour
// enlargement, 1×1 kernels, residuals, no bias, and frames tall enough to take several bands.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "core/conv.h"
#include "core/ops.h"
#include "core/tensor.h"

namespace mmgen {
namespace {

struct Case {
  int64_t cin, cout, kt, kh, frames, history, height, width;
  bool upsample, bias, residual;
};

// out[t, o, y, x] = bias[o] + Σ w[o, c, j, ky, kx] · in(t + j - (kt - 1), c, y + ky - kh/2,
// x + kx - kw/2), where `in` is history then x, zeros before history and outside the frame, and
// the frame is read enlarged ×2 when asked.
std::vector<double> reference(const Case& c, const Tensor& weight, const Tensor& bias,
                              const Tensor& x, const Tensor& history, const Tensor& residual) {
  const int64_t s = c.upsample ? 2 : 1, oh = s * c.height, ow = s * c.width;
  const int64_t kt = std::max<int64_t>(c.kt, 1), kw = c.kh, plane = c.height * c.width;
  const float* w = weight.data<float>();
  auto frame = [&](int64_t i) -> const float* {  // i counts from x[0]; negative reaches history
    if (i >= 0) return x.data<float>() + i * c.cin * plane;
    const int64_t j = c.history + i;
    return j >= 0 ? history.data<float>() + j * c.cin * plane : nullptr;
  };
  std::vector<double> out(size_t(c.frames * c.cout * oh * ow));
  for (int64_t t = 0; t < c.frames; ++t)
    for (int64_t o = 0; o < c.cout; ++o)
      for (int64_t y = 0; y < oh; ++y)
        for (int64_t xx = 0; xx < ow; ++xx) {
          double sum = c.bias ? bias.data<float>()[o] : 0.0;
          for (int64_t j = 0; j < kt; ++j) {
            const float* in = frame(t + j - (kt - 1));
            if (!in) continue;
            for (int64_t ch = 0; ch < c.cin; ++ch)
              for (int64_t ky = 0; ky < c.kh; ++ky)
                for (int64_t kx = 0; kx < kw; ++kx) {
                  const int64_t sy = y + ky - c.kh / 2, sx = xx + kx - kw / 2;
                  if (sy < 0 || sy >= oh || sx < 0 || sx >= ow) continue;
                  const double v = in[ch * plane + (sy / s) * c.width + sx / s];
                  sum += v * w[(((o * c.cin + ch) * kt + j) * c.kh + ky) * kw + kx];
                }
          }
          const size_t at = size_t(((t * c.cout + o) * oh + y) * ow + xx);
          if (c.residual) sum += residual.data<float>()[at];
          out[at] = sum;
        }
  return out;
}

void check_case(const Case& c) {
  const int64_t s = c.upsample ? 2 : 1;
  const Shape weight_shape =
      c.kt == 0 ? Shape{c.cout, c.cin, c.kh, c.kh} : Shape{c.cout, c.cin, c.kt, c.kh, c.kh};
  const Tensor weight = ops::random_uniform(weight_shape, DType::F32, Device::CPU, 1, 0.5f);
  const Tensor bias = ops::random_uniform({c.cout}, DType::F32, Device::CPU, 2, 0.5f);
  const Tensor x =
      ops::random_uniform({c.frames, c.cin, c.height, c.width}, DType::F32, Device::CPU, 3, 1.0f);
  ops::ConvInputs inputs;
  if (c.history > 0)
    inputs.history = ops::random_uniform({c.history, c.cin, c.height, c.width}, DType::F32,
                                         Device::CPU, 4, 1.0f);
  if (c.residual)
    inputs.residual = ops::random_uniform({c.frames, c.cout, s * c.height, s * c.width}, DType::F32,
                                          Device::CPU, 5, 1.0f);
  inputs.upsample2x = c.upsample;
  const ops::Conv conv(weight, c.bias ? bias : Tensor(),
                       ops::ConvShape{c.cout, c.cin, c.kt, c.kh, c.kh});
  const Tensor y = ops::conv3d(conv, x, inputs);
  ASSERT_EQ(y.shape(), (Shape{c.frames, c.cout, s * c.height, s * c.width}));
  const std::vector<double> expected =
      reference(c, weight, bias, x, inputs.history, inputs.residual);
  double worst = 0, scale = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    worst = std::max(worst, std::abs(double(y.data<float>()[i]) - expected[i]));
    scale = std::max(scale, std::abs(expected[i]));
  }
  EXPECT_LT(worst, 2e-6 * scale) << "largest difference " << worst << " of " << scale;
}

TEST(ConvCpu, TwoDimensionalThreeByThreeWithBias) {
  check_case({5, 7, 0, 3, 1, 0, 6, 9, false, true, false});
}

TEST(ConvCpu, EnlargedTwiceByNearestNeighbour) {
  check_case({6, 4, 0, 3, 1, 0, 5, 7, true, true, false});
}

TEST(ConvCpu, OneByOneWithResidualAndNoBias) {
  check_case({9, 11, 0, 1, 2, 0, 4, 5, false, false, true});
}

TEST(ConvCpu, CausalTapsReadZerosThenHistoryThenFrames) {
  check_case({4, 6, 3, 3, 3, 0, 5, 6, false, true, false});  // zero taps lead the first frames
  check_case({4, 6, 3, 3, 2, 1, 5, 6, false, true, true});   // one remembered frame
  check_case({3, 5, 3, 1, 2, 2, 4, 4, false, true, false});  // a 3x1x1 (time-only) kernel
}

// From 64 input channels the product reads a 3x3 kernel's taps in place from zero-padded
// channels-last rows instead of im2col rows (the other cases above take the im2col rows).
TEST(ConvCpu, WideInputsReadTheirTapsInPlace) {
  check_case({64, 10, 0, 3, 1, 0, 5, 7, false, true, false});
  check_case({96, 12, 0, 3, 1, 0, 4, 6, true, false, true});
  check_case({64, 8, 3, 3, 3, 1, 6, 7, false, true, true});   // causal, one remembered frame
  check_case({64, 8, 3, 3, 2, 0, 3, 4, false, true, false});  // leading zero taps
}

TEST(ConvCpu, TallFramesRunInSeveralBands) {
  // The band budget (4M floats) holds 63 rows of 258 padded 256-channel pixels: 70 rows take two
  // bands, read in place, and so do 80 enlarged rows; 28 rows of 512 pixels' 288-column im2col
  // rows, so 40 rows take two bands the im2col way.
  check_case({256, 8, 0, 3, 1, 0, 70, 256, false, true, true});
  check_case({256, 8, 0, 3, 1, 0, 40, 128, true, true, false});
  check_case({32, 16, 0, 3, 1, 0, 40, 512, false, true, false});
}

// Timing only: MMGEN_CONV_BENCH=1 times the FLUX VAE decoder's 3x3 convolutions (median of 5, after
// a warm-up) and prints GFLOP/s; torch's conv2d at the same shapes: bench/vae_cpu_torch.py conv.
TEST(ConvCpu, BenchmarkWhenAsked) {
  if (!std::getenv("MMGEN_CONV_BENCH")) GTEST_SKIP() << "set MMGEN_CONV_BENCH=1 to time";
  for (const auto& [cin, cout, side] :
       std::vector<std::array<int64_t, 3>>{{512, 512, 64}, {256, 256, 256}, {128, 128, 256}}) {
    const Tensor weight = ops::random_uniform({cout, cin, 3, 3}, DType::F32, Device::CPU, 1, 0.05f);
    const Tensor bias = ops::random_uniform({cout}, DType::F32, Device::CPU, 2, 0.5f);
    const Tensor x = ops::random_uniform({1, cin, side, side}, DType::F32, Device::CPU, 3, 1.0f);
    const ops::Conv conv(weight, bias, ops::ConvShape{cout, cin, 0, 3, 3});
    ops::conv3d(conv, x);
    std::vector<double> seconds;
    for (int run = 0; run < 5; ++run) {
      const auto start = std::chrono::steady_clock::now();
      ops::conv3d(conv, x);
      seconds.push_back(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    std::sort(seconds.begin(), seconds.end());
    const double flops = 2.0 * double(side * side * cin * cout * 9);
    std::printf("conv %ld->%ld %ldx%ld: %.1f ms, %.0f GFLOP/s\n", cin, cout, side, side,
                seconds[2] * 1e3, flops / seconds[2] / 1e9);
  }
}

}  // namespace
}  // namespace mmgen
