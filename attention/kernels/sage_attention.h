// SageAttention on the CPU: dense attention whose Q·Kᵀ runs on quantised Q and K.
//
//  - sage_int8_attention (SageAttention 1/2): K smoothed by its mean over tokens (softmax is
//    unchanged by it), Q and K quantised to INT8 with per-group scales (sage_quant.h), the dot
//    products taken in integers, dequantised by the two scales, then softmax and P·V in float32.
//  - sage_fp4_attention (SageAttention3): K smoothed likewise, Q optionally smoothed by its mean
//    per 128-row block (the block's q̄·Kᵀ is added back in float32), Q, K and V quantised to FP4
//    with an e4m3 scale per 16 values (Q and K along the head dimension, V along tokens), and P
//    quantised the same way along keys after the per-row normalisation to [0, 448·6] (the paper's
//    two-level quantisation of P). The row sums of the softmax use the unquantised P.
//
// Both are FlashAttention-style loops over 128-query × 256-key tiles with an online softmax,
// parallel over batch × heads × query tiles.
#pragma once

#include <string_view>

#include "attention/kernels/sage_quant.h"
#include "core/tensor.h"

namespace mmgen::attention::sage {

struct Int8Options {
  Granularity granularity = Granularity::PerBlock;
  bool smooth_k = true;
};

struct Fp4Options {
  bool per_block_mean = true;
};

// q [B, Sq, H, D], k and v [B, Sk, H, D] float32 (any strides); returns [B, Sq, H, D].
// The integer products are exact: they are summed in float32, which holds every partial sum
// exactly while D · 127² < 2^24 (D <= 1040; larger head sizes are refused).
Tensor sage_int8_attention(const Tensor& q, const Tensor& k, const Tensor& v, float scale,
                           const Int8Options& options);

Tensor sage_fp4_attention(const Tensor& q, const Tensor& k, const Tensor& v, float scale,
                          const Fp4Options& options);

// "per_block" / "per_warp" / "per_thread" (the validated config's spelling).
Granularity parse_granularity(std::string_view name);

}  // namespace mmgen::attention::sage
