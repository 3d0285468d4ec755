#include "core/conv_cpu.h"
// clang-format off
#include "core/x86_intrinsics.h"  // before anything that includes it: see there
// clang-format on

#include <omp.h>

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>

#include "core/error.h"
#include "core/ops.h"

namespace mmgen::ops::cpu {
namespace {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using StridedConst = Eigen::Map<const RowMatrix, 0, Eigen::OuterStride<>>;
using Strided = Eigen::Map<RowMatrix, 0, Eigen::OuterStride<>>;

// Floats in one band's column buffer (per thread): large enough that each GEMM amortises packing
// the weights, small enough to stay bounded for 832-pixel-wide frames.
constexpr int64_t kColumnBudget = int64_t(1) << 22;
// Multiply-adds below which a convolution runs on one thread: waking the team costs more than it
// saves, and far more on shared cores where idle OpenMP threads spin.
constexpr int64_t kParallelWork = int64_t(1) << 22;
// Elements below which an elementwise pass runs on one thread.
constexpr int64_t kParallelElements = int64_t(1) << 16;

// The geometry of one conv_frame call.
struct Geometry {
  int64_t cin, cout, kh, kw, khw;
  int64_t first_tap;  // first non-zero tap
  int64_t k_total;    // columns of the weight matrix
  int64_t k;          // columns in use (taps from first_tap on)
  int64_t src_h, src_w, height, width;
  bool upsample;
};

// Fills `rows` rows of the im2col matrix: column block for output rows [r0, r1), matrix row `k`
// (tap, channel, ky, kx) counted from the first real tap. `dst` has (r1 - r0) · width floats.
void fill_column_row(const Geometry& g, const std::vector<const float*>& taps, int64_t k,
                     int64_t r0, int64_t r1, float* dst) {
  const int64_t per_tap = g.cin * g.khw;
  const int64_t tap = g.first_tap + k / per_tap;
  const int64_t rest = k % per_tap;
  const int64_t channel = rest / g.khw;
  const int64_t dy = (rest % g.khw) / g.kw - g.kh / 2;
  const int64_t dx = rest % g.kw - g.kw / 2;
  const float* plane = taps[size_t(tap)] + channel * g.src_h * g.src_w;
  const int64_t width = g.width;
  // Output columns x whose source x + dx lies inside the (enlarged) frame.
  const int64_t x_begin = std::max<int64_t>(0, -dx), x_end = std::min(width, width - dx);
  for (int64_t r = r0; r < r1; ++r, dst += width) {
    const int64_t y = r + dy;
    if (y < 0 || y >= g.height) {
      std::memset(dst, 0, sizeof(float) * size_t(width));
      continue;
    }
    for (int64_t x = 0; x < x_begin; ++x) dst[x] = 0.0f;
    for (int64_t x = x_end; x < width; ++x) dst[x] = 0.0f;
    if (g.upsample) {
      const float* row = plane + (y / 2) * g.src_w;
      for (int64_t x = x_begin; x < x_end; ++x) dst[x] = row[(x + dx) / 2];
    } else {
      const float* row = plane + y * g.src_w;
      std::memcpy(dst + x_begin, row + x_begin + dx, sizeof(float) * size_t(x_end - x_begin));
    }
  }
}

// out[:, rows r0..r1) = weights · columns + bias, where `columns` is [k, (r1 - r0) · width] with
// rows `column_stride` apart. Single-threaded: callers split the rows across threads.
// `small` products skip Eigen's blocked GEMM, which would start its own threads for them.
void multiply_band(const Geometry& g, const ColumnWeights& w, const float* columns,
                   int64_t column_stride, int64_t r0, int64_t r1, bool small, float* out) {
  const int64_t n = (r1 - r0) * g.width;
  const float* weight = w.weight.data<float>() + g.first_tap * g.cin * g.khw;
  StridedConst a(weight, g.cout, g.k, Eigen::OuterStride<>(g.k_total));
  StridedConst b(columns, g.k, n, Eigen::OuterStride<>(column_stride));
  Strided c(out + r0 * g.width, g.cout, n, Eigen::OuterStride<>(g.height * g.width));
  if (small)
    c.noalias() = a.lazyProduct(b);
  else
    c.noalias() = a * b;
  if (w.bias.defined()) {
    const float* bias = w.bias.data<float>();
    for (int64_t o = 0; o < g.cout; ++o) c.row(o).array() += bias[o];
  }
}

}  // namespace

ColumnWeights column_weights(const Conv& conv) {
  const ConvShape& shape = conv.shape();
  ColumnWeights result;
  result.out_channels = shape.out_channels;
  result.in_channels = shape.in_channels;
  result.kt = conv.taps();
  result.kh = shape.kh;
  result.kw = shape.kw;
  const Tensor stored = weight_to_f32(conv.weight()).contiguous();
  if (conv.bias().defined()) result.bias = weight_to_f32(conv.bias()).contiguous();
  const int64_t khw = shape.kh * shape.kw, cin = shape.in_channels, kt = result.kt;
  const int64_t k_total = kt * cin * khw;
  if (kt == 1) {
    result.weight = stored.view({shape.out_channels, k_total});
    return result;
  }
  // [out, in, kt, khw] -> [out, kt, in, khw]
  result.weight = Tensor::empty({shape.out_channels, k_total});
  const float* from = stored.data<float>();
  float* to = result.weight.data<float>();
#pragma omp parallel for schedule(static) if (shape.out_channels * k_total >= kParallelWork)
  for (int64_t o = 0; o < shape.out_channels; ++o)
    for (int64_t c = 0; c < cin; ++c)
      for (int64_t t = 0; t < kt; ++t)
        std::memcpy(to + o * k_total + (t * cin + c) * khw, from + o * k_total + (c * kt + t) * khw,
                    sizeof(float) * size_t(khw));
  return result;
}

void conv_frame(const ColumnWeights& w, const std::vector<const float*>& taps, int64_t src_h,
                int64_t src_w, bool upsample2x, float* out) {
  check(int64_t(taps.size()) == w.kt, "conv_frame: {} taps for a kernel of {}", taps.size(), w.kt);
  Geometry g;
  g.cin = w.in_channels;
  g.cout = w.out_channels;
  g.kh = w.kh;
  g.kw = w.kw;
  g.khw = w.kh * w.kw;
  g.first_tap = 0;
  while (g.first_tap < w.kt && taps[size_t(g.first_tap)] == nullptr) ++g.first_tap;
  for (int64_t t = g.first_tap; t < w.kt; ++t)
    check(taps[size_t(t)] != nullptr, "conv_frame: zero frames may only precede real ones");
  g.k_total = w.kt * g.cin * g.khw;
  g.k = (w.kt - g.first_tap) * g.cin * g.khw;
  g.src_h = src_h;
  g.src_w = src_w;
  g.upsample = upsample2x;
  g.height = upsample2x ? 2 * src_h : src_h;
  g.width = upsample2x ? 2 * src_w : src_w;
  const int64_t positions = g.height * g.width;

  if (g.k == 0) {  // every tap is causal padding: only the bias remains
    Strided c(out, g.cout, positions, Eigen::OuterStride<>(positions));
    c.setZero();
    if (w.bias.defined())
      for (int64_t o = 0; o < g.cout; ++o) c.row(o).array() += w.bias.data<float>()[o];
    return;
  }
  // The output rows are split into bands, a multiple of the thread count where the frame is tall
  // enough, each band im2col'ed and multiplied by one thread. Eigen's own GEMM threading syncs
  // far more often, which costs dearly on shared or oversubscribed cores.
  const bool pointwise = g.k == g.cin && !upsample2x;  // a 1×1 frame is its own column matrix
  const int64_t threads = omp_get_max_threads();
  const int64_t budget_bands =
      pointwise ? 1 : (g.k * positions + kColumnBudget - 1) / kColumnBudget;
  int64_t bands = (budget_bands + threads - 1) / threads * threads;
  bands = std::min(bands, g.height);
  const int64_t rows_per_band = (g.height + bands - 1) / bands;
  bands = (g.height + rows_per_band - 1) / rows_per_band;
  const bool small = g.cout * g.k * positions < kParallelWork;
#pragma omp parallel if (bands > 1 && !small)
  {
    std::unique_ptr<float[]> columns;
    if (!pointwise) columns.reset(new float[size_t(g.k * rows_per_band * g.width)]);
#pragma omp for schedule(static)
    for (int64_t band = 0; band < bands; ++band) {
      const int64_t r0 = band * rows_per_band, r1 = std::min(g.height, r0 + rows_per_band);
      if (pointwise) {
        multiply_band(g, w, taps[size_t(g.first_tap)] + r0 * g.width, positions, r0, r1, small,
                      out);
      } else {
        const int64_t n = (r1 - r0) * g.width;
        for (int64_t k = 0; k < g.k; ++k)
          fill_column_row(g, taps, k, r0, r1, columns.get() + k * n);
        multiply_band(g, w, columns.get(), n, r0, r1, small, out);
      }
    }
  }
}

Tensor conv3d(const Conv& conv, const Tensor& x, const ConvInputs& inputs) {
  const ColumnWeights weights = column_weights(conv);
  const int64_t frames = x.size(0), height = x.size(2), width = x.size(3);
  const int64_t scale = inputs.upsample2x ? 2 : 1;
  const int64_t kt = weights.kt;
  Tensor y = Tensor::empty({frames, conv.out_channels(), scale * height, scale * width});
  const int64_t remembered = inputs.history.defined() ? inputs.history.size(0) : 0;
  const int64_t in_frame = x.size(1) * height * width;
  const int64_t out_frame = conv.out_channels() * scale * height * scale * width;
  // Frame i of the chunk; negative i reaches back into the remembered frames, then zeros.
  auto frame = [&](int64_t i) -> const float* {
    if (i >= 0) return x.data<float>() + i * in_frame;
    const int64_t j = remembered + i;
    return j >= 0 ? inputs.history.data<float>() + j * in_frame : nullptr;
  };
  std::vector<const float*> taps(static_cast<size_t>(kt));
  for (int64_t t = 0; t < frames; ++t) {
    for (int64_t j = 0; j < kt; ++j) taps[size_t(j)] = frame(t + j - (kt - 1));
    conv_frame(weights, taps, height, width, inputs.upsample2x, y.data<float>() + t * out_frame);
  }
  if (inputs.residual.defined()) {
    float* a = y.data<float>();
    const float* b = inputs.residual.data<float>();
    const int64_t n = y.numel();
#pragma omp parallel for schedule(static) if (n >= kParallelElements)
    for (int64_t i = 0; i < n; ++i) a[i] += b[i];
  }
  return y;
}

void channel_rms_norm(const Tensor& x, const Tensor& gamma, bool silu, Tensor& y) {
  const int64_t frames = x.size(0), channels = x.size(1), positions = x.size(2) * x.size(3);
  constexpr int64_t kBlock = 256;  // positions per task; sums stay in registers/L1
  const int64_t blocks = (positions + kBlock - 1) / kBlock;
  const float scale = float(std::sqrt(double(channels)));
  const float* g = gamma.data<float>();
  const float* in = x.data<float>();
  float* out = y.data<float>();
#pragma omp parallel for collapse(2) schedule(static) if (x.numel() >= kParallelElements)
  for (int64_t t = 0; t < frames; ++t) {
    for (int64_t block = 0; block < blocks; ++block) {
      const int64_t p0 = block * kBlock, n = std::min(kBlock, positions - p0);
      const float* src = in + t * channels * positions + p0;
      float* dst = out + t * channels * positions + p0;
      double sums[kBlock] = {};
      for (int64_t c = 0; c < channels; ++c) {
        const float* row = src + c * positions;
        for (int64_t i = 0; i < n; ++i) sums[i] += double(row[i]) * row[i];
      }
      float denominators[kBlock];
      // F.normalize: x / max(‖x‖₂, 1e-12)
      for (int64_t i = 0; i < n; ++i) denominators[i] = std::max(float(std::sqrt(sums[i])), 1e-12f);
      for (int64_t c = 0; c < channels; ++c) {
        const float* row = src + c * positions;
        float* result = dst + c * positions;
        for (int64_t i = 0; i < n; ++i) {
          float v = row[i] / denominators[i] * scale * g[c];
          if (silu) v = v / (1.0f + std::exp(-v));
          result[i] = v;
        }
      }
    }
  }
}

Tensor clamp_channel_major(const Tensor& frames, float low, float high) {
  const int64_t count = frames.size(0), channels = frames.size(1);
  const int64_t plane = frames.size(2) * frames.size(3);
  Tensor out = Tensor::empty({channels, count, frames.size(2), frames.size(3)});
  const float* src = frames.data<float>();
  float* dst = out.data<float>();
#pragma omp parallel for collapse(2) schedule(static) if (frames.numel() >= kParallelElements)
  for (int64_t t = 0; t < count; ++t)
    for (int64_t c = 0; c < channels; ++c) {
      const float* from = src + (t * channels + c) * plane;
      float* to = dst + (c * count + t) * plane;
      for (int64_t p = 0; p < plane; ++p) to[p] = std::clamp(from[p], low, high);
    }
  return out;
}

}  // namespace mmgen::ops::cpu
