// The decoder half of diffusers' AutoencoderKL (the FLUX-style image VAE of Z-Image), float32:
// latents [B, latent_channels, h, w] to images [B, out_channels, f·h, f·w], f = 2^(levels − 1),
// not clamped (the pipeline's post-processing maps them to [0, 1]).
//
// post_quant_conv (when the config has one), conv_in, the mid block (resnet, attention, resnet),
// one UpDecoderBlock2D per level (layers_per_block + 1 resnets, then nearest ×2 + 3×3 conv except
// after the last), GroupNorm + SiLU, conv_out. Weights stay in the checkpoint (memory-mapped,
// possibly bf16) and are converted per use.
#pragma once

#include <memory>
#include <vector>

#include "attention/backend.h"
#include "core/safetensors.h"
#include "core/tensor.h"
#include "models/vae/autoencoder_kl_attention.h"
#include "models/vae/autoencoder_kl_config.h"
#include "models/vae/autoencoder_kl_conv.h"
#include "models/vae/autoencoder_kl_resnet.h"

namespace mmgen::vae {

// The Z-Image pipeline's de-normalisation of its final latents [B, latent_channels, h, w], as
// diffusers computes it in float32: latents / scaling_factor + shift_factor (no shift when the
// config has none). Needs only the config, so a pipeline may apply it before loading weights.
Tensor denormalize(const AutoencoderKLConfig& config, const Tensor& latents);

class AutoencoderKLDecoder {
 public:
  // Checks every decoder weight's presence and shape against the config (throws Error naming the
  // tensor and file on a mismatch).
  AutoencoderKLDecoder(AutoencoderKLConfig config, WeightStore weights);
  // Reads `<folder>/config.json` and the folder's safetensors.
  static AutoencoderKLDecoder open_folder(const fs::path& folder);

  // z: [B, latent_channels, h, w], already de-normalised (see denormalize), any float dtype.
  // Returns float32 [B, out_channels, f·h, f·w] as diffusers' AutoencoderKL.decode does.
  Tensor decode(const Tensor& z) const;

  // The Z-Image pipeline's de-normalisation (see the free function below).
  Tensor denormalize(const Tensor& latents) const;

  const AutoencoderKLConfig& config() const { return config_; }
  const WeightStore& weights() const { return weights_; }

  // The dense attention backend the mid block's attention runs through (the attention plan's
  // choice for the VAE); without one it uses attention::dense_attention.
  void set_attention_backend(std::shared_ptr<attention::AttentionBackend> backend) {
    attention_backend_ = std::move(backend);
  }

 private:
  struct UpBlock {
    std::vector<KlResnetBlock> resnets;
    KlConv2d upsampler;  // Upsample2D's conv, after nearest ×2
    bool upsample = false;
  };

  AutoencoderKLConfig config_;
  WeightStore weights_;
  KlConv2d post_quant_conv_;
  KlConv2d conv_in_;
  std::vector<KlResnetBlock> mid_resnets_;
  std::unique_ptr<KlAttentionBlock> mid_attention_;  // null without mid_block_add_attention
  std::vector<UpBlock> up_blocks_;
  KlConv2d conv_out_;
  std::shared_ptr<attention::AttentionBackend> attention_backend_;
};

}  // namespace mmgen::vae
