// The CPU implementation of core/conv.h's convolution, through the linear layers' product
// (core/gemm_cpu.h) with the weight packed once per call for all its frames and bands. Each band
// of output rows is read channels-last: a 3x3 kernel over many channels reads its taps in place
// from zero-padded rows (cpu::SegmentedRows), other kernels from im2col rows (a pixel's channels
// contiguous); the result is transposed back into channel-major planes. A causal 3-D convolution
// is one product over its real temporal taps, each tap reading one frame.
#pragma once

#include <memory>
#include <vector>

#include "core/conv.h"
#include "core/gemm_cpu.h"
#include "core/tensor.h"

namespace mmgen::ops::cpu {

// A convolution's weights in float32, ready for the product: [out, kt · kh · kw · in] with the
// columns in (tap, ky, kx, in) order, as the im2col rows hold them, so the temporal taps that see
// real frames (the last ones, under causal padding) form one column range.
struct ColumnWeights {
  Tensor weight;
  Tensor bias;  // [out] float32, or undefined
  int64_t out_channels = 0, in_channels = 0, kt = 1, kh = 1, kw = 1;
  // The weight packed for the product, once per number of leading zero taps (index): filled by
  // conv_frame on first use, so a call's frames share it.
  mutable std::vector<std::shared_ptr<const mmgen::cpu::PackedWeight>> packed;
};

// The checkpoint's weight and bias as ColumnWeights: bf16/f16 converted to float32 and the
// columns reordered; a float32 1x1 weight is used in place (no copy).
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
