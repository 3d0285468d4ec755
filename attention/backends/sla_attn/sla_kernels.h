// SLA's steps around the attention kernel on the GPU (attention/backends/sla_attn/sla_attn_cuda.cpp
// drives them; the algorithm is attention/kernels/sla_core.h's): the pooled block means of the
// block map, and the linear branch's feature maps, sums and normalisation. Tensors are bf16 [batch,
// seq, heads·D] rows with a token stride in elements unless said otherwise.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace mmgen::cuda {

// attention/kernels/sla_core.h's feature maps (this header stays C++17 for nvcc), plus none.
enum class SlaFeature : int { Softmax = 0, Elu = 1, Relu = 2, Identity = 3 };

// means[b, h, j, :] = the mean of x over rows [j·block, min(seq, (j + 1)·block)) (float32 sums).
void sla_block_means(const void* x, int64_t token_stride, float* means, int64_t batch, int64_t seq,
                     int64_t heads, int64_t head_dim, int64_t block, cudaStream_t stream = nullptr);

// Smooth-k for the block map: subtracts the mean over all `seq` keys (from the block means and
// their lengths, summed in double) from every key-block mean. means [batch·heads, blocks, D].
void sla_smooth_key_means(float* means, int64_t pairs, int64_t blocks, int64_t head_dim,
                          int64_t seq, int64_t block, cudaStream_t stream = nullptr);

// Key-block lists in the attention kernel's 64-key blocks: out[(i·kept + e)·factor + t] =
// selected[i·kept + e]·factor + t for t < factor (an SLA key block of 64·factor keys).
void sla_expand_lists(const int32_t* selected, int64_t lists, int64_t kept, int64_t factor,
                      int32_t* out, cudaStream_t stream = nullptr);

// φ along head_dim (softmax, elu + 1, relu, or none) of every row of x, into y [batch, seq,
// heads·D] contiguous, bf16 (the products read a head of it in place). With `key_sums` (float32
// Σφ(k) [batch·heads, D]) each row is also divided by the linear branch's normaliser
// 1e-5 + φ·Σφ(k), taken from the float32 φ. head_dim 64 or 128.
void sla_feature_map(const void* x, int64_t token_stride, int64_t batch, int64_t seq, int64_t heads,
                     int64_t head_dim, SlaFeature map, const float* key_sums, uint16_t* y,
                     cudaStream_t stream = nullptr);

// sums[b, c] = Σ_t y[b, t, c] (float32) for contiguous y [batch, seq, width] (width even): partial
// sums of row chunks into `scratch` (sla_column_sums_scratch floats), then the chunks in order.
// With width = heads·D these are Σ φ(k) per (b, h), [batch·heads, D].
int64_t sla_column_sums_scratch(int64_t batch, int64_t seq, int64_t width);
void sla_column_sums(const uint16_t* y, int64_t batch, int64_t seq, int64_t width, float* scratch,
                     float* sums, cudaStream_t stream = nullptr);

}  // namespace mmgen::cuda
