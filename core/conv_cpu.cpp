#include "core/conv_cpu.h"
// clang-format off
#include "core/x86_intrinsics.h"  // before anything that includes it: see there
// clang-format on

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>

#include "core/error.h"
#include "core/gemm_cpu.h"
#include "core/ops.h"
#include "core/parallel.h"
#include "core/transpose_cpu.h"

namespace mmgen::ops::cpu {
namespace {

// Floats in one band's buffers (its im2col rows, and its results before they are transposed):
// large enough that each product amortises packing the weights and keeps every thread busy, small
// enough to stay bounded for 1024-pixel-wide frames.
constexpr int64_t kBandBudget = int64_t(1) << 22;
// Elements below which an elementwise pass runs on one thread.
constexpr int64_t kParallelElements = int64_t(1) << 16;
// Output channels per task of the transposition back to channel-major planes.
constexpr int64_t kBlock = 16;
// Input channels from which a kernel's taps are read in place (Geometry::direct). Fewer would cut
// the product's depth blocks (256 steps of k) into short ones; those layers are small anyway.
constexpr int64_t kDirectChannels = 64;

// The geometry of one conv_frame call.
struct Geometry {
  int64_t cin, cout, kh, kw;
  int64_t first_tap;  // first non-zero tap
  int64_t taps;       // real taps (from first_tap on)
  int64_t k;          // im2col columns in use: taps · kh · kw · cin
  int64_t src_h, src_w, height, width;
  int64_t scale;  // 2 when the source is read enlarged ×2, else 1
  // Whether the product reads the kernel's taps straight from a zero-padded channels-last copy of
  // the band (cpu::SegmentedRows) rather than from im2col rows: for kernels wider than one pixel
  // over at least kDirectChannels channels, whose segments fill the product's depth blocks.
  bool direct;
  int64_t padded_width() const { return width + kw - 1; }
};

// One band of output rows [r0, r1): its source rows in channels-last order, its im2col rows, the
// product with the weights (cpu::linear_product, whose tile kernel and threads serve the linear
// layers), and the result back into channel-major planes.
class Band {
 public:
  Band(const Geometry& g, const std::vector<const float*>& taps,
       const mmgen::cpu::PackedWeight& weight, const float* bias)
      : g_(g), taps_(taps), weight_(weight), bias_(bias) {}

  void run(int64_t r0, int64_t r1, float* out) {
    if (g_.direct) return run_direct(r0, r1, out);
    const int64_t positions = (r1 - r0) * g_.width;
    // Source rows the band reads: output rows r0 - kh/2 .. r1 - 1 + kh/2 of the (enlarged) frame.
    const int64_t lo = std::max<int64_t>(0, r0 - g_.kh / 2);
    const int64_t hi = std::min(g_.height, r1 + (g_.kh - 1 - g_.kh / 2));
    s0_ = lo / g_.scale;
    const int64_t s1 = (hi - 1) / g_.scale + 1;
    rows_ = s1 - s0_;
    const bool pointwise = g_.k == g_.cin && g_.scale == 1;
    source_.resize(size_t(g_.taps * rows_ * g_.src_w * g_.cin));
    result_.resize(size_t(positions * g_.cout));
    if (!pointwise) columns_.resize(size_t(positions * g_.k));
    const int64_t plane = g_.src_h * g_.src_w;
    // [tap][row][x][channel]: each pixel's channels next to each other; then the im2col rows.
    const int64_t units = g_.taps * rows_;
    const int threads = threads_for(pointwise ? positions * g_.k : 2 * positions * g_.k);
#pragma omp parallel num_threads(threads) if (threads > 1)
    {
#pragma omp for schedule(static)
      for (int64_t u = 0; u < units; ++u) {
        const int64_t t = u / rows_, row = s0_ + u % rows_;
        mmgen::cpu::transpose(taps_[size_t(g_.first_tap + t)] + row * g_.src_w, plane, g_.cin,
                              g_.src_w, source_.data() + u * g_.src_w * g_.cin, g_.cin);
      }
      if (!pointwise) {
#pragma omp for schedule(static)
        for (int64_t p = 0; p < positions; ++p) fill_columns(r0 + p / g_.width, p % g_.width, p);
      }
    }
    const float* a = pointwise ? source_.data() : columns_.data();
    mmgen::cpu::linear_product(a, g_.k, weight_, bias_, result_.data(), positions);
    write_back(r0, r1, g_.width, out);
  }

