// The AutoencoderKL decoder's 2-D convolution (nn.Conv2d, stride 1, padding kernel / 2) over
// [B, C, H, W] float32, optionally preceded by a nearest ×2 upsampling (Upsample2D) that is folded
// into the convolution's input reads. It is the one place the decoder reaches a convolution
// kernel: today the Wan VAE's CPU im2col + GEMM (conv_kernels.h, a 2-D convolution being its
// one-temporal-tap case); when core/ gains a device-neutral convolution op, only this file changes.
#pragma once

#include <string>

#include "core/safetensors.h"
#include "core/tensor.h"
#include "models/vae/conv_kernels.h"

namespace mmgen::vae {

class KlConv2d {
 public:
  KlConv2d() = default;
  // Checks `<prefix>.weight` [out, in, kernel, kernel] and `<prefix>.bias` [out].
  KlConv2d(const WeightStore& store, std::string prefix, int64_t in_channels, int64_t out_channels,
           int64_t kernel);
  // x [B, in, H, W] -> [B, out, H, W], or [B, out, 2H, 2W] with `upsample2x`. The weights are
  // read from `store` per call (mapped, converted only when not float32), as the Wan VAE does, so
  // resident memory stays the checkpoint's.
  Tensor forward(const WeightStore& store, const Tensor& x, bool upsample2x = false) const;
  int64_t out_channels() const { return shape_.out_channels; }

 private:
  std::string prefix_;
  ConvShape shape_{};
};

}  // namespace mmgen::vae
