// Matrix products on the GPU through cuBLASLt: bf16 operands, fp32 accumulation, the bias added in
// the epilogue, output in bf16 or fp32. Weights are PyTorch's [out_features, in_features].
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace mmgen::cuda {

enum class GemmOutput { BF16, F32 };

// y[m, n] = x[m, k] · w[n, k]ᵀ + bias[n]; x, w bf16 row-major; bias (may be null) and y in the
// output's dtype.
void linear_bf16(const void* x, const void* w, const void* bias, void* y, int64_t m, int64_t n,
                 int64_t k, GemmOutput output, cudaStream_t stream = nullptr);

}  // namespace mmgen::cuda