 private:
  // The band as zero-padded channels-last rows [tap][row][x][channel], (kh - 1) rows and (kw - 1)
  // columns more than the output (enlarged first where asked). Output pixel (y, x) of the band is
  // product row q = y · padded_width + x, and its tap (t, ky, kx) reads the channels at row
  // q + ky · padded_width + kx of tap t's rows: each tap a segment at its own offset, rows cin
  // apart. The product also computes the kw - 1 rows between output rows; they are dropped.
  void run_direct(int64_t r0, int64_t r1, float* out) {
    const int64_t width = g_.padded_width(), rows = (r1 - r0) + g_.kh - 1;
    const int64_t tap_floats = rows * width * g_.cin;
    source_.resize(size_t(g_.taps * tap_floats));
    offsets_.clear();
    for (int64_t t = 0; t < g_.taps; ++t)
      for (int64_t ky = 0; ky < g_.kh; ++ky)
        for (int64_t kx = 0; kx < g_.kw; ++kx)
          offsets_.push_back(t * tap_floats + (ky * width + kx) * g_.cin);
    const int64_t m = (r1 - r0 - 1) * width + g_.width;
    result_.resize(size_t(m * g_.cout));
    const int64_t plane = g_.src_h * g_.src_w, left = g_.kw / 2;
    const int64_t units = g_.taps * rows;
    const int threads = std::min<int>(threads_for(g_.taps * tap_floats), int(units));
#pragma omp parallel num_threads(threads) if (threads > 1)
    {
      std::vector<float> narrow;  // a source row channels-last, before it is enlarged
#pragma omp for schedule(static)
      for (int64_t u = 0; u < units; ++u) {
        const int64_t t = u / rows, y = r0 - g_.kh / 2 + u % rows;  // y: (enlarged) frame row
        float* dst = source_.data() + u * width * g_.cin;
        if (y < 0 || y >= g_.height) {
          std::fill(dst, dst + width * g_.cin, 0.0f);
          continue;
        }
        std::fill(dst, dst + left * g_.cin, 0.0f);
        std::fill(dst + (left + g_.width) * g_.cin, dst + width * g_.cin, 0.0f);
        const float* row = taps_[size_t(g_.first_tap + t)] + (y / g_.scale) * g_.src_w;
        if (g_.scale == 1) {
          mmgen::cpu::transpose(row, plane, g_.cin, g_.src_w, dst + left * g_.cin, g_.cin);
          continue;
        }
        narrow.resize(size_t(g_.src_w * g_.cin));
        mmgen::cpu::transpose(row, plane, g_.cin, g_.src_w, narrow.data(), g_.cin);
        for (int64_t x = 0; x < g_.width; ++x)
          std::memcpy(dst + (left + x) * g_.cin, narrow.data() + (x / 2) * g_.cin,
                      sizeof(float) * size_t(g_.cin));
      }
    }
    mmgen::cpu::linear_product(
        mmgen::cpu::SegmentedRows{source_.data(), g_.cin, g_.cin, offsets_.data()}, weight_, bias_,
        result_.data(), m);
    write_back(r0, r1, width, out);
  }

  // The band's results back into channel-major planes: output pixel (y, x) of the band is result
  // row y · stride + x.
  void write_back(int64_t r0, int64_t r1, int64_t stride, float* out) const {
    const int64_t blocks = (g_.cout + kBlock - 1) / kBlock, tasks = (r1 - r0) * blocks;
    const int threads = std::min<int>(threads_for((r1 - r0) * g_.width * g_.cout), int(tasks));
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
    for (int64_t i = 0; i < tasks; ++i) {
      const int64_t y = i / blocks, o0 = (i % blocks) * kBlock, o1 = std::min(g_.cout, o0 + kBlock);
      mmgen::cpu::transpose(result_.data() + y * stride * g_.cout + o0, g_.cout, g_.width, o1 - o0,
                            out + o0 * g_.height * g_.width + (r0 + y) * g_.width,
                            g_.height * g_.width);
    }
  }

