#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include "core/cuda/cuda_check.h"
#include "core/cuda/fp8.h"
#include "core/error.h"

namespace mmgen::cuda {
namespace {

using bf16 = __nv_bfloat16;

__device__ __forceinline__ float load(const bf16* x, int64_t i) {
  return __bfloat162float(x[i]);
}
__device__ __forceinline__ float load(const float* x, int64_t i) {
  return x[i];
}

// max |x| into *amax: a grid-stride pass, a warp maximum, then one atomic per warp (a float's
// bits order like an int's when it is not negative).
template <typename In>
__global__ void amax_kernel(const In* x, int64_t count, float* amax) {
  float local = 0.0f;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count;
       i += int64_t(gridDim.x) * blockDim.x)
    local = fmaxf(local, fabsf(load(x, i)));
  for (int offset = 16; offset > 0; offset /= 2)
    local = fmaxf(local, __shfl_xor_sync(0xffffffffu, local, offset));
  if (threadIdx.x % 32 == 0) atomicMax(reinterpret_cast<int*>(amax), __float_as_int(local));
}

__device__ __forceinline__ float scale_of(float amax) {
  return amax > 0.0f && isfinite(amax) ? amax / kE4m3Max : 1.0f;
}

// Two values per thread and step, converted as a pair (one cvt instruction).
template <typename In>
__global__ void quantize_kernel(const In* x, int64_t count, __nv_fp8x2_storage_t* out,
                                const float* amax, float* scale) {
  const float s = scale_of(*amax), inverse = 1.0f / s;
  if (blockIdx.x == 0 && threadIdx.x == 0) *scale = s;
  const int64_t pairs = count / 2;
  for (int64_t p = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; p < pairs;
       p += int64_t(gridDim.x) * blockDim.x)
    out[p] = __nv_cvt_float2_to_fp8x2(
        make_float2(load(x, 2 * p) * inverse, load(x, 2 * p + 1) * inverse), __NV_SATFINITE,
        __NV_E4M3);
  if (count % 2 == 1 && blockIdx.x == 0 && threadIdx.x == 0) {
    __nv_fp8_storage_t* last = reinterpret_cast<__nv_fp8_storage_t*>(out) + count - 1;
    *last = __nv_cvt_float_to_fp8(load(x, count - 1) * inverse, __NV_SATFINITE, __NV_E4M3);
  }
}

__global__ void dequantize_kernel(const __nv_fp8_storage_t* q, const float* scale, int64_t count,
                                  float* out) {
  const float s = *scale;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count;
       i += int64_t(gridDim.x) * blockDim.x) {
    const __half_raw h = __nv_cvt_fp8_to_halfraw(q[i], __NV_E4M3);
    out[i] = __half2float(__half(h)) * s;
  }
}

// One row per CTA: the row's maximum (16-byte loads, a block reduction), then its conversion,
// reading the row again (from L1/L2: a row is at most a few tens of KB).
constexpr int kRowThreads = 128;
__global__ void __launch_bounds__(kRowThreads)
    quantize_rows_kernel(const bf16* x, int64_t cols, int64_t row_stride, uint8_t* out,
                         float* scales) {
  const int64_t r = blockIdx.x;
  const uint4* row = reinterpret_cast<const uint4*>(x + r * row_stride);
  const int64_t vectors = cols / 8;
  float local = 0.0f;
  for (int64_t v = threadIdx.x; v < vectors; v += kRowThreads) {
    const uint4 bits = row[v];
    const bf16* values = reinterpret_cast<const bf16*>(&bits);
#pragma unroll
    for (int j = 0; j < 8; ++j) local = fmaxf(local, fabsf(__bfloat162float(values[j])));
  }
  for (int offset = 16; offset > 0; offset /= 2)
    local = fmaxf(local, __shfl_xor_sync(0xffffffffu, local, offset));
  __shared__ float warp_max[kRowThreads / 32];
  if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = local;
  __syncthreads();
  float amax = warp_max[0];
#pragma unroll
  for (int w = 1; w < kRowThreads / 32; ++w) amax = fmaxf(amax, warp_max[w]);
  const float s = scale_of(amax);
  if (threadIdx.x == 0) scales[r] = s;
  uint2* out_row = reinterpret_cast<uint2*>(out + r * cols);
  for (int64_t v = threadIdx.x; v < vectors; v += kRowThreads) {
    const uint4 bits = row[v];
    const bf16* values = reinterpret_cast<const bf16*>(&bits);
    uint32_t packed[2];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const __nv_fp8x2_storage_t low = __nv_cvt_float2_to_fp8x2(
          make_float2(__fdiv_rn(__bfloat162float(values[4 * half + 0]), s),
                      __fdiv_rn(__bfloat162float(values[4 * half + 1]), s)),
          __NV_SATFINITE, __NV_E4M3);
      const __nv_fp8x2_storage_t high = __nv_cvt_float2_to_fp8x2(
          make_float2(__fdiv_rn(__bfloat162float(values[4 * half + 2]), s),
                      __fdiv_rn(__bfloat162float(values[4 * half + 3]), s)),
          __NV_SATFINITE, __NV_E4M3);
      packed[half] = uint32_t(low) | (uint32_t(high) << 16);
    }
    out_row[v] = make_uint2(packed[0], packed[1]);
  }
}

