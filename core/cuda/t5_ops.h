// The row kernels between the T5 / UMT5 encoder's products on the GPU (fp32 math): its RMSNorm
// (no mean, no bias), the (gated) feed-forward activation, the relative-position bias laid out for
// the paged attention's bias hook, and random fills for benchmark checkpoints. Device pointers.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace mmgen::cuda {

// out[r] = x[r] / sqrt(mean(x[r]²) + eps) · weight, x fp32 [rows, dim], weight fp32 [dim]; out
// bf16 (the next product's input) or fp32 (the encoder's output).
void t5_rms_norm_bf16(const float* x, void* out, int64_t rows, int64_t dim, const float* weight,
                      float eps, cudaStream_t stream = nullptr);
void t5_rms_norm_f32(const float* x, float* out, int64_t rows, int64_t dim, const float* weight,
                     float eps, cudaStream_t stream = nullptr);

enum class FfnActivation { Relu, Gelu, GeluTanh, Silu };

// Gated: in fp32 [rows, 2·width] holds (wi_0 x, wi_1 x) side by side (the product's fp32
// output: one bf16 rounding fewer); out bf16 [rows, width] = act(wi_0 x) · wi_1 x. Not gated:
// in [rows, width], out = act(in).
void t5_ffn_activation(const float* in, void* out, int64_t rows, int64_t width,
                       FfnActivation activation, bool gated, cudaStream_t stream = nullptr);
// The same with a float32 result (the encoder's exact mode).
void t5_ffn_activation_f32(const float* in, float* out, int64_t rows, int64_t width,
                           FfnActivation activation, bool gated, cudaStream_t stream = nullptr);

// out[l, h, o] = tables[l, bucket_of_offset[o], h] for offsets o in [0, span): each layer's
// [heads, span] bias vector by key − query offset (span = 2·max_len − 1). tables fp32
// [layers, buckets, heads].
void t5_expand_relative_bias(const float* tables, const int32_t* bucket_of_offset, float* out,
                             int64_t layers, int64_t buckets, int64_t heads, int64_t span,
                             cudaStream_t stream = nullptr);

// count bf16 values uniform in [−scale, scale) from a counter hash of (seed, index).
void fill_uniform_bf16(void* out, int64_t count, uint64_t seed, float scale,
                       cudaStream_t stream = nullptr);

}  // namespace mmgen::cuda
