// The self-attention of the AutoencoderKL decoder's mid block (diffusers' Attention built with
// _from_deprecated_attn_block, run by AttnProcessor2_0): GroupNorm (eps 1e-6), to_q / to_k / to_v
// linear projections with bias, one head as wide as the channels over the H·W positions of each
// image, to_out, then the residual; rescale_output_factor is 1, so nothing is divided.
#pragma once

#include <string>

#include "attention/backend.h"
#include "core/safetensors.h"
#include "core/tensor.h"

namespace mmgen::vae {

class KlAttentionBlock {
 public:
  KlAttentionBlock(const WeightStore& store, const std::string& prefix, int64_t channels,
                   int64_t groups);
  // x [B, C, H, W] -> [B, C, H, W]. With `backend` (the attention plan's choice for the VAE, a
  // dense backend) the attention runs through it; without, through attention::dense_attention.
  Tensor forward(const WeightStore& store, const Tensor& x,
                 attention::AttentionBackend* backend = nullptr) const;

 private:
  std::string prefix_;
  int64_t channels_, groups_;
};

}  // namespace mmgen::vae
