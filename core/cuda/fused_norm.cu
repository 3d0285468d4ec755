#include <cuda_bf16.h>

#include "core/cuda/cuda_check.h"
#include "core/cuda/fused_norm.h"

namespace mmgen::cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float load(const float* p) {
  return *p;
}
__device__ __forceinline__ float load(const __nv_bfloat16* p) {
  return __bfloat162float(*p);
}

// Sum over the block; every thread gets the result.
__device__ float block_sum(float value) {
  __shared__ float partial[kThreads / 32];
  for (int offset = 16; offset > 0; offset /= 2)
    value += __shfl_xor_sync(0xffffffffu, value, offset);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = value;
  __syncthreads();
  float total = 0;
  for (int i = 0; i < kThreads / 32; ++i) total += partial[i];
  return total;
}

// One block per row: the squares of y, then the update (the second read of y hits the cache).
// The same expression as rms_norm (core/cuda/t5_ops.cu) followed by add_gated, so the fused and
// the separate ops agree to the rounding of one multiply.
template <typename In>
__global__ void add_rms_norm_gated_kernel(float* x, const In* y, int64_t dim, const float* weight,
                                          float eps, const float* gate) {
  const In* in = y + blockIdx.x * dim;
  float* out = x + blockIdx.x * dim;
  float squares = 0;
  for (int64_t i = threadIdx.x; i < dim; i += kThreads) {
    const float v = load(in + i);
    squares += v * v;
  }
  const float inverse = rsqrtf(block_sum(squares) / float(dim) + eps);
  for (int64_t i = threadIdx.x; i < dim; i += kThreads) {
    const float normed = load(in + i) * inverse * weight[i];
    out[i] += gate ? normed * gate[i] : normed;
  }
}

}  // namespace

void add_rms_norm_gated_f32(float* x, const void* y, bool y_bf16, int64_t rows, int64_t dim,
                            const float* weight, float eps, const float* gate,
                            cudaStream_t stream) {
  if (rows == 0) return;
  if (y_bf16)
    add_rms_norm_gated_kernel<<<unsigned(rows), kThreads, 0, stream>>>(
        x, static_cast<const __nv_bfloat16*>(y), dim, weight, eps, gate);
  else
    add_rms_norm_gated_kernel<<<unsigned(rows), kThreads, 0, stream>>>(
        x, static_cast<const float*>(y), dim, weight, eps, gate);
  MMGEN_CUDA_CHECK_LAUNCH();
}

}  // namespace mmgen::cuda
