// The layers of the Wan2.1 VAE decoder (diffusers' WanCausalConv3d, WanResidualBlock,
// WanAttentionBlock, WanResample). Activations are one batch element's frames, [T, C, H, W]
// float32 contiguous: each frame is a contiguous [C, H, W] plane, which is what the convolutions,
// the per-frame attention and the time-doubling reshape want.
//
// Decoding streams one latent frame at a time. Every causal convolution remembers its last
// kt − 1 input frames (zeros before the first), which is exactly what diffusers' feature cache
// (CACHE_T = 2) amounts to; the upsample3d "Rep" rule is kept separately (see Resample).
#pragma once

#include <string>
#include <vector>

#include "attention/backend.h"
#include "core/safetensors.h"
#include "core/tensor.h"
#include "models/vae/conv_kernels.h"

namespace mmgen::vae {

// What one decode carries from latent frame to latent frame.
struct StreamState {
  std::vector<std::vector<Tensor>> history;  // per causal conv: last input frames, oldest first
  std::vector<bool> started;                 // per upsample3d: has it seen the first chunk?
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

// WanRMS_norm over channels (F.normalize · √C · gamma), optionally followed by SiLU.
// `x` and `y` are [T, C, H, W]; they may be the same tensor.
void channel_rms_norm(const Tensor& x, const Tensor& gamma, bool silu, Tensor& y);

// A causal 3-D convolution: all temporal padding in front, filled from the remembered frames.
class CausalConv3d {
 public:
  CausalConv3d() = default;
  CausalConv3d(const WeightStore& store, std::string prefix, ConvShape shape, SlotCounter& slots);
  // [T, in, H, W] -> [T, out, H, W]; `state` may be null for a kernel with one temporal tap.
  Tensor forward(const WeightStore& store, const Tensor& x, StreamState* state) const;
  int64_t out_channels() const { return shape_.out_channels; }

 private:
  std::string prefix_;
  ConvShape shape_{};
  int slot_ = -1;  // history slot, -1 for kt = 1 (nothing to remember)
};

class ResidualBlock {
 public:
  ResidualBlock(const WeightStore& store, const std::string& prefix, int64_t in_dim,
                int64_t out_dim, SlotCounter& slots);
  Tensor forward(const WeightStore& store, const Tensor& x, StreamState& state) const;

 private:
  std::string prefix_;
  int64_t in_dim_, out_dim_;
  CausalConv3d conv1_, conv2_, shortcut_;
  bool has_shortcut_;
};

// Single-head self-attention over the H·W positions of each frame.
class AttentionBlock {
 public:
  AttentionBlock(const WeightStore& store, const std::string& prefix, int64_t dim);
  // With `backend` (the one the attention plan chose for the VAE: a dense backend), each frame's
  // attention runs through it; without, through the built-in dense path below.
  Tensor forward(const WeightStore& store, const Tensor& x,
                 attention::AttentionBackend* backend = nullptr) const;

 private:
  std::string prefix_;
  int64_t dim_;
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
  Tensor forward(const WeightStore& store, const Tensor& x, StreamState& state) const;

 private:
  std::string prefix_;
  int64_t dim_;
  bool temporal_;
  CausalConv3d time_conv_;
  int started_slot_ = -1;
};

}  // namespace mmgen::vae
