#include <cuda_bf16.h>

#include "core/cuda/cuda_check.h"
#include "core/cuda/elementwise.h"

namespace mmgen::cuda {
namespace {

using bf16 = __nv_bfloat16;
constexpr int kThreads = 256;

unsigned blocks_for(int64_t count) {
  return unsigned((count + kThreads - 1) / kThreads);
}

__global__ void f32_to_bf16_kernel(const float* from, bf16* to, int64_t count) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < count) to[i] = __float2bfloat16_rn(from[i]);
}

__global__ void bf16_to_f32_kernel(const bf16* from, float* to, int64_t count) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < count) to[i] = __bfloat162float(from[i]);
}

// The same formulas as the CPU ops (core/ops.cpp), in float32.
__device__ __forceinline__ float activate(float v, Activation activation) {
  switch (activation) {
    case Activation::Relu:
      return v > 0.0f ? v : 0.0f;
    case Activation::Gelu:
      return 0.5f * v * (1.0f + erff(v * 0.7071067811865476f));
    case Activation::GeluTanh:
      return 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));
    case Activation::Silu:
    default:
      return v / (1.0f + expf(-v));
  }
}

__global__ void activate_kernel(float* x, int64_t count, Activation activation) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < count) x[i] = activate(x[i], activation);
}

__global__ void mul_kernel(float* x, const float* y, int64_t count) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < count) x[i] *= y[i];
}

__global__ void scale_kernel(float* x, float factor, int64_t count) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < count) x[i] *= factor;
}

__global__ void add_kernel(float* x, const float* y, int64_t count) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < count) x[i] += y[i];
}

__global__ void add_bias_kernel(float* x, const float* bias, int64_t count, int64_t dim) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < count) x[i] += bias[i % dim];
}

}  // namespace

void f32_to_bf16(const float* from, void* to, int64_t count) {
  if (count == 0) return;
  f32_to_bf16_kernel<<<blocks_for(count), kThreads>>>(from, static_cast<bf16*>(to), count);
  MMGEN_CUDA_CHECK_LAUNCH();
}

void bf16_to_f32(const void* from, float* to, int64_t count) {
  if (count == 0) return;
  bf16_to_f32_kernel<<<blocks_for(count), kThreads>>>(static_cast<const bf16*>(from), to, count);
  MMGEN_CUDA_CHECK_LAUNCH();
}

void activate_f32(float* x, int64_t count, Activation activation) {
  if (count == 0) return;
  activate_kernel<<<blocks_for(count), kThreads>>>(x, count, activation);
  MMGEN_CUDA_CHECK_LAUNCH();
}

void mul_f32(float* x, const float* y, int64_t count) {
  if (count == 0) return;
  mul_kernel<<<blocks_for(count), kThreads>>>(x, y, count);
  MMGEN_CUDA_CHECK_LAUNCH();
}

void scale_f32(float* x, float factor, int64_t count) {
  if (count == 0) return;
  scale_kernel<<<blocks_for(count), kThreads>>>(x, factor, count);
  MMGEN_CUDA_CHECK_LAUNCH();
}

void add_f32(float* x, const float* y, int64_t count) {
  if (count == 0) return;
  add_kernel<<<blocks_for(count), kThreads>>>(x, y, count);
  MMGEN_CUDA_CHECK_LAUNCH();
}

void add_bias_f32(float* x, const float* bias, int64_t rows, int64_t dim) {
  if (rows * dim == 0) return;
  add_bias_kernel<<<blocks_for(rows * dim), kThreads>>>(x, bias, rows * dim, dim);
  MMGEN_CUDA_CHECK_LAUNCH();
}

}  // namespace mmgen::cuda
