#include <cuda_bf16.h>

#include "core/cuda/cuda_check.h"
#include "core/cuda/device_ops.h"

namespace mmgen::cuda {
namespace {

using bf16 = __nv_bfloat16;
constexpr int kRowThreads = 256;

// Sum over the block (kRowThreads threads); every thread gets the result.
__device__ float block_sum(float value) {
  __shared__ float partial[kRowThreads / 32];
  __shared__ float total;
  for (int offset = 16; offset > 0; offset /= 2)
    value += __shfl_xor_sync(0xffffffffu, value, offset);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = value;
  __syncthreads();
  if (threadIdx.x == 0) {
    float sum = 0;
    for (int i = 0; i < kRowThreads / 32; ++i) sum += partial[i];
    total = sum;
  }
  __syncthreads();
  const float result = total;
  __syncthreads();  // `partial` and `total` may be reused by the next call
  return result;
}

// Two passes over the row (mean, then the variance around it), as torch does, so large residual
// values do not lose the variance to cancellation.
__global__ void layer_norm_kernel(const float* x, bf16* out, int64_t dim, const float* scale,
                                  const float* shift, float eps) {
  const float* row = x + blockIdx.x * dim;
  bf16* out_row = out + blockIdx.x * dim;
  float sum = 0;
  for (int64_t i = threadIdx.x; i < dim; i += kRowThreads) sum += row[i];
  const float mean = block_sum(sum) / float(dim);
  float squares = 0;
  for (int64_t i = threadIdx.x; i < dim; i += kRowThreads) {
    const float d = row[i] - mean;
    squares += d * d;
  }
  const float inverse = rsqrtf(block_sum(squares) / float(dim) + eps);
  for (int64_t i = threadIdx.x; i < dim; i += kRowThreads)
    out_row[i] = __float2bfloat16_rn((row[i] - mean) * inverse * scale[i] + shift[i]);
}

__global__ void rms_norm_rope_kernel(bf16* x, int64_t dim, const float* weight, float eps,
                                     const float* cos, const float* sin, int64_t tokens,
                                     int64_t head_dim) {
  __nv_bfloat162* row = reinterpret_cast<__nv_bfloat162*>(x + blockIdx.x * dim);
  const int64_t pairs = dim / 2;
  float squares = 0;
  for (int64_t p = threadIdx.x; p < pairs; p += kRowThreads) {
    const float2 v = __bfloat1622float2(row[p]);
    squares += v.x * v.x + v.y * v.y;
  }
  const float inverse = rsqrtf(block_sum(squares) / float(dim) + eps);
  const int64_t token = blockIdx.x % tokens;
  for (int64_t p = threadIdx.x; p < pairs; p += kRowThreads) {
    const float2 v = __bfloat1622float2(row[p]);
    float x1 = v.x * inverse * weight[2 * p], x2 = v.y * inverse * weight[2 * p + 1];
    if (cos) {
      const int64_t j = p % (head_dim / 2);
      const float c = cos[token * (head_dim / 2) + j], s = sin[token * (head_dim / 2) + j];
      const float r1 = x1 * c - x2 * s, r2 = x1 * s + x2 * c;
      x1 = r1, x2 = r2;
    }
    row[p] = __floats2bfloat162_rn(x1, x2);
  }
}

// One thread per (token, head, pair): the pair (i, i + half) is read and written by it alone.
__global__ void rope_half_kernel(float* x, int64_t pairs, int64_t heads, int64_t half,
                                 const float* cos, const float* sin) {
  for (int64_t p = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; p < pairs;
       p += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = p % half, row = p / half, token = row / heads;
    float* v = x + row * 2 * half;
    const float c = cos[token * half + i], s = sin[token * half + i];
    const float first = v[i], second = v[i + half];
    v[i] = first * c - second * s;
    v[i + half] = second * c + first * s;
  }
}

__global__ void gelu_tanh_kernel(bf16* x, int64_t count) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float v = __bfloat162float(x[i]);
    const float inner = 0.7978845608028654f * (v + 0.044715f * v * v * v);
    x[i] = __float2bfloat16_rn(0.5f * v * (1.0f + tanhf(inner)));
  }
}

__global__ void add_gated_kernel(float* x, const float* y, int64_t count, int64_t dim,
                                 const float* gate) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count;
       i += int64_t(gridDim.x) * blockDim.x)
    x[i] += gate ? y[i] * gate[i % dim] : y[i];
}

unsigned grid_for(int64_t count) {
  const int64_t blocks = (count + 255) / 256;
  return unsigned(blocks < 65536 ? blocks : 65536);
}

}  // namespace

void layer_norm_to_bf16(const float* x, void* out, int64_t rows, int64_t dim, const float* scale,
                        const float* shift, float eps, cudaStream_t stream) {
  if (rows == 0) return;
  layer_norm_kernel<<<unsigned(rows), kRowThreads, 0, stream>>>(x, static_cast<bf16*>(out), dim,
                                                                scale, shift, eps);
  MMGEN_CUDA_CHECK_LAUNCH();
}

void rms_norm_rope_bf16(void* x, int64_t rows, int64_t dim, const float* weight, float eps,
                        const float* cos, const float* sin, int64_t tokens, int64_t head_dim,
                        cudaStream_t stream) {
  if (rows == 0) return;
  rms_norm_rope_kernel<<<unsigned(rows), kRowThreads, 0, stream>>>(
      static_cast<bf16*>(x), dim, weight, eps, cos, sin, tokens, head_dim);
  MMGEN_CUDA_CHECK_LAUNCH();
}

void rope_half_f32(float* x, int64_t tokens, int64_t heads, int64_t head_dim, const float* cos,
                   const float* sin, cudaStream_t stream) {
  const int64_t pairs = tokens * heads * (head_dim / 2);
  if (pairs == 0) return;
  rope_half_kernel<<<grid_for(pairs), 256, 0, stream>>>(x, pairs, heads, head_dim / 2, cos, sin);
  MMGEN_CUDA_CHECK_LAUNCH();
}

void gelu_tanh_bf16(void* x, int64_t count, cudaStream_t stream) {
  if (count == 0) return;
  gelu_tanh_kernel<<<grid_for(count), 256, 0, stream>>>(static_cast<bf16*>(x), count);
  MMGEN_CUDA_CHECK_LAUNCH();
}

void add_gated_f32(float* x, const float* y, int64_t rows, int64_t dim, const float* gate,
                   cudaStream_t stream) {
  if (rows * dim == 0) return;
  add_gated_kernel<<<grid_for(rows * dim), 256, 0, stream>>>(x, y, rows * dim, dim, gate);
  MMGEN_CUDA_CHECK_LAUNCH();
}

}  // namespace mmgen::cuda