template <typename Out>
__global__ void dequantize_rows_kernel(const __nv_fp8_storage_t* q, const float* scales,
                                       int64_t cols, int64_t count, Out* out) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float value =
        __half2float(__half(__nv_cvt_fp8_to_halfraw(q[i], __NV_E4M3))) * scales[i / cols];
    if constexpr (sizeof(Out) == 2)
      out[i] = __float2bfloat16_rn(value);
    else
      out[i] = value;
  }
}

unsigned blocks_for(int64_t count) {
  const int64_t blocks = (count + 255) / 256;
  return unsigned(blocks < 4096 ? (blocks > 0 ? blocks : 1) : 4096);
}

template <typename In>
void quantize(const In* x, int64_t count, void* out, float* scale, float* amax,
              cudaStream_t stream) {
  MMGEN_CUDA_CHECK(cudaMemsetAsync(amax, 0, sizeof(float), stream));
  amax_kernel<<<blocks_for(count), 256, 0, stream>>>(x, count, amax);
  MMGEN_CUDA_CHECK_LAUNCH();
  quantize_kernel<<<blocks_for(count / 2 + 1), 256, 0, stream>>>(
      x, count, static_cast<__nv_fp8x2_storage_t*>(out), amax, scale);
  MMGEN_CUDA_CHECK_LAUNCH();
}

}  // namespace

void quantize_e4m3(const void* x, bool x_bf16, int64_t count, void* out, float* scale, float* amax,
                   cudaStream_t stream) {
  if (count <= 0) return;
  if (x_bf16)
    quantize(static_cast<const bf16*>(x), count, out, scale, amax, stream);
  else
    quantize(static_cast<const float*>(x), count, out, scale, amax, stream);
}

void quantize_e4m3_rows(const void* x, int64_t rows, int64_t cols, int64_t row_stride, void* out,
                        float* scales, cudaStream_t stream) {
  check(cols % 8 == 0 && row_stride % 8 == 0 && row_stride >= cols &&
            reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(out) % 8 == 0,
        "quantize_e4m3_rows: rows of {} values {} apart must be whole 16-byte vectors", cols,
        row_stride);
  check(rows < (int64_t(1) << 31), "quantize_e4m3_rows: {} rows are too many", rows);
  if (rows <= 0 || cols <= 0) return;
  quantize_rows_kernel<<<unsigned(rows), kRowThreads, 0, stream>>>(
      static_cast<const bf16*>(x), cols, row_stride, static_cast<uint8_t*>(out), scales);
  MMGEN_CUDA_CHECK_LAUNCH();
}

void dequantize_e4m3_rows(const void* q, const float* scales, int64_t rows, int64_t cols, void* out,
                          bool out_bf16, cudaStream_t stream) {
  const int64_t count = rows * cols;
  if (count <= 0) return;
  const auto* bytes = static_cast<const __nv_fp8_storage_t*>(q);
  if (out_bf16)
    dequantize_rows_kernel<<<blocks_for(count), 256, 0, stream>>>(bytes, scales, cols, count,
                                                                  static_cast<bf16*>(out));
  else
    dequantize_rows_kernel<<<blocks_for(count), 256, 0, stream>>>(bytes, scales, cols, count,
                                                                  static_cast<float*>(out));
  MMGEN_CUDA_CHECK_LAUNCH();
}

void dequantize_e4m3(const void* q, const float* scale, int64_t count, float* out,
                     cudaStream_t stream) {
  if (count <= 0) return;
  dequantize_kernel<<<blocks_for(count), 256, 0, stream>>>(
      static_cast<const __nv_fp8_storage_t*>(q), scale, count, out);
  MMGEN_CUDA_CHECK_LAUNCH();
}

}  // namespace mmgen::cuda
