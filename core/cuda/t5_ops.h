// Row kernels on the GPU (fp32 math): RMSNorm as T5 and Qwen have it (no mean, no bias), behind
// ops::rms_norm, and random fills for benchmark checkpoints (ops::random_uniform). Device
// pointers.
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

// count bf16 values uniform in [−scale, scale) from a counter hash of (seed, index).
void fill_uniform_bf16(void* out, int64_t count, uint64_t seed, float scale,
                       cudaStream_t stream = nullptr);

}  // namespace mmgen::cuda
