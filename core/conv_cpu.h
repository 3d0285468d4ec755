// The CPU implementation of core/conv.h's convolution: im2col over bands of output rows, one GEMM
// per band (Eigen), OpenMP over bands. Frames are [channels, height, width] planes; a causal 3-D
// convolution is a sum over temporal taps, each tap reading one frame.
#pragma once

#include <vector>

#include "core/conv.h"
#include "core/tensor.h"

namespace mmgen::ops::cpu {

// A convolution's weights in float32, ready for the GEMM: [out, kt · in · kh · kw] with the
// columns in (tap, in, ky, kx) order, so the temporal taps that see real frames (the last ones,
// under causal padding) form one column range.
struct ColumnWeights {
  Tensor weight;
  Tensor bias;  // [out] float32, or undefined
  int64_t out_channels = 0, in_channels = 0, kt = 1, kh = 1, kw = 1;
};

// The checkpoint's weight and bias as ColumnWeights: bf16/f16 converted to float32 and the
// columns reordered; a float32 weight with one temporal tap is used in place (no copy).
ColumnWeights column_weights(const Conv& conv);

// One output frame out[out_channels, H, W]. `taps` holds kt source planes
// [in_channels, src_h, src_w], oldest first; nullptr stands for an all-zero frame (causal
// padding) and is skipped, and may only lead. With `upsample2x` each source is first enlarged ×2
// by nearest neighbour, so H = 2·src_h and W = 2·src_w; the enlarged frame is never materialised.
void conv_frame(const ColumnWeights& weights, const std::vector<const float*>& taps, int64_t src_h,
                int64_t src_w, bool upsample2x, float* out);

// conv3d (core/conv.h) on host tensors.
Tensor conv3d(const Conv& conv, const Tensor& x, const ConvInputs& inputs);
void channel_rms_norm(const Tensor& x, const Tensor& gamma, bool silu, Tensor& y);
Tensor clamp_channel_major(const Tensor& frames, float low, float high);

}  // namespace mmgen::ops::cpu
