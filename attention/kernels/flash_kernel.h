// The FlashAttention-2 style CPU kernel that `fa` and the block-sparse core share: per query tile,
// online softmax over key chunks, with Q·Kᵀ and P·V computed by one register-blocked micro-kernel
// (12 rows x 32 columns with AVX-512, 6x16 with AVX2/FMA, plain C++ otherwise; see
// attention/kernels/flash_ops.h). Keys and values are packed once per (batch, head) into 16-wide
// panels, so every visited key block is read from contiguous memory.
#pragma once

#include <cstdint>
#include <vector>

#include "attention/kernels/block_sparse.h"
#include "core/tensor.h"

namespace mmgen::attention::flash {

// Best: the widest SIMD micro-kernel compiled in (AVX-512, else AVX2/FMA, else portable);
// Avx2: the AVX2/FMA one even where AVX-512 is there (tests check it, the bench compares);
// Portable: plain C++ (tests use it to check the fallback on machines that have SIMD).
enum class KernelPath { Best, Avx2, Portable };

// True when this build has the AVX2/FMA micro-kernel (and so KernelPath::Avx2).
bool simd_available();
// The micro-kernel KernelPath::Best runs: "AVX-512", "AVX2/FMA" or "portable C++".
const char* best_kernel_name();

// The core both callers use. q [B, Sq, H, D], k and v [B, Sk, H, D], contiguous float32;
// `patterns` as block_sparse_attention takes them (1, H or B·H), already validated. `out`
// [B, Sq, H, D] must be zero-filled; `lse` [B, H, Sq] (may be null) filled with −inf. Rows of
// query blocks with an empty list keep those values.
void run_block_sparse(const float* q, const float* k, const float* v, int64_t batch, int64_t q_len,
                      int64_t kv_len, int64_t heads, int64_t head_dim, float scale,
                      const std::vector<BlockSparsePattern>& patterns, float* out, float* lse,
                      KernelPath path = KernelPath::Best);

// The same with the token reorder folded in, as gathered_block_sparse_attention defines it: query
// block i of pattern p is the query tokens q_orders[p][q_blocks.start[i] ..+ length[i]], key block
// j the key tokens k_orders[p][kv_blocks.start[j] ..+ length[j]]. `q_orders` and `k_orders` are
// empty or hold one order per pattern (a null pointer: the identity), already validated. Output
// rows and LSE entries are written at the original token positions.
void run_gathered(const float* q, const float* k, const float* v, int64_t batch, int64_t q_len,
                  int64_t kv_len, int64_t heads, int64_t head_dim, float scale,
                  const std::vector<BlockSparsePattern>& patterns,
                  const std::vector<const int64_t*>& q_orders,
                  const std::vector<const int64_t*>& k_orders, float* out, float* lse,
                  KernelPath path = KernelPath::Best);

// Dense attention: softmax(scale · q·kᵀ)·v over every key. q [B, Sq, H, D], k and v [B, Sk, H, D]
// float32 (any strides). Returns [B, Sq, H, D]; `lse` (if non-null) receives [B, H, Sq], the
// natural-log sum-exp of the scaled scores.
Tensor flash_attention(const Tensor& q, const Tensor& k, const Tensor& v, float scale,
                       Tensor* lse = nullptr, KernelPath path = KernelPath::Best);

// The dense pattern flash_attention runs: query tiles × key chunks of the kernel's sizes.
BlockSparsePattern dense_pattern(int64_t q_len, int64_t kv_len);

}  // namespace mmgen::attention::flash
