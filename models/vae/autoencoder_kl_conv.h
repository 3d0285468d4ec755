// The AutoencoderKL decoder's 2-D convolution (nn.Conv2d, stride 1, padding kernel / 2) over
// [B, C, H, W] float32, optionally preceded by a nearest ×2 upsampling (Upsample2D) that is folded
// into the convolution's input reads: core/conv.h's device-neutral convolution with one temporal
// tap, the batch's images as its frames.
#pragma once

#include <string>

#include "core/conv.h"
#include "core/safetensors.h"
#include "core/tensor.h"

namespace mmgen::vae {

class KlConv2d {
 public:
  KlConv2d() = default;
  // Checks `<prefix>.weight` [out, in, kernel, kernel] and `<prefix>.bias` [out].
  KlConv2d(const WeightStore& store, std::string prefix, int64_t in_channels, int64_t out_channels,
           int64_t kernel);
  // Runs on `device` from now on (uploading and packing the weights once for the GPU), its
  // products there in `precision` (the CPU computes in float32).
  void place(Device device, ops::ConvPrecision precision);
  size_t resident_bytes() const { return conv_.resident_bytes(); }
  // x [B, in, H, W] on the weights' device -> [B, out, H, W], or [B, out, 2H, 2W] with
  // `upsample2x`; `residual` (that shape, or undefined) is added to the result. On the CPU the
  // weights stay in the checkpoint (mapped, converted per call), so resident memory stays the
  // checkpoint's.
  Tensor forward(const Tensor& x, bool upsample2x = false, const Tensor& residual = Tensor()) const;
  int64_t out_channels() const { return conv_.out_channels(); }

 private:
  std::string prefix_;
  ops::Conv conv_;
  ops::ConvPrecision precision_ = ops::ConvPrecision::FP32;
};

}  // namespace mmgen::vae
