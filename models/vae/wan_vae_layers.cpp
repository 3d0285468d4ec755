#include "models/vae/wan_vae_layers.h"
// clang-format off
#include "core/x86_intrinsics.h"  // before anything that includes it: see there
// clang-format on

#include <Eigen/Core>
#include <algorithm>
#include <cmath>

#include "attention/device_attention.h"
#include "core/error.h"
#include "models/parameters.h"

namespace mmgen::vae {
namespace {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstMatrixMap = Eigen::Map<const RowMatrix>;
using MatrixMap = Eigen::Map<RowMatrix>;

Shape weight_shape(const ops::ConvShape& s) {
  if (s.kt == 0) return {s.out_channels, s.in_channels, s.kh, s.kw};
  return {s.out_channels, s.in_channels, s.kt, s.kh, s.kw};
}

constexpr models::CheckpointKind kWanVaeCheckpoint{
    "VAE", "Wan2.1 AutoencoderKLWan (or AutoencoderKLQwenImage)"};

void require_frames(const Tensor& x, int64_t channels, const std::string& where) {
  check(x.dim() == 4 && x.dtype() == DType::F32 && x.is_contiguous(),
        "{}: expects contiguous float32 frames [T, C, H, W], got {}", where,
        shape_string(x.shape()));
  check(x.size(1) == channels, "{}: expects {} channels, got {}", where, channels, x.size(1));
}

// One frame's single-head attention on the CPU: q, k, v [C, positions] -> out [C, positions],
// through `backend` when the plan gave one, else the built-in dense path.
void attend_on_cpu(ConstMatrixMap q, ConstMatrixMap k, ConstMatrixMap v, float scale,
                   attention::Layer& attention, MatrixMap out) {
  const int64_t channels = q.rows(), positions = q.cols();
  if (attention.backend()) {
    // One head over the frame's positions: [1, positions, 1, C] for the backend interface.
    Tensor qt = Tensor::empty({1, positions, 1, channels}),
           kt = Tensor::empty({1, positions, 1, channels}),
           vt = Tensor::empty({1, positions, 1, channels});
    MatrixMap(qt.data<float>(), positions, channels) = q.transpose();
    MatrixMap(kt.data<float>(), positions, channels) = k.transpose();
    MatrixMap(vt.data<float>(), positions, channels) = v.transpose();
    const Tensor o = attention.forward(qt, kt, vt, {.scale = scale}).contiguous();
    out = ConstMatrixMap(o.data<float>(), positions, channels).transpose();
    return;
  }
  constexpr int64_t kQueryBlock = 128;  // bounds the score matrix to 128 × H·W per thread
  const int64_t blocks = (positions + kQueryBlock - 1) / kQueryBlock;
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

}  // namespace

ops::Conv checked_conv(const WeightStore& store, const std::string& prefix,
                       const ops::ConvShape& shape) {
  const std::string weight = prefix + ".weight", bias = prefix + ".bias";
  models::expect_tensor(store, weight, weight_shape(shape), kWanVaeCheckpoint);
  models::expect_tensor(store, bias, {shape.out_channels}, kWanVaeCheckpoint);
  return ops::Conv(store.get(weight), store.get(bias), shape);
}

// ---- CausalConv3d ------------------------------------------------------------------------------

CausalConv3d::CausalConv3d(const WeightStore& store, const std::string& prefix,
                           ops::ConvShape shape, SlotCounter& slots)
    : conv_(checked_conv(store, prefix, shape)) {
  if (conv_.taps() > 1) slot_ = slots.history++;
}

Tensor CausalConv3d::forward(const Tensor& x, StreamState& state, const Tensor& residual,
                             bool rounded) const {
  ops::ConvInputs inputs;
  inputs.residual = residual;
  inputs.precision = state.precision;
  inputs.input_tf32_rounded = rounded;
  Tensor* history = nullptr;
  if (slot_ >= 0) {
    history = &state.history[size_t(slot_)];
    inputs.history = *history;
  }
  Tensor y = ops::conv3d(conv_, x, inputs);
  state.flops += ops::conv3d_flops(conv_, x, inputs);
  // Remember the last kt − 1 input frames, as diffusers' cache does.
  if (history && !state.last_chunk) *history = ops::last_frames(*history, x, conv_.taps() - 1);
  return y;
}

Tensor CausalConv3d::forward_upsampled(const Tensor& x, StreamState& state) const {
  check(slot_ < 0, "an upsampling convolution has one temporal tap");
  ops::ConvInputs inputs;
  inputs.upsample2x = true;
  inputs.precision = state.precision;
  state.flops += ops::conv3d_flops(conv_, x, inputs);
  return ops::conv3d(conv_, x, inputs);
}

// ---- ChannelNorm -------------------------------------------------------------------------------

ChannelNorm::ChannelNorm(const WeightStore& store, const std::string& name, const Shape& shape) {
  models::expect_tensor(store, name, shape, kWanVaeCheckpoint);
  host_ = store.get_f32(name).contiguous().view({shape[0]});
  gamma_ = host_;
}

Tensor ChannelNorm::forward(const Tensor& x, bool silu, const StreamState& state) const {
  return ops::channel_rms_norm(x, gamma_, silu, state.round_in_norms);
}

void ChannelNorm::forward_(Tensor& x, bool silu, const StreamState& state) const {
  ops::channel_rms_norm(x, gamma_, silu, x, state.round_in_norms);
}

// ---- ResidualBlock -----------------------------------------------------------------------------

ResidualBlock::ResidualBlock(const WeightStore& store, const std::string& prefix, int64_t in_dim,
                             int64_t out_dim, SlotCounter& slots)
    : prefix_(prefix), in_dim_(in_dim), out_dim_(out_dim), has_shortcut_(in_dim != out_dim) {
  norm1_ = ChannelNorm(store, prefix + ".norm1.gamma", {in_dim, 1, 1, 1});
  norm2_ = ChannelNorm(store, prefix + ".norm2.gamma", {out_dim, 1, 1, 1});
  conv1_ = CausalConv3d(store, prefix + ".conv1", {out_dim, in_dim, 3, 3, 3}, slots);
  conv2_ = CausalConv3d(store, prefix + ".conv2", {out_dim, out_dim, 3, 3, 3}, slots);
  if (has_shortcut_)
    shortcut_ = CausalConv3d(store, prefix + ".conv_shortcut", {out_dim, in_dim, 1, 1, 1}, slots);
}

void ResidualBlock::place(Device device) {
  norm1_.place(device), norm2_.place(device);
  conv1_.place(device), conv2_.place(device);
  if (has_shortcut_) shortcut_.place(device);
}

size_t ResidualBlock::resident_bytes() const {
  return norm1_.resident_bytes() + norm2_.resident_bytes() + conv1_.resident_bytes() +
         conv2_.resident_bytes() + (has_shortcut_ ? shortcut_.resident_bytes() : 0);
}

Tensor ResidualBlock::forward(const Tensor& x, StreamState& state) const {
  require_frames(x, in_dim_, prefix_);
  const Tensor identity = has_shortcut_ ? shortcut_.forward(x, state) : x;
  const bool rounded = state.round_in_norms;
  Tensor h = conv1_.forward(norm1_.forward(x, /*silu=*/true, state), state, Tensor(), rounded);
  norm2_.forward_(h, /*silu=*/true, state);
  return conv2_.forward(h, state, identity, rounded);  // dropout is the identity at inference
}

// ---- AttentionBlock ----------------------------------------------------------------------------

AttentionBlock::AttentionBlock(const WeightStore& store, const std::string& prefix, int64_t dim)
    : prefix_(prefix), dim_(dim) {
  SlotCounter none;  // 1×1 convolutions remember nothing
  norm_ = ChannelNorm(store, prefix + ".norm.gamma", {dim, 1, 1});
  to_qkv_ = CausalConv3d(store, prefix + ".to_qkv", {3 * dim, dim, 0, 1, 1}, none);
  proj_ = CausalConv3d(store, prefix + ".proj", {dim, dim, 0, 1, 1}, none);
}

void AttentionBlock::place(Device device) {
  norm_.place(device), to_qkv_.place(device), proj_.place(device);
}

size_t AttentionBlock::resident_bytes() const {
  return norm_.resident_bytes() + to_qkv_.resident_bytes() + proj_.resident_bytes();
}

Tensor AttentionBlock::forward(const Tensor& x, StreamState& state,
                               attention::Layer& attention) const {
  require_frames(x, dim_, prefix_);
  const int64_t frames = x.size(0), channels = dim_, positions = x.size(2) * x.size(3);
  // Channels [0, C) are the queries, [C, 2C) the keys, [2C, 3C) the values (diffusers chunks the
  // 3C axis in that order); each is [C, positions] per frame.
  const Tensor qkv = to_qkv_.forward(norm_.forward(x, /*silu=*/false, state), state, Tensor(),
                                     state.round_in_norms);
  const float scale = 1.0f / std::sqrt(float(channels));
  Tensor attended = Tensor::empty(x.shape(), DType::F32, x.device());
  for (int64_t t = 0; t < frames; ++t) {
    const Tensor frame = qkv.select(0, t).view({3 * channels, positions});
    const Tensor q = frame.slice(0, 0, channels), k = frame.slice(0, channels, 2 * channels),
                 v = frame.slice(0, 2 * channels, 3 * channels);
    if (x.is_cpu()) {
      attend_on_cpu(
          ConstMatrixMap(q.data<float>(), channels, positions),
          ConstMatrixMap(k.data<float>(), channels, positions),
          ConstMatrixMap(v.data<float>(), channels, positions), scale, attention,
          MatrixMap(attended.data<float>() + t * channels * positions, channels, positions));
    } else {
      Tensor out = attended.select(0, t).view({channels, positions});
      attention::channel_attention_gpu(q, k, v, scale, state.precision == ops::ConvPrecision::FP32,
                                       out);
    }
    state.flops += 4.0 * double(positions) * double(positions) * double(channels);
  }
  return proj_.forward(attended, state, x);
}

// ---- Resample ----------------------------------------------------------------------------------

Resample::Resample(const WeightStore& store, const std::string& prefix, int64_t dim, bool temporal,
                   SlotCounter& slots)
    : prefix_(prefix), dim_(dim), temporal_(temporal) {
  conv_ = CausalConv3d(store, prefix + ".resample.1", {dim / 2, dim, 0, 3, 3}, slots);
  if (temporal_) {
    time_conv_ = CausalConv3d(store, prefix + ".time_conv", {2 * dim, dim, 3, 1, 1}, slots);
    started_slot_ = slots.started++;
  }
}

void Resample::place(Device device) {
  conv_.place(device);
  if (temporal_) time_conv_.place(device);
}

size_t Resample::resident_bytes() const {
  return conv_.resident_bytes() + (temporal_ ? time_conv_.resident_bytes() : 0);
}

Tensor Resample::forward(const Tensor& x, StreamState& state) const {
  require_frames(x, dim_, prefix_);
  Tensor frames = x;
  if (temporal_) {
    if (!state.started[size_t(started_slot_)]) {
      state.started[size_t(started_slot_)] = true;  // "Rep": the first chunk keeps its one frame
    } else {
      // [T, 2C, H, W] is frame-major, so reading it as [2T, C, H, W] puts channels [0, C) of
      // frame t at 2t and [C, 2C) at 2t + 1: diffusers' stack-and-reshape, without a copy.
      const Tensor doubled = time_conv_.forward(x, state);
      frames = doubled.view({2 * x.size(0), dim_, x.size(2), x.size(3)});
    }
  }
  return conv_.forward_upsampled(frames, state);
}

}  // namespace mmgen::vae
