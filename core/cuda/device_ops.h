// Elementwise and row-wise kernels between the GPU's matrix products, each one pass over its rows
// (fp32 math; bf16 where the next product reads the result). Pointers are device memory.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace mmgen::cuda {

// out (bf16 [rows, dim]) = LayerNorm(x) · scale + shift, x fp32 [rows, dim] without affine
// weights; scale and shift fp32 [dim] (Wan's modulation passes 1 + scale; an affine LayerNorm
// passes its weight and bias).
void layer_norm_to_bf16(const float* x, void* out, int64_t rows, int64_t dim, const float* scale,
                        const float* shift, float eps, cudaStream_t stream = nullptr);

// In place on x (bf16 [rows, dim]): RMSNorm over each row times weight (fp32 [dim]); then, when
// cos/sin are given ([tokens, head_dim / 2] fp32, row r is token (r / rows_per_position) mod
// tokens), each head's interleaved pairs (x1, x2) become (x1·cos − x2·sin, x1·sin + x2·cos).
void rms_norm_rope_bf16(void* x, int64_t rows, int64_t dim, const float* weight, float eps,
                        const float* cos, const float* sin, int64_t tokens, int64_t head_dim,
                        int64_t rows_per_position, cudaStream_t stream = nullptr);

// In place on x (fp32 [tokens, heads, head_dim]): rotate-half RoPE, dimension i paired with
// i + head_dim / 2, (a, b) → (a·cos − b·sin, b·cos + a·sin) with cos / sin fp32
// [tokens, head_dim / 2].
void rope_half_f32(float* x, int64_t tokens, int64_t heads, int64_t head_dim, const float* cos,
                   const float* sin, cudaStream_t stream = nullptr);

// x = GELU(x) with the tanh approximation, bf16, in place.
void gelu_tanh_bf16(void* x, int64_t count, cudaStream_t stream = nullptr);

// x += y · gate (gate fp32 [dim], broadcast over rows), or x += y when gate is null; fp32.
void add_gated_f32(float* x, const float* y, int64_t rows, int64_t dim, const float* gate,
                   cudaStream_t stream = nullptr);

// x[r, i] += gate[i] · y[r, i] · rsqrt(mean_i(y[r, i]²) + eps) · weight[i] (gate null: 1), a
// block's post-norm fused into the residual update (the normed rows are never written out); x
// fp32 [rows, dim], y fp32 or bf16 (y_bf16) [rows, dim], weight and gate fp32 [dim]. With
// `normed` (bf16 [rows, dim]) the same pass also writes the next pre-norm of the updated x:
// normed[r, i] = x[r, i] · rsqrt(mean_i(x[r, i]²) + next_eps) · next_weight[i].
void add_rms_norm_gated_f32(float* x, const void* y, bool y_bf16, int64_t rows, int64_t dim,
                            const float* weight, float eps, const float* gate,
                            const float* next_weight = nullptr, float next_eps = 0,
                            void* normed = nullptr, cudaStream_t stream = nullptr);

// core/cuda/wide_rows.cu: the row in registers, one block of 1-8 warps per row, 16-byte accesses
// (the hidden width of a DiT block). Each returns false, launching nothing, for a row it does not
// take (width not a multiple of 4 or 8, wider than 12288 or 16384, or unaligned pointers); the
// callers then use the kernels above.
//
// Optionally x += y · gate (y fp32 or bf16 (y_bf16) [rows, dim]; gate fp32 [dim] or null for
// x += y; y null: x is only read), then out (bf16 [rows, dim]) = LayerNorm(x) · scale + shift as
// layer_norm_to_bf16: a block's residual update and the next pre-norm in one pass. With
// `e4m3_scales`, out is e4m3 instead, one byte per value, each row scaled by its max|out| / 448
// written to e4m3_scales[row] (quantize_e4m3_rows of the float32 result: an FP8 product's input).
bool residual_layer_norm_bf16(float* x, const void* y, bool y_bf16, const float* gate, int64_t rows,
                              int64_t dim, const float* scale, const float* shift, float eps,
                              void* out, cudaStream_t stream = nullptr,
                              float* e4m3_scales = nullptr);
// rms_norm_rope_bf16 for rows of a multiple of 8 values with head_dim a multiple of 8.
bool rms_norm_rope_rows_bf16(void* x, int64_t rows, int64_t dim, const float* weight, float eps,
                             const float* cos, const float* sin, int64_t tokens, int64_t head_dim,
                             int64_t rows_per_position, cudaStream_t stream = nullptr);

}  // namespace mmgen::cuda
