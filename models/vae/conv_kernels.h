// The convolutions of the Wan VAE on float32 frames: im2col over bands of output rows, one GEMM
// per band (Eigen), OpenMP over bands. Frames are [channels, height, width] planes; a causal
// 3-D convolution is a sum over temporal taps, each tap reading one frame.
#pragma once

#include <string>
#include <vector>

#include "core/safetensors.h"
#include "core/tensor.h"

namespace mmgen::vae {

// A convolution's weights in float32, ready for the GEMM: [out, kt · in · kh · kw] with the
// columns in (tap, in, ky, kx) order, so the temporal taps that see real frames (the last ones,
// under causal padding) form one column range.
struct ConvWeights {
  Tensor weight;
  Tensor bias;  // [out] float32, or undefined
  int64_t out_channels = 0, in_channels = 0, kt = 1, kh = 1, kw = 1;
};

// The expected geometry of a convolution in a checkpoint; `kt` 0 means a 2-D convolution
// (weight [out, in, kh, kw]).
struct ConvShape {
  int64_t out_channels, in_channels, kt, kh, kw;
};

// Checks that `<prefix>.weight` and `<prefix>.bias` exist with `shape` (naming the tensor and file
// when not).
void check_conv(const WeightStore& store, const std::string& prefix, const ConvShape& shape);

// Reads `<prefix>.weight` / `<prefix>.bias`, converting bf16/f16 to float32 and reordering the
// columns; a float32 checkpoint with one temporal tap is used in place (no copy).
ConvWeights load_conv(const WeightStore& store, const std::string& prefix, const ConvShape& shape);

// One output frame out[out_channels, H, W] of a convolution with "same" spatial padding (kh/2 and
// kw/2 zeros). `taps` holds kt source planes [in_channels, src_h, src_w], oldest first; nullptr
// stands for an all-zero frame (causal padding) and is skipped, and may only lead. With
// `upsample2x` each source is first enlarged ×2 by nearest neighbour (torch's "nearest-exact" at
// scale 2), so H = 2·src_h and W = 2·src_w; the enlarged frame is never materialised.
void conv_frame(const ConvWeights& weights, const std::vector<const float*>& taps, int64_t src_h,
                int64_t src_w, bool upsample2x, float* out);

}  // namespace mmgen::vae
