#include <cuda_bf16.h>

#include <cmath>

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

__device__ __forceinline__ float activate(float v, FfnActivation activation) {
  switch (activation) {
    case FfnActivation::Relu:
      return v > 0.0f ? v : 0.0f;
    case FfnActivation::Gelu:
      return 0.5f * v * (1.0f + erff(v * 0.7071067811865476f));
    case FfnActivation::GeluTanh:
      return 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));
    case FfnActivation::Silu:
    default:
      return v / (1.0f + expf(-v));
  }
}

template <typename Out>
__global__ void ffn_activation_kernel(const float* in, Out* out, int64_t rows, int64_t width,
                                      FfnActivation activation, bool gated) {
  const int64_t index = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (index >= rows * width) return;
  const int64_t row = index / width, column = index % width;
  if (gated) {
    const float* pair = in + row * 2 * width;
    store(out + index, activate(pair[column], activation) * pair[width + column]);
  } else {
    store(out + index, activate(in[index], activation));
  }
}

__global__ void expand_bias_kernel(const float* tables, const int32_t* bucket_of_offset, float* out,
                                   int64_t layers, int64_t buckets, int64_t heads, int64_t span) {
  const int64_t index = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (index >= layers * heads * span) return;
  const int64_t o = index % span, h = (index / span) % heads, l = index / (span * heads);
  out[index] = tables[(l * buckets + bucket_of_offset[o]) * heads + h];
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
  rms_norm_kernel<bf16>
      <<<unsigned(rows), kRowThreads, 0, stream>>>(x, static_cast<bf16*>(out), dim, weight, eps);
  MMGEN_CUDA_CHECK_LAUNCH();
}

void t5_rms_norm_f32(const float* x, float* out, int64_t rows, int64_t dim, const float* weight,
                     float eps, cudaStream_t stream) {
  if (rows == 0) return;
  rms_norm_kernel<float><<<unsigned(rows), kRowThreads, 0, stream>>>(x, out, dim, weight, eps);
  MMGEN_CUDA_CHECK_LAUNCH();
}

void t5_ffn_activation(const float* in, void* out, int64_t rows, int64_t width,
                       FfnActivation activation, bool gated, cudaStream_t stream) {
  if (rows * width == 0) return;
  ffn_activation_kernel<bf16><<<blocks_for(rows * width, 256), 256, 0, stream>>>(
      in, static_cast<bf16*>(out), rows, width, activation, gated);
  MMGEN_CUDA_CHECK_LAUNCH();
}

void t5_ffn_activation_f32(const float* in, float* out, int64_t rows, int64_t width,
                           FfnActivation activation, bool gated, cudaStream_t stream) {
  if (rows * width == 0) return;
  ffn_activation_kernel<float>
      <<<blocks_for(rows * width, 256), 256, 0, stream>>>(in, out, rows, width, activation, gated);
  MMGEN_CUDA_CHECK_LAUNCH();
}

void t5_expand_relative_bias(const float* tables, const int32_t* bucket_of_offset, float* out,
                             int64_t layers, int64_t buckets, int64_t heads, int64_t span,
                             cudaStream_t stream) {
  const int64_t count = layers * heads * span;
  if (count == 0) return;
  expand_bias_kernel<<<blocks_for(count, 256), 256, 0, stream>>>(tables, bucket_of_offset, out,
                                                                 layers, buckets, heads, span);
  MMGEN_CUDA_CHECK_LAUNCH();
}

void fill_uniform_bf16(void* out, int64_t count, uint64_t seed, float scale, cudaStream_t stream) {
  if (count == 0) return;
  fill_uniform_kernel<<<blocks_for(count, 256), 256, 0, stream>>>(static_cast<bf16*>(out), count,
                                                                  seed, scale);
  MMGEN_CUDA_CHECK_LAUNCH();
}

}  // namespace mmgen::cuda
