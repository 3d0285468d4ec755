// The layers of the Wan2.1 VAE decoder (diffusers' WanCausalConv3d, WanResidualBlock,
// WanAttentionBlock, WanResample), written once over the device-neutral convolution ops of
// core/conv.h. Activations are one batch element's frames, [T, C, H, W] float32 contiguous, on the
// device the layers were placed on.
//
// Decoding streams one latent frame at a time. Every causal convolution remembers its last
// kt − 1 input frames (zeros before the first), which is exactly what diffusers' feature cache
// (CACHE_T = 2) amounts to; the upsample3d "Rep" rule is kept separately (see Resample).
#pragma once

#include <string>
#include <vector>

#include "attention/layer.h"
#include "core/conv.h"
#include "core/safetensors.h"
#include "core/tensor.h"

namespace mmgen::vae {

// What one decode carries from latent frame to latent frame, and how it computes.
struct StreamState {
  std::vector<Tensor> history;  // per causal conv: its last input frames [n, C, H, W], oldest first
  std::vector<bool> started;    // per upsample3d: has it seen the first chunk?
  ops::ConvPrecision precision = ops::ConvPrecision::TF32;  // the GPU's products
  // The norms round their outputs to TF32 for the convolutions reading them (GPU, TF32).
  bool round_in_norms = false;
  double flops = 0;  // spent by the convolutions and attention products so far
  // The chunk now decoded is the stream's last: no convolution keeps its frames for a next one
  // (for a one-frame video, every tail convolution copied its full-resolution input for nothing).
  bool last_chunk = false;
};

// Hands out StreamState slots while the layers are built.
struct SlotCounter {
  int history = 0;
  int started = 0;
  StreamState make_state() const {
    StreamState state;
    state.history.resize(size_t(history));
    state.started.assign(size_t(started), false);
    return state;
  }
};

// The checkpoint's `<prefix>.weight` / `<prefix>.bias` as a convolution of `shape`, checked
// (naming the tensor and file when one is missing or misshapen).
ops::Conv checked_conv(const WeightStore& store, const std::string& prefix,
                       const ops::ConvShape& shape);

// A causal 3-D convolution: all temporal padding in front, filled from the remembered frames.
class CausalConv3d {
 public:
  CausalConv3d() = default;
  CausalConv3d(const WeightStore& store, const std::string& prefix, ops::ConvShape shape,
               SlotCounter& slots);
  void place(Device device) { conv_ = conv_.to(device); }
  size_t resident_bytes() const { return conv_.resident_bytes(); }
  // [T, in, H, W] -> [T, out, H, W] (+ residual when given), in the state's precision; a causal
  // convolution reads and updates its memory in `state`. `rounded`: x came from a norm that
  // rounded it (StreamState).
  Tensor forward(const Tensor& x, StreamState& state, const Tensor& residual = Tensor(),
                 bool rounded = false) const;
  // A one-tap convolution of x enlarged ×2 by nearest neighbour (never materialised).
  Tensor forward_upsampled(const Tensor& x, StreamState& state) const;
  int64_t out_channels() const { return conv_.out_channels(); }

 private:
  ops::Conv conv_;
  int slot_ = -1;  // history slot, -1 for kt = 1 (nothing to remember)
};

// A WanRMS_norm's gamma, float32 on the layers' device.
class ChannelNorm {
 public:
  ChannelNorm() = default;
  ChannelNorm(const WeightStore& store, const std::string& name, const Shape& shape);
  void place(Device device) { gamma_ = host_.to(device); }
  size_t resident_bytes() const { return gamma_.is_cpu() ? 0 : gamma_.nbytes(); }
  // WanRMS_norm over the channels, then SiLU when asked; rounds for a following convolution as
  // `state` says.
  Tensor forward(const Tensor& x, bool silu, const StreamState& state) const;
  void forward_(Tensor& x, bool silu, const StreamState& state) const;

 private:
  Tensor host_, gamma_;
};

class ResidualBlock {
 public:
  ResidualBlock(const WeightStore& store, const std::string& prefix, int64_t in_dim,
                int64_t out_dim, SlotCounter& slots);
  void place(Device device);
  size_t resident_bytes() const;
  Tensor forward(const Tensor& x, StreamState& state) const;

 private:
  std::string prefix_;
  int64_t in_dim_, out_dim_;
  ChannelNorm norm1_, norm2_;
  CausalConv3d conv1_, conv2_, shortcut_;
  bool has_shortcut_;
};

// Single-head self-attention over the H·W positions of each frame.
class AttentionBlock {
 public:
  AttentionBlock(const WeightStore& store, const std::string& prefix, int64_t dim);
  void place(Device device);
  size_t resident_bytes() const;
  // With `backend` (the one the attention plan chose for the VAE: a dense backend), each frame's
  // attention on the CPU runs through it; without, through the built-in dense path. On the GPU
  // it is attention::channel_attention_gpu, the dense reference.
  Tensor forward(const Tensor& x, StreamState& state, attention::Layer& attention) const;

 private:
  std::string prefix_;
  int64_t dim_;
  ChannelNorm norm_;
  CausalConv3d to_qkv_, proj_;
};

// WanResample in its decoder modes: upsample2d (nearest ×2 then 3×3 conv, per frame) and
// upsample3d (a (3,1,1) causal time_conv doubling the frames, then the same).
//
// The "Rep" rule: the first chunk skips time_conv (its one frame stays one frame) and is not
// remembered; from the second chunk on time_conv runs over the later frames with zero history.
class Resample {
 public:
  Resample(const WeightStore& store, const std::string& prefix, int64_t dim, bool temporal,
           SlotCounter& slots);
  void place(Device device);
  size_t resident_bytes() const;
  Tensor forward(const Tensor& x, StreamState& state) const;

 private:
  std::string prefix_;
  int64_t dim_;
  bool temporal_;
  CausalConv3d time_conv_;
  CausalConv3d conv_;  // resample.1: the 3×3 convolution read through the ×2 upsampling
  int started_slot_ = -1;
};

}  // namespace mmgen::vae
