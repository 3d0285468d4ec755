// Float32 matrix products through cuBLASLt, column-major as BLAS has them (a row-major [r, c]
// buffer is a column-major [c, r] one): C[m, n] = op(A) · op(B), on TF32 tensor cores with fp32
// accumulation, or in full fp32. The Wan VAE's attention uses it (the rest of the VAE runs on the
// implicit-GEMM convolution kernel).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace mmgen::cuda {

// A strided batch of products: `count` of them, product i's A, B and C starting i·stride floats on.
struct GemmBatch {
  int64_t count = 1;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;
};

// op(A) is [m, k] (A stored [k, m] when transpose_a), op(B) [k, n]; leading dimensions in floats.
void gemm_f32(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, const float* a,
              int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc, bool tf32,
              cudaStream_t stream = nullptr, const GemmBatch& batch = {});

}  // namespace mmgen::cuda
