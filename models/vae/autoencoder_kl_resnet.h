// diffusers' ResnetBlock2D as the AutoencoderKL decoder builds it: no time embedding, pre-norm,
// GroupNorm (eps 1e-6) + SiLU before each 3×3 convolution, a 1×1 conv_shortcut when the channel
// count changes, output_scale_factor 1 (so the sum is not divided).
#pragma once

#include <string>

#include "core/safetensors.h"
#include "core/tensor.h"
#include "models/vae/autoencoder_kl_conv.h"
#include "models/vae/autoencoder_kl_norm.h"

namespace mmgen::vae {

class KlResnetBlock {
 public:
  KlResnetBlock(const WeightStore& store, const std::string& prefix, int64_t in_channels,
                int64_t out_channels, int64_t groups);
  void place(Device device, ops::ConvPrecision precision);
  size_t resident_bytes() const;
  // x [B, in, H, W] -> [B, out, H, W], on the block's device.
  Tensor forward(const Tensor& x) const;

 private:
  KlGroupNorm norm1_, norm2_;
  KlConv2d conv1_, conv2_, shortcut_;
  bool has_shortcut_;
};

}  // namespace mmgen::vae
