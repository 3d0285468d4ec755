// The self-attention of the AutoencoderKL decoder's mid block (diffusers' Attention built with
// _from_deprecated_attn_block, run by AttnProcessor2_0): GroupNorm (eps 1e-6), to_q / to_k / to_v
// linear projections with bias, one head as wide as the channels over the H·W positions of each
// image, to_out, then the residual; rescale_output_factor is 1, so nothing is divided.
#pragma once

#include <string>

#include "attention/layer.h"
#include "core/conv.h"
#include "core/safetensors.h"
#include "core/tensor.h"
#include "models/vae/autoencoder_kl_norm.h"

namespace mmgen::vae {

class KlAttentionBlock {
 public:
  KlAttentionBlock(const WeightStore& store, const std::string& prefix, int64_t channels,
                   int64_t groups);
  // Runs on `device` from now on. On the GPU the projections become 1×1 convolutions (to_q, to_k
  // and to_v stacked into one), uploaded once, with products in `precision`.
  void place(Device device, ops::ConvPrecision precision);
  size_t resident_bytes() const;
  // x [B, C, H, W] -> [B, C, H, W], on the block's device. On the CPU, with `backend` (the
  // attention plan's choice for the VAE, a dense backend) the attention runs through it; without,
  // through attention::dense_attention. On the GPU each image's attention is
  // attention::channel_attention_gpu (the dense reference; head size C has no kernel of ours), in
  // full float32 when the precision is FP32.
  Tensor forward(const Tensor& x, attention::Layer& attention) const;

 private:
  Tensor forward_cpu(const Tensor& x, attention::Layer& attention) const;
  Tensor forward_gpu(const Tensor& x) const;

  std::string prefix_;
  int64_t channels_;
  KlGroupNorm norm_;
  // The checkpoint's projections [C, C] and biases [C], as stored (the CPU path's).
  Tensor q_weight_, q_bias_, k_weight_, k_bias_, v_weight_, v_bias_, out_weight_, out_bias_;
  // On the GPU: [3C, C] q/k/v and [C, C] output projections as 1×1 convolutions; empty on the CPU.
  ops::Conv qkv_, out_;
  ops::ConvPrecision precision_ = ops::ConvPrecision::FP32;
};

}  // namespace mmgen::vae
