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

// Eight consecutive values as float32: one 16-byte load for bf16, two for float32.
__device__ __forceinline__ void load8(const bf16* p, float v[8]) {
  const uint4 bits = *reinterpret_cast<const uint4*>(p);
  const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(&bits);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __bfloat1622float2(pairs[i]);
    v[2 * i] = f.x, v[2 * i + 1] = f.y;
  }
}
__device__ __forceinline__ void load8(const float* p, float v[8]) {
  const float4 a = reinterpret_cast<const float4*>(p)[0], b = reinterpret_cast<const float4*>(p)[1];
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}
__device__ __forceinline__ void store8(bf16* p, const float v[8]) {
  uint4 bits;
  __nv_bfloat162* pairs = reinterpret_cast<__nv_bfloat162*>(&bits);
#pragma unroll
  for (int i = 0; i < 4; ++i) pairs[i] = __floats2bfloat162_rn(v[2 * i], v[2 * i + 1]);
  *reinterpret_cast<uint4*>(p) = bits;
}
__device__ __forceinline__ void store8(float* p, const float v[8]) {
  reinterpret_cast<float4*>(p)[0] = make_float4(v[0], v[1], v[2], v[3]);
  reinterpret_cast<float4*>(p)[1] = make_float4(v[4], v[5], v[6], v[7]);
}
__device__ __forceinline__ float as_float(bf16 v) {
  return __bfloat162float(v);
}
__device__ __forceinline__ float as_float(float v) {
  return v;
}
__device__ __forceinline__ void store(bf16* p, float v) {
  *p = __float2bfloat16_rn(v);
}
__device__ __forceinline__ void store(float* p, float v) {
  *p = v;
}

// One thread per eight values: 16-byte loads and stores when `vector` (every pointer 16-byte
// aligned), the memory-bound op's whole cost; element by element otherwise and for the tail.
template <typename Gate, typename Up, typename Out>
__global__ void silu_mul_kernel(const Gate* gate, const Up* up, Out* out, int64_t count,
                                bool vector) {
  const int64_t first = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * 8;
  if (first >= count) return;
  if (vector && first + 8 <= count) {
    float g[8], u[8];
    load8(gate + first, g);
    load8(up + first, u);
#pragma unroll
    for (int i = 0; i < 8; ++i) g[i] = activate(g[i], Activation::Silu) * u[i];
    store8(out + first, g);
    return;
  }
  const int64_t last = first + 8 < count ? first + 8 : count;
  for (int64_t i = first; i < last; ++i)
    store(out + i, activate(as_float(gate[i]), Activation::Silu) * as_float(up[i]));
}

template <typename Gate, typename Up, typename Out>
void launch_silu_mul(const void* gate, const void* up, void* out, int64_t count) {
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  const int64_t threads = (count + 7) / 8;
  silu_mul_kernel<<<unsigned((threads + kThreads - 1) / kThreads), kThreads>>>(
      static_cast<const Gate*>(gate), static_cast<const Up*>(up), static_cast<Out*>(out), count,
      aligned(gate) && aligned(up) && aligned(out));
}

template <typename Gate, typename Up>
void launch_silu_mul(const void* gate, const void* up, void* out, bool out_bf16, int64_t count) {
  if (out_bf16)
    launch_silu_mul<Gate, Up, bf16>(gate, up, out, count);
  else
    launch_silu_mul<Gate, Up, float>(gate, up, out, count);
}

template <typename Gate>
void launch_silu_mul(const void* gate, const void* up, bool up_bf16, void* out, bool out_bf16,
                     int64_t count) {
  if (up_bf16)
    launch_silu_mul<Gate, bf16>(gate, up, out, out_bf16, count);
  else
    launch_silu_mul<Gate, float>(gate, up, out, out_bf16, count);
}

}  // namespace

void silu_mul(const void* gate, bool gate_bf16, const void* up, bool up_bf16, void* out,
              bool out_bf16, int64_t count) {
  if (count == 0) return;
  if (gate_bf16)
    launch_silu_mul<bf16>(gate, up, up_bf16, out, out_bf16, count);
  else
    launch_silu_mul<float>(gate, up, up_bf16, out, out_bf16, count);
  MMGEN_CUDA_CHECK_LAUNCH();
}

namespace {

__global__ void fold_scale_gate_kernel(const float* modulation, const float* norms, float* out,
                                       int64_t pairs, int64_t dim) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= pairs * dim) return;
  const int64_t pair = i / dim, column = i % dim;
  const int64_t scale = 2 * pair * dim + column, gate = scale + dim;
  out[scale] = norms[i] * (1.0f + modulation[scale]);
  out[gate] = tanhf(modulation[gate]);
}

}  // namespace

void fold_scale_gate(const float* modulation, const float* norms, float* out, int64_t pairs,
                     int64_t dim) {
  if (pairs * dim == 0) return;
  fold_scale_gate_kernel<<<blocks_for(pairs * dim), kThreads>>>(modulation, norms, out, pairs, dim);
  MMGEN_CUDA_CHECK_LAUNCH();
}

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
