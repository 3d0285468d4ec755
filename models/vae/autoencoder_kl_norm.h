// The AutoencoderKL decoder's GroupNorm (affine, torch.nn.GroupNorm) with its weights held by the
// layer, so they can live on the decoder's device: on the CPU the checkpoint's tensors as stored
// (memory-mapped, converted by ops::group_norm per call, as before), on the GPU float32 copies
// uploaded once.
#pragma once

#include <string>

#include "core/safetensors.h"
#include "core/tensor.h"

namespace mmgen::vae {

class KlGroupNorm {
 public:
  KlGroupNorm() = default;
  // Checks `<prefix>.weight` and `<prefix>.bias`, both [channels].
  KlGroupNorm(const WeightStore& store, const std::string& prefix, int64_t channels, int64_t groups,
              float eps);
  void place(Device device);
  size_t resident_bytes() const;
  // x [B, C, H, W] on the weights' device; SiLU after when `silu`.
  Tensor forward(const Tensor& x, bool silu) const;

 private:
  Tensor host_weight_, host_bias_;  // the checkpoint's, to come back to the CPU
  Tensor weight_, bias_;            // where the layer runs
  int64_t groups_ = 1;
  float eps_ = 1e-6f;
};

}  // namespace mmgen::vae
