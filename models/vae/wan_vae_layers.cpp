#include "models/vae/wan_vae_layers.h"

#include <omp.h>

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <memory>

#include "core/error.h"

namespace mmgen::vae {
namespace {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstMatrixMap = Eigen::Map<const RowMatrix>;
using MatrixMap = Eigen::Map<RowMatrix>;

void check_gamma(const WeightStore& store, const std::string& name, const Shape& shape) {
  check(store.has(name), "VAE weights in {} lack '{}'; is this a Wan2.1 AutoencoderKLWan?",
        store.origin().string(), name);
  check(store.info(name).shape == shape,
        "VAE weight '{}' in {} has shape {} but config.json implies {}", name,
        store.origin().string(), shape_string(store.info(name).shape), shape_string(shape));
}

// Elements below which an elementwise pass runs on one thread (see conv_kernels.cpp).
constexpr int64_t kParallelElements = int64_t(1) << 16;

int64_t frame_size(const Tensor& x) {
  return x.size(1) * x.size(2) * x.size(3);
}

// x += y elementwise (same shape, contiguous float32).
void add_in_place(Tensor& x, const Tensor& y) {
  float* a = x.data<float>();
  const float* b = y.data<float>();
  const int64_t n = x.numel();
#pragma omp parallel for schedule(static) if (n >= kParallelElements)
  for (int64_t i = 0; i < n; ++i) a[i] += b[i];
}

void require_frames(const Tensor& x, int64_t channels, const std::string& where) {
  check(x.dim() == 4 && x.dtype() == DType::F32 && x.is_contiguous(),
        "{}: expects contiguous float32 frames [T, C, H, W], got {}", where,
        shape_string(x.shape()));
  check(x.size(1) == channels, "{}: expects {} channels, got {}", where, channels, x.size(1));
}

}  // namespace

void channel_rms_norm(const Tensor& x, const Tensor& gamma, bool silu, Tensor& y) {
  const int64_t frames = x.size(0), channels = x.size(1), positions = x.size(2) * x.size(3);
  check(y.shape() == x.shape() && gamma.numel() == channels, "channel_rms_norm: shape mismatch");
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

// ---- CausalConv3d ------------------------------------------------------------------------------

CausalConv3d::CausalConv3d(const WeightStore& store, std::string prefix, ConvShape shape,
                           SlotCounter& slots)
    : prefix_(std::move(prefix)), shape_(shape) {
  check_conv(store, prefix_, shape_);
  if (shape_.kt > 1) slot_ = slots.history++;
}

Tensor CausalConv3d::forward(const WeightStore& store, const Tensor& x, StreamState* state) const {
  require_frames(x, shape_.in_channels, prefix_);
  const int64_t frames = x.size(0), height = x.size(2), width = x.size(3);
  const int64_t kt = std::max<int64_t>(shape_.kt, 1);
  const ConvWeights weights = load_conv(store, prefix_, shape_);
  Tensor y = Tensor::empty({frames, shape_.out_channels, height, width});

  std::vector<Tensor>* history = nullptr;
  if (slot_ >= 0) {
    check(state != nullptr, "{}: a causal convolution needs the stream state", prefix_);
    history = &state->history[size_t(slot_)];
  }
  const int64_t remembered = history ? int64_t(history->size()) : 0;
  const int64_t in_frame = frame_size(x), out_frame = shape_.out_channels * height * width;
  // Frame i of the chunk; negative i reaches back into the remembered frames, then zeros.
  auto frame = [&](int64_t i) -> const float* {
    if (i >= 0) return x.data<float>() + i * in_frame;
    const int64_t j = remembered + i;
    return j >= 0 ? (*history)[size_t(j)].data<float>() : nullptr;
  };
  std::vector<const float*> taps(static_cast<size_t>(kt));
  for (int64_t t = 0; t < frames; ++t) {
    for (int64_t j = 0; j < kt; ++j) taps[size_t(j)] = frame(t + j - (kt - 1));
    conv_frame(weights, taps, height, width, /*upsample2x=*/false, y.data<float>() + t * out_frame);
  }

  if (history) {  // remember the last kt - 1 input frames, as diffusers' cache does
    std::vector<Tensor> kept;
    for (int64_t i = std::max<int64_t>(frames - (kt - 1), -remembered); i < frames; ++i)
      kept.push_back(i < 0 ? (*history)[size_t(remembered + i)] : x.select(0, i).clone());
    *history = std::move(kept);
  }
  return y;
}

// ---- ResidualBlock -----------------------------------------------------------------------------

ResidualBlock::ResidualBlock(const WeightStore& store, const std::string& prefix, int64_t in_dim,
                             int64_t out_dim, SlotCounter& slots)
    : prefix_(prefix), in_dim_(in_dim), out_dim_(out_dim), has_shortcut_(in_dim != out_dim) {
  check_gamma(store, prefix + ".norm1.gamma", {in_dim, 1, 1, 1});
  check_gamma(store, prefix + ".norm2.gamma", {out_dim, 1, 1, 1});
  conv1_ = CausalConv3d(store, prefix + ".conv1", {out_dim, in_dim, 3, 3, 3}, slots);
  conv2_ = CausalConv3d(store, prefix + ".conv2", {out_dim, out_dim, 3, 3, 3}, slots);
  if (has_shortcut_)
    shortcut_ = CausalConv3d(store, prefix + ".conv_shortcut", {out_dim, in_dim, 1, 1, 1}, slots);
}

Tensor ResidualBlock::forward(const WeightStore& store, const Tensor& x, StreamState& state) const {
  require_frames(x, in_dim_, prefix_);
  const Tensor identity = has_shortcut_ ? shortcut_.forward(store, x, nullptr) : x;
  Tensor h = Tensor::empty(x.shape());
  channel_rms_norm(x, store.get_f32(prefix_ + ".norm1.gamma"), /*silu=*/true, h);
  h = conv1_.forward(store, h, &state);
  channel_rms_norm(h, store.get_f32(prefix_ + ".norm2.gamma"), /*silu=*/true, h);
  h = conv2_.forward(store, h, &state);  // dropout is the identity at inference
  add_in_place(h, identity);
  return h;
}

// ---- AttentionBlock ----------------------------------------------------------------------------

AttentionBlock::AttentionBlock(const WeightStore& store, const std::string& prefix, int64_t dim)
    : prefix_(prefix), dim_(dim) {
  check_gamma(store, prefix + ".norm.gamma", {dim, 1, 1});
  check_conv(store, prefix + ".to_qkv", {3 * dim, dim, 0, 1, 1});
  check_conv(store, prefix + ".proj", {dim, dim, 0, 1, 1});
}

Tensor AttentionBlock::forward(const WeightStore& store, const Tensor& x,
                               attention::AttentionBackend* backend) const {
  require_frames(x, dim_, prefix_);
  const int64_t frames = x.size(0), channels = dim_, height = x.size(2), width = x.size(3);
  const int64_t positions = height * width;
  const ConvWeights to_qkv = load_conv(store, prefix_ + ".to_qkv", {3 * dim_, dim_, 0, 1, 1});
  const ConvWeights proj = load_conv(store, prefix_ + ".proj", {dim_, dim_, 0, 1, 1});

  Tensor normed = Tensor::empty(x.shape());
  channel_rms_norm(x, store.get_f32(prefix_ + ".norm.gamma"), /*silu=*/false, normed);
  Tensor qkv = Tensor::empty({3 * channels, positions});
  Tensor attended = Tensor::empty({channels, positions});
  Tensor y = Tensor::empty(x.shape());
  const float scale = 1.0f / std::sqrt(float(channels));
  constexpr int64_t kQueryBlock = 128;  // bounds the score matrix to 128 × H·W per thread
  const int64_t blocks = (positions + kQueryBlock - 1) / kQueryBlock;

  for (int64_t t = 0; t < frames; ++t) {
    conv_frame(to_qkv, {normed.data<float>() + t * channels * positions}, height, width, false,
               qkv.data<float>());
    // Channels [0, C) are the queries, [C, 2C) the keys, [2C, 3C) the values (diffusers chunks
    // the 3C axis in that order); each is [C, positions].
    ConstMatrixMap q(qkv.data<float>(), channels, positions);
    ConstMatrixMap k(qkv.data<float>() + channels * positions, channels, positions);
    ConstMatrixMap v(qkv.data<float>() + 2 * channels * positions, channels, positions);
    MatrixMap out(attended.data<float>(), channels, positions);
    if (backend) {
      // One head over the frame's positions: [1, positions, 1, C] for the backend interface.
      Tensor qt = Tensor::empty({1, positions, 1, channels}),
             kt = Tensor::empty({1, positions, 1, channels}),
             vt = Tensor::empty({1, positions, 1, channels});
      MatrixMap(qt.data<float>(), positions, channels) = q.transpose();
      MatrixMap(kt.data<float>(), positions, channels) = k.transpose();
      MatrixMap(vt.data<float>(), positions, channels) = v.transpose();
      const Tensor o =
          backend->forward(qt, kt, vt, scale, attention::AttentionContext{}).contiguous();
      out = ConstMatrixMap(o.data<float>(), positions, channels).transpose();
    } else {
      // Small frames stay on one thread, with coefficient-wise products (Eigen's blocked GEMM would
      // start threads of its own).
      const bool small = positions * positions * channels < (int64_t(1) << 22);
#pragma omp parallel if (blocks > 1 && !small)
      {
        RowMatrix scores(kQueryBlock, positions);
        RowMatrix result(kQueryBlock, channels);
#pragma omp for schedule(dynamic)
        for (int64_t block = 0; block < blocks; ++block) {
          const int64_t i0 = block * kQueryBlock, n = std::min(kQueryBlock, positions - i0);
          auto s = scores.topRows(n);
          if (small)
            s.noalias() = q.middleCols(i0, n).transpose().lazyProduct(k);
          else
            s.noalias() = q.middleCols(i0, n).transpose() * k;
          for (int64_t i = 0; i < n; ++i) {
            float* row = s.row(i).data();
            float highest = -INFINITY;
            for (int64_t j = 0; j < positions; ++j) highest = std::max(highest, row[j] * scale);
            double sum = 0;
            for (int64_t j = 0; j < positions; ++j) {
              row[j] = std::exp(row[j] * scale - highest);
              sum += row[j];
            }
            const float inverse = float(1.0 / sum);
            for (int64_t j = 0; j < positions; ++j) row[j] *= inverse;
          }
          auto r = result.topRows(n);
          if (small)
            r.noalias() = s.lazyProduct(v.transpose());
          else
            r.noalias() = s * v.transpose();
          out.middleCols(i0, n) = r.transpose();
        }
      }
    }
    float* dst = y.data<float>() + t * channels * positions;
    conv_frame(proj, {attended.data<float>()}, height, width, false, dst);
    const float* src = x.data<float>() + t * channels * positions;
    for (int64_t i = 0; i < channels * positions; ++i) dst[i] += src[i];
  }
  return y;
}

// ---- Resample ----------------------------------------------------------------------------------

Resample::Resample(const WeightStore& store, const std::string& prefix, int64_t dim, bool temporal,
                   SlotCounter& slots)
    : prefix_(prefix), dim_(dim), temporal_(temporal) {
  check_conv(store, prefix + ".resample.1", {dim / 2, dim, 0, 3, 3});
  if (temporal_) {
    time_conv_ = CausalConv3d(store, prefix + ".time_conv", {2 * dim, dim, 3, 1, 1}, slots);
    started_slot_ = slots.started++;
  }
}

Tensor Resample::forward(const WeightStore& store, const Tensor& x, StreamState& state) const {
  require_frames(x, dim_, prefix_);
  Tensor frames = x;
  if (temporal_) {
    if (!state.started[size_t(started_slot_)]) {
      state.started[size_t(started_slot_)] = true;  // "Rep": the first chunk keeps its one frame
    } else {
      // [T, 2C, H, W] is frame-major, so reading it as [2T, C, H, W] puts channels [0, C) of
      // frame t at 2t and [C, 2C) at 2t + 1: diffusers' stack-and-reshape, without a copy.
      Tensor doubled = time_conv_.forward(store, x, &state);
      frames = doubled.view({2 * x.size(0), dim_, x.size(2), x.size(3)});
    }
  }
  const int64_t count = frames.size(0), height = frames.size(2), width = frames.size(3);
  const ConvWeights conv = load_conv(store, prefix_ + ".resample.1", {dim_ / 2, dim_, 0, 3, 3});
  Tensor y = Tensor::empty({count, dim_ / 2, 2 * height, 2 * width});
  const int64_t in_frame = frame_size(frames), out_frame = frame_size(y);
  for (int64_t t = 0; t < count; ++t)
    conv_frame(conv, {frames.data<float>() + t * in_frame}, height, width, /*upsample2x=*/true,
               y.data<float>() + t * out_frame);
  return y;
}

}  // namespace mmgen::vae
