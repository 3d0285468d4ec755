// The decoder half of diffusers' AutoencoderKL (the FLUX-style image VAE of Z-Image), float32:
// latents [B, latent_channels, h, w] to images [B, out_channels, f·h, f·w], f = 2^(levels − 1),
// not clamped (the pipeline's post-processing maps them to [0, 1]).
//
// post_quant_conv (when the config has one), conv_in, the mid block (resnet, attention, resnet),
// one UpDecoderBlock2D per level (layers_per_block + 1 resnets, then nearest ×2 + 3×3 conv except
// after the last), GroupNorm + SiLU, conv_out. Written once over the device-neutral ops
// (core/ops.h, core/conv.h) and run where set_device() puts it. On the CPU (the default) the
// weights stay in the checkpoint (memory-mapped, possibly bf16) and are converted per use. On the
// GPU they are uploaded once as float32 (the convolutions packed for the implicit-GEMM kernel);
// the products run on TF32 tensor cores or, in the FP32 precision, as three TF32 products (float32
// accuracy); the norms and the attention's softmax in float32.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "attention/layer.h"
#include "core/safetensors.h"
#include "core/tensor.h"
#include "models/parameters.h"
#include "models/vae/autoencoder_kl_attention.h"
#include "models/vae/autoencoder_kl_config.h"
#include "models/vae/autoencoder_kl_conv.h"
#include "models/vae/autoencoder_kl_norm.h"
#include "models/vae/autoencoder_kl_resnet.h"

namespace mmgen::vae {

// The Z-Image pipeline's de-normalisation of its final latents [B, latent_channels, h, w], as
// diffusers computes it in float32: latents / scaling_factor + shift_factor (no shift when the
// config has none). Needs only the config, so a pipeline may apply it before loading weights.
// Latents on the GPU are brought to the host first (they are small; decode takes them there).
Tensor denormalize(const AutoencoderKLConfig& config, const Tensor& latents);

class AutoencoderKLDecoder {
 public:
  // Checks every decoder weight's presence and shape against the config (throws Error naming the
  // tensor and file on a mismatch).
  AutoencoderKLDecoder(AutoencoderKLConfig config, WeightStore weights);
  // Reads `<folder>/config.json` and the folder's safetensors.
  static AutoencoderKLDecoder open_folder(const fs::path& folder);

  // z: [B, latent_channels, h, w], already de-normalised (see denormalize), any float dtype, on
  // either device. Returns float32 [B, out_channels, f·h, f·w] on the host, as diffusers'
  // AutoencoderKL.decode does.
  Tensor decode(const Tensor& z) const;

  // decode in two halves, for the tiled decode (models/vae/autoencoder_kl_tiled_decode.h): `head`
  // runs post_quant_conv, conv_in and the mid block (whose attention spans the whole plane) at
  // latent resolution, returning float32 [B, block_out_channels.back(), h, w] on the decoder's
  // device; `tail` runs the up blocks, norm_out and conv_out on such a tensor (from either
  // device), returning the image on the decoder's device. decode(z) is tail(head(z)) brought to
  // the host, bit for bit. The tail's convolutions reach tail_radius() latent pixels of the
  // head's output; its GroupNorms normalise over the whole plane they are given.
  Tensor head(const Tensor& z) const;
  Tensor tail(const Tensor& head) const;
  int64_t tail_radius() const;

  // Runs the decoder on `device` from now on (uploading the weights once for the GPU; back on the
  // CPU they are the checkpoint's again), with `precision` for the GPU's products (the CPU
  // computes in float32).
  void set_device(Device device, ops::ConvPrecision precision = ops::ConvPrecision::TF32);
  // Every module placed on `device` in place (models::move_modules' step; set_device is the
  // move).
  void place_modules(Device device, ops::ConvPrecision precision);
  Device device() const { return device_; }
  ops::ConvPrecision precision() const { return precision_; }
  // Bytes of weights resident on the GPU (0 on the CPU, where they stay mapped).
  size_t resident_weight_bytes() const;

  // The Z-Image pipeline's de-normalisation (see the free function below).
  Tensor denormalize(const Tensor& latents) const;

  const AutoencoderKLConfig& config() const { return config_; }
  const WeightStore& weights() const { return weights_; }

  // The dense attention backend the mid block's attention runs through on the CPU (the attention
  // plan's choice for the VAE); without one it uses attention::dense_attention. On the GPU it is
  // attention::channel_attention_gpu.
  void set_attention(attention::Layer layer) { attention_ = std::move(layer); }

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
  std::optional<KlAttentionBlock> mid_attention_;  // none without mid_block_add_attention
  std::vector<UpBlock> up_blocks_;
  KlGroupNorm norm_out_;
  KlConv2d conv_out_;
  mutable attention::Layer attention_;  // keeps its stats across (serial) decodes
  Device device_ = Device::CPU;
  ops::ConvPrecision precision_ = ops::ConvPrecision::TF32;
};

}  // namespace mmgen::vae
