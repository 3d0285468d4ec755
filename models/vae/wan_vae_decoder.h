// The decoder half of diffusers' AutoencoderKLWan (Wan2.1 VAE): latents [B, z_dim, T, h, w] to a
// video [B, 3, 1 + 4·(T − 1), 8h, 8w] in [−1, 1], float32 on the host. Written once over the
// device-neutral ops of core/conv.h and run where set_device() puts it. It also decodes
// Qwen-Image's AutoencoderKLQwenImage, the same network (one latent frame to one image; see
// wan_vae_config.h for where the two classes differ).
//
// Like diffusers' `_decode`, it runs post_quant_conv and then the decoder one latent frame at a
// time, carrying the causal convolutions' feature cache between frames, so memory is bounded by
// one latent frame's activations (4 output frames) plus the cache, whatever the video length.
// On the CPU (the default) it computes in float32 and the weights stay in the checkpoint
// (memory-mapped, possibly bf16), converted per use. On the GPU the weights are uploaded once as
// float32, packed for the implicit-GEMM convolution kernel; the products run on TF32 tensor cores
// (within 3e-3 of the CPU) or, in the FP32 precision, as three TF32 products (the CPU's numbers to
// float32 rounding, at about three times the time); each decoded chunk comes back to the host
// while the GPU decodes the next.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "core/safetensors.h"
#include "core/tensor.h"
#include "models/parameters.h"
#include "models/vae/wan_vae_config.h"
#include "models/vae/wan_vae_layers.h"

namespace mmgen::vae {

// Called after each decoded latent frame: done of total (total = batch · latent frames).
using DecodeProgress = std::function<void(int done, int total)>;

class WanVaeDecoder {
 public:
  // Checks every decoder weight's presence and shape against the config (throws Error naming the
  // tensor and file on a mismatch).
  WanVaeDecoder(WanVaeConfig config, WeightStore weights);
  // Reads `<folder>/config.json` and the folder's safetensors.
  static WanVaeDecoder open_folder(const fs::path& folder);

  // z: [B, z_dim, T, h, w], already de-normalised (see denormalize), any float dtype.
  // Returns float32 [B, out_channels, 1 + 4·(T − 1), 8h, 8w], clamped to [−1, 1].
  Tensor decode(const Tensor& z, const DecodeProgress& progress = {}) const;

  // The pipeline's de-normalisation, exactly as diffusers computes it:
  // latents / (1 / std) + mean per channel, with 1 / std rounded to float32 first.
  Tensor denormalize(const Tensor& latents) const;

  const WanVaeConfig& config() const { return config_; }
  const WeightStore& weights() const { return weights_; }

  // Runs the decoder on `device` from now on (uploading the weights once for the GPU), with
  // `precision` for the GPU's products (the CPU computes in float32).
  // A failed upload leaves the decoder on the CPU (models::move_model).
  void set_device(Device device, ops::ConvPrecision precision = ops::ConvPrecision::TF32);
  // Every module placed on `device` in place (models::move_modules' step; set_device is the
  // move).
  void place_modules(Device device, ops::ConvPrecision precision);
  Device device() const { return device_; }
  ops::ConvPrecision precision() const { return precision_; }
  // Bytes of weights resident on the GPU (0 on the CPU, where they stay mapped).
  size_t resident_weight_bytes() const;
  // Floating-point operations of the convolutions and attention products of the last decode.
  double last_decode_flops() const { return last_flops_; }

  // The decode of one latent frame in two parts, for tiled decoding (models/vae/tiled_decode.h):
  // `head` runs post_quant_conv, conv_in and the mid block (whose attention spans the whole
  // frame) at latent resolution on x [1, z_dim, h, w]; `tail` runs the up blocks, norm_out and
  // conv_out, which are convolutions only, so an output pixel depends on the head's output within
  // tail_radius() latent pixels of it. tail(head(x)) is what decode computes for that frame, bit
  // for bit. Each part carries its causal caches in `state` (one state may serve both). x and the
  // results live on the decoder's device.
  Tensor head(const Tensor& x, StreamState& state) const;
  Tensor tail(const Tensor& h, StreamState& state) const;
  StreamState new_state() const;
  // Latent pixels of context the tail's convolutions reach (3x3 kernels at each scale), rounded
  // up.
  int64_t tail_radius() const;

  // The dense attention backend the mid block's attention runs through on the CPU (the attention
  // plan's choice for the VAE); without one it uses its built-in dense path.
  void set_attention(attention::Layer layer) { attention_ = std::move(layer); }

 private:
  struct UpBlock {
    std::vector<ResidualBlock> resnets;
    std::optional<Resample> upsampler;  // none for the last block
  };

  WanVaeConfig config_;
  WeightStore weights_;
  SlotCounter slots_;
  CausalConv3d post_quant_conv_;
  CausalConv3d conv_in_;
  std::vector<ResidualBlock> mid_resnets_;
  std::optional<AttentionBlock> mid_attention_;
  std::vector<UpBlock> up_blocks_;
  int64_t out_dim_ = 0;  // channels entering norm_out
  CausalConv3d conv_out_;
  ChannelNorm norm_out_;
  mutable attention::Layer attention_;  // keeps its stats across (serial) decodes
  Device device_ = Device::CPU;
  ops::ConvPrecision precision_ = ops::ConvPrecision::TF32;
  mutable double last_flops_ = 0;
};

}  // namespace mmgen::vae
