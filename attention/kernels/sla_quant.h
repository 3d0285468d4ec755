// SageAttention's INT8 quantisation of Q and K, emulated on the CPU for SageSLA's sparse branch:
// the values are quantised and immediately dequantised, so the block-sparse float kernel computes
// the same scores as the integer dot products followed by the scale multiply (up to float
// rounding of the product, far below the INT8 error).
//   K: smoothed first (k − mean over tokens, per channel: softmax is unchanged, outliers shrink);
//      one scale per key block, max|k̃| / 127.
//   Q: pre-multiplied by the softmax scale; one scale per 32-row slice of each query block
//      (SageAttention2's per_warp granularity on sm80/sm89), max|q'| / 127.
//   Rounding: to nearest, halves away from zero.
#pragma once

#include <cstdint>

#include "attention/kernels/block_sparse.h"
#include "core/tensor.h"

namespace mmgen::attention::sla {

// Rows of a query block sharing one scale.
constexpr int64_t kQueryWarpRows = 32;

// x [B, S, H, D] contiguous float32 → round(x / s) · s with s = max|x| / 127 per (batch, head,
// row range); ranges are the blocks of `blocks`, each split into slices of at most `slice_rows`.
// `multiplier` scales x first (the softmax scale for Q, 1 for K).
Tensor int8_round_trip(const Tensor& x, const BlockLayout& blocks, int64_t slice_rows,
                       float multiplier);

// k − mean over tokens of k, per (batch, head, channel). k [B, S, H, D] contiguous float32.
Tensor smooth_keys(const Tensor& k);

}  // namespace mmgen::attention::sla
