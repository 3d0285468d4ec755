// The CUDA implementations of core/conv.h: core/conv.cpp calls these for GPU tensors. The
// convolutions run on the implicit-GEMM kernel of core/cuda/conv3d.h, the per-pixel passes on
// core/cuda/vae_ops.h.
#pragma once

#include "core/conv.h"
#include "core/tensor.h"

namespace mmgen::cuda::ops {

// A convolution's weights packed for the kernel, on the GPU.
struct PackedConv {
  Tensor weight;  // float32 [rows, k_pad], see pack_conv_weights
  Tensor bias;    // float32 [out], or undefined
  int64_t k_pad = 0;
  bool spatial_inner = false;
};
// `weight` [out, in, (kt,) kh, kw] and `bias` [out] on the host, any float dtype.
PackedConv pack_conv(const Tensor& weight, const Tensor& bias, int64_t kt, int64_t kh, int64_t kw);

Tensor conv3d(const mmgen::ops::Conv& conv, const Tensor& x, const mmgen::ops::ConvInputs& inputs);
void channel_rms_norm(const Tensor& x, const Tensor& gamma, bool silu, Tensor& y, bool round_tf32);
Tensor clamp_channel_major(const Tensor& frames, float low, float high);

}  // namespace mmgen::cuda::ops