  // im2col row p: for output pixel (y, x), each real tap's kh x kw neighbourhood, a pixel's
  // channels at a time (columns in (tap, ky, kx, channel) order); zeros outside the frame.
  void fill_columns(int64_t y, int64_t x, int64_t p) {
    float* dst = columns_.data() + p * g_.k;
    const size_t bytes = sizeof(float) * size_t(g_.cin);
    for (int64_t t = 0; t < g_.taps; ++t) {
      const float* tap = source_.data() + t * rows_ * g_.src_w * g_.cin;
      for (int64_t ky = 0; ky < g_.kh; ++ky) {
        const int64_t sy = y + ky - g_.kh / 2;
        const bool row_inside = sy >= 0 && sy < g_.height;
        const float* row = tap + (row_inside ? sy / g_.scale - s0_ : 0) * g_.src_w * g_.cin;
        for (int64_t kx = 0; kx < g_.kw; ++kx, dst += g_.cin) {
          const int64_t sx = x + kx - g_.kw / 2;
          if (row_inside && sx >= 0 && sx < g_.width)
            std::memcpy(dst, row + (sx / g_.scale) * g_.cin, bytes);
          else
            std::memset(dst, 0, bytes);
        }
      }
    }
  }

  const Geometry& g_;
  const std::vector<const float*>& taps_;
  const mmgen::cpu::PackedWeight& weight_;
  const float* bias_;
  int64_t s0_ = 0, rows_ = 0;  // the band's first source row, and how many it reads
  std::vector<float> source_, columns_, result_;
  std::vector<int64_t> offsets_;
};

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
  if (kt * khw == 1) {  // a 1x1 convolution's weight is already [out, in]
    result.weight = stored.view({shape.out_channels, k_total});
    return result;
  }
  // [out, in, kt, kh, kw] -> [out, kt, kh, kw, in]
  result.weight = Tensor::empty({shape.out_channels, k_total});
  const float* from = stored.data<float>();
  float* to = result.weight.data<float>();
  const int64_t spots = kt * khw;  // (tap, ky, kx) in order
#pragma omp parallel for schedule(static) if (shape.out_channels * k_total >= kParallelElements)
  for (int64_t o = 0; o < shape.out_channels; ++o)
    mmgen::cpu::transpose(from + o * k_total, spots, cin, spots, to + o * k_total, cin);
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
  g.first_tap = 0;
  while (g.first_tap < w.kt && taps[size_t(g.first_tap)] == nullptr) ++g.first_tap;
  for (int64_t t = g.first_tap; t < w.kt; ++t)
    check(taps[size_t(t)] != nullptr, "conv_frame: zero frames may only precede real ones");
  g.taps = w.kt - g.first_tap;
  g.k = g.taps * g.kh * g.kw * g.cin;
  g.src_h = src_h;
  g.src_w = src_w;
  g.scale = upsample2x ? 2 : 1;
  g.height = g.scale * src_h;
  g.width = g.scale * src_w;
  const int64_t positions = g.height * g.width;
  const float* bias = w.bias.defined() ? w.bias.data<float>() : nullptr;

  if (g.k == 0) {  // every tap is causal padding: only the bias remains
    for (int64_t o = 0; o < g.cout; ++o)
      std::fill(out + o * positions, out + (o + 1) * positions, bias ? bias[o] : 0.0f);
    return;
  }
  // The taps that read zeros contribute nothing: the product takes the columns of the others
  // (the last g.k), copied out contiguous, as the packing reads whole rows. Packed once for all
  // the bands, and for the call's other frames with as many zero taps.
  if (w.packed.empty()) w.packed.resize(size_t(w.kt));
  auto& packed = w.packed[size_t(g.first_tap)];
  if (!packed) {
    const int64_t k_total = w.kt * g.kh * g.kw * g.cin;
    const float* weight = w.weight.data<float>();
    std::vector<float> real_taps;
    if (g.k < k_total) {
      real_taps.resize(size_t(g.cout * g.k));
      for (int64_t o = 0; o < g.cout; ++o)
        std::memcpy(real_taps.data() + o * g.k, weight + o * k_total + (k_total - g.k),
                    sizeof(float) * size_t(g.k));
      weight = real_taps.data();
    }
    packed = std::make_shared<const mmgen::cpu::PackedWeight>(weight, DType::F32, g.cout, g.k);
  }
  // Whole output rows per band, as many as the budget holds (at least one).
  g.direct = g.kh * g.kw > 1 && g.cin >= kDirectChannels;
  const int64_t per_row = g.direct ? g.padded_width() * std::max(g.taps * g.cin, g.cout)
                                   : g.width * std::max(g.k, g.cout);
  const int64_t rows_per_band = std::clamp<int64_t>(kBandBudget / per_row, 1, g.height);
  Band band(g, taps, *packed, bias);
  for (int64_t r0 = 0; r0 < g.height; r0 += rows_per_band)
    band.run(r0, std::min(g.height, r0 + rows_per_band), out);
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
