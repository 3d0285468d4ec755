// Row kernels that fuse a block's post-norm into the residual update, so the normed rows are never
// written out: one read of y and one read-modify-write of x per row. Pointers are device memory.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace mmgen::cuda {

// x[r, i] += gate[i] · y[r, i] · rsqrt(mean_i(y[r, i]²) + eps) · weight[i] (gate null: 1); x fp32
// [rows, dim], y fp32 or bf16 (y_bf16) [rows, dim], weight and gate fp32 [dim].
void add_rms_norm_gated_f32(float* x, const void* y, bool y_bf16, int64_t rows, int64_t dim,
                            const float* weight, float eps, const float* gate,
                            cudaStream_t stream = nullptr);

}  // namespace mmgen::cuda
