#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

#include "core/cuda/cuda_check.h"
#include "core/cuda/t5_ops.h"

namespace mmgen::cuda {
namespace {

using bf16 = __nv_bfloat16;
constexpr int kRowThreads = 256;

__device__ float block_sum(float value) {
  __shared__ float partial[kRowThreads / 32];
  for (int offset = 16; offset > 0; offset /= 2)
    value += __shfl_xor_sync(0xffffffffu, value, offset);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = value;
  __syncthreads();
  float total = 0;
#pragma unroll
  for (int i = 0; i < kRowThreads / 32; ++i) total += partial[i];
  return total;
}

__device__ __forceinline__ void store(bf16* out, float value) {
  *out = __float2bfloat16_rn(value);
}
__device__ __forceinline__ void store(float* out, float value) {
  *out = value;
}

template <typename Out>
__global__ void rms_norm_kernel(const float* x, Out* out, int64_t dim, const float* weight,
                                float eps) {
  const float* row = x + blockIdx.x * dim;
  float squares = 0;
  for (int64_t i = threadIdx.x; i < dim; i += kRowThreads) squares += row[i] * row[i];
  const float inverse = rsqrtf(block_sum(squares) / float(dim) + eps);
  Out* out_row = out + blockIdx.x * dim;
  for (int64_t i = threadIdx.x; i < dim; i += kRowThreads)
    store(out_row + i, row[i] * inverse * weight[i]);
}

// Rows of a width divisible by 4 with 16-byte aligned rows and weight: each thread keeps its
// float4 slots of the row in registers between the sum of squares and the write, so the row is
// read from memory once (the loop above reads it twice; the second read mostly hits the cache,
// but the kernel moved 2.1 TB/s on an H100 for Z-Image's 3840-wide rows). dim ≤ 1024 · kSlots.
template <typename Out, int kSlots>
__global__ void rms_norm_vec4_kernel(const float* x, Out* out, int64_t dim, const float* weight,
                                     float eps) {
  const int64_t quads = dim / 4;
  const float4* row = reinterpret_cast<const float4*>(x + blockIdx.x * dim);
  float4 v[kSlots];
  float squares = 0;
#pragma unroll
  for (int s = 0; s < kSlots; ++s) {
    const int64_t q = threadIdx.x + int64_t(s) * kRowThreads;
    v[s] = q < quads ? row[q] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    squares += v[s].x * v[s].x + v[s].y * v[s].y + v[s].z * v[s].z + v[s].w * v[s].w;
  }
  const float inverse = rsqrtf(block_sum(squares) / float(dim) + eps);
  const float4* w = reinterpret_cast<const float4*>(weight);
  Out* out_row = out + blockIdx.x * dim;
#pragma unroll
  for (int s = 0; s < kSlots; ++s) {
    const int64_t q = threadIdx.x + int64_t(s) * kRowThreads;
    if (q >= quads) break;
    const float4 g = w[q];
    store(out_row + 4 * q, v[s].x * inverse * g.x);
    store(out_row + 4 * q + 1, v[s].y * inverse * g.y);
    store(out_row + 4 * q + 2, v[s].z * inverse * g.z);
    store(out_row + 4 * q + 3, v[s].w * inverse * g.w);
  }
}

template <typename Out>
void launch_rms_norm(const float* x, Out* out, int64_t rows, int64_t dim, const float* weight,
                     float eps, cudaStream_t stream) {
  const bool aligned = dim % 4 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(weight) % 16 == 0;
  const unsigned blocks = unsigned(rows);
  if (aligned && dim <= 4 * kRowThreads)
    rms_norm_vec4_kernel<Out, 1><<<blocks, kRowThreads, 0, stream>>>(x, out, dim, weight, eps);
  else if (aligned && dim <= 8 * kRowThreads)
    rms_norm_vec4_kernel<Out, 2><<<blocks, kRowThreads, 0, stream>>>(x, out, dim, weight, eps);
  else if (aligned && dim <= 16 * kRowThreads)
    rms_norm_vec4_kernel<Out, 4><<<blocks, kRowThreads, 0, stream>>>(x, out, dim, weight, eps);
  else if (aligned && dim <= 32 * kRowThreads)
    rms_norm_vec4_kernel<Out, 8><<<blocks, kRowThreads, 0, stream>>>(x, out, dim, weight, eps);
  else
    rms_norm_kernel<Out><<<blocks, kRowThreads, 0, stream>>>(x, out, dim, weight, eps);
  MMGEN_CUDA_CHECK_LAUNCH();
}

__device__ __forceinline__ uint64_t mix(uint64_t z) {  // splitmix64's finaliser
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

__global__ void fill_uniform_kernel(bf16* out, int64_t count, uint64_t seed, float scale) {
  const int64_t index = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (index >= count) return;
  const uint64_t bits = mix(seed * 0x9e3779b97f4a7c15ull + uint64_t(index));
  const float unit = float(bits >> 40) * (1.0f / 16777216.0f);  // [0, 1)
  out[index] = __float2bfloat16_rn((2.0f * unit - 1.0f) * scale);
}

unsigned blocks_for(int64_t count, int threads) {
  return unsigned((count + threads - 1) / threads);
}

}  // namespace

void t5_rms_norm_bf16(const float* x, void* out, int64_t rows, int64_t dim, const float* weight,
                      float eps, cudaStream_t stream) {
  if (rows == 0) return;
  launch_rms_norm(x, static_cast<bf16*>(out), rows, dim, weight, eps, stream);
}

void t5_rms_norm_f32(const float* x, float* out, int64_t rows, int64_t dim, const float* weight,
                     float eps, cudaStream_t stream) {
  if (rows == 0) return;
  launch_rms_norm(x, out, rows, dim, weight, eps, stream);
}

void fill_uniform_bf16(void* out, int64_t count, uint64_t seed, float scale, cudaStream_t stream) {
  if (count == 0) return;
  fill_uniform_kernel<<<blocks_for(count, 256), 256, 0, stream>>>(static_cast<bf16*>(out), count,
                                                                  seed, scale);
  MMGEN_CUDA_CHECK_LAUNCH();
}

}  // namespace mmgen::cuda
