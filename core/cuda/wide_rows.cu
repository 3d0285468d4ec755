// Row kernels for a DiT's hidden width (Wan's 1536-5120): the row stays in registers between
// its reductions and its write, 16-byte accesses, one block of 1-8 warps per row. The
// block-per-row kernels of device_ops.cu read every value twice or three times through 4-byte
// accesses with 256 threads, and measured 1.6-1.8 TB/s on Wan's rows (H200); these are what the
// Wan block's norms run on when the row's shape allows.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "core/cuda/cuda_check.h"
#include "core/cuda/device_ops.h"
#include "core/cuda/fp8.h"  // kE4m3Max

namespace mmgen::cuda {
namespace {

using bf16 = __nv_bfloat16;
constexpr int kMaxWarps = 8;

bool aligned(const void* pointer, uintptr_t bytes) {
  return reinterpret_cast<uintptr_t>(pointer) % bytes == 0;
}

// The sum over the row's block (1-8 warps); every thread gets it. `partial` holds one value per
// warp and is free again when this returns.
__device__ __forceinline__ float row_sum(float value, float* partial) {
  for (int offset = 16; offset > 0; offset /= 2)
    value += __shfl_xor_sync(0xffffffffu, value, offset);
  const int warps = blockDim.x / 32;
  if (warps == 1) return value;
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = value;
  __syncthreads();
  float total = 0;
  for (int w = 0; w < warps; ++w) total += partial[w];
  __syncthreads();
  return total;
}

// The maximum over the row's block, as row_sum.
__device__ __forceinline__ float row_max(float value, float* partial) {
  for (int offset = 16; offset > 0; offset /= 2)
    value = fmaxf(value, __shfl_xor_sync(0xffffffffu, value, offset));
  const int warps = blockDim.x / 32;
  if (warps == 1) return value;
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = value;
  __syncthreads();
  float total = partial[0];
  for (int w = 1; w < warps; ++w) total = fmaxf(total, partial[w]);
  __syncthreads();
  return total;
}

__device__ __forceinline__ float4 load_y(const float* y, int64_t chunk) {
  return reinterpret_cast<const float4*>(y)[chunk];
}
__device__ __forceinline__ float4 load_y(const bf16* y, int64_t chunk) {
  const uint2 raw = reinterpret_cast<const uint2*>(y)[chunk];
  const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.x));
  const float2 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.y));
  return make_float4(a.x, a.y, b.x, b.y);
}

// Optionally x += y · gate (gate null: x += y; y null: no update), then out = LayerNorm(x) · scale
// + shift in bf16, or (kFp8) in e4m3 with the row's scale max|out| / 448 in scales[row] (the
// values divided by it, rounded to nearest even, saturating: quantize_e4m3_rows of the float32
// row): thread t holds chunks t, t + threads, ... of 4 values each.
template <int kSlots, typename In, bool kFp8>
__global__ void __launch_bounds__(32 * kMaxWarps)
    residual_layer_norm_kernel(float* x, const In* y, const float* gate, int64_t dim,
                               const float* scale, const float* shift, float eps, void* out,
                               float* scales) {
  __shared__ float partial[kMaxWarps];
  const int64_t chunks = dim / 4, row = blockIdx.x;
  float4* x_row = reinterpret_cast<float4*>(x + row * dim);
  float4 v[kSlots];
#pragma unroll
  for (int s = 0; s < kSlots; ++s) {
    const int64_t c = threadIdx.x + int64_t(s) * blockDim.x;
    v[s] = c < chunks ? x_row[c] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
  if (y) {
    const In* y_row = y + row * dim;
#pragma unroll
    for (int s = 0; s < kSlots; ++s) {
      const int64_t c = threadIdx.x + int64_t(s) * blockDim.x;
      if (c >= chunks) continue;
      const float4 u = load_y(y_row, c);
      const float4 g =
          gate ? reinterpret_cast<const float4*>(gate)[c] : make_float4(1.0f, 1.0f, 1.0f, 1.0f);
      v[s].x += u.x * g.x, v[s].y += u.y * g.y, v[s].z += u.z * g.z, v[s].w += u.w * g.w;
      x_row[c] = v[s];
    }
  }
  float sum = 0;
#pragma unroll
  for (int s = 0; s < kSlots; ++s) sum += (v[s].x + v[s].y) + (v[s].z + v[s].w);
  const float mean = row_sum(sum, partial) / float(dim);
  float squares = 0;
#pragma unroll
  for (int s = 0; s < kSlots; ++s) {
    const int64_t c = threadIdx.x + int64_t(s) * blockDim.x;
    if (c >= chunks) continue;
    const float a = v[s].x - mean, b = v[s].y - mean, d = v[s].z - mean, e = v[s].w - mean;
    squares += (a * a + b * b) + (d * d + e * e);
  }
  const float inverse = rsqrtf(row_sum(squares, partial) / float(dim) + eps);
  // The normed row, in place of x's values; its maximum for the e4m3 scale.
  float amax = 0.0f;
#pragma unroll
  for (int s = 0; s < kSlots; ++s) {
    const int64_t c = threadIdx.x + int64_t(s) * blockDim.x;
    if (c >= chunks) continue;
    const float4 a = reinterpret_cast<const float4*>(scale)[c];
    const float4 b = reinterpret_cast<const float4*>(shift)[c];
    v[s] =
        make_float4((v[s].x - mean) * inverse * a.x + b.x, (v[s].y - mean) * inverse * a.y + b.y,
                    (v[s].z - mean) * inverse * a.z + b.z, (v[s].w - mean) * inverse * a.w + b.w);
    if constexpr (kFp8)
      amax = fmaxf(fmaxf(amax, fmaxf(fabsf(v[s].x), fabsf(v[s].y))),
                   fmaxf(fabsf(v[s].z), fabsf(v[s].w)));
  }
  if constexpr (kFp8) {
    amax = row_max(amax, partial);
    const float row_scale = amax > 0.0f && isfinite(amax) ? amax / kE4m3Max : 1.0f;
    if (threadIdx.x == 0) scales[row] = row_scale;
    uint32_t* out_row = reinterpret_cast<uint32_t*>(static_cast<uint8_t*>(out) + row * dim);
#pragma unroll
    for (int s = 0; s < kSlots; ++s) {
      const int64_t c = threadIdx.x + int64_t(s) * blockDim.x;
      if (c >= chunks) continue;
      const __nv_fp8x2_storage_t low = __nv_cvt_float2_to_fp8x2(
          make_float2(__fdiv_rn(v[s].x, row_scale), __fdiv_rn(v[s].y, row_scale)), __NV_SATFINITE,
          __NV_E4M3);
      const __nv_fp8x2_storage_t high = __nv_cvt_float2_to_fp8x2(
          make_float2(__fdiv_rn(v[s].z, row_scale), __fdiv_rn(v[s].w, row_scale)), __NV_SATFINITE,
          __NV_E4M3);
      out_row[c] = uint32_t(low) | (uint32_t(high) << 16);
    }
  } else {
    uint2* out_row = reinterpret_cast<uint2*>(static_cast<bf16*>(out) + row * dim);
#pragma unroll
    for (int s = 0; s < kSlots; ++s) {
      const int64_t c = threadIdx.x + int64_t(s) * blockDim.x;
      if (c >= chunks) continue;
      const __nv_bfloat162 low = __floats2bfloat162_rn(v[s].x, v[s].y);
      const __nv_bfloat162 high = __floats2bfloat162_rn(v[s].z, v[s].w);
      out_row[c] = make_uint2(*reinterpret_cast<const uint32_t*>(&low),
                              *reinterpret_cast<const uint32_t*>(&high));
    }
  }
}

// RMSNorm of a bf16 row in place, then interleaved-pair RoPE per head: chunks of 8 values (4
// pairs of one head, as head_dim is a multiple of 8), kept packed in registers.
template <int kSlots>
__global__ void __launch_bounds__(32 * kMaxWarps)
    rms_norm_rope_rows_kernel(bf16* x, int64_t dim, const float* weight, float eps,
                              const float* cos, const float* sin, int64_t tokens, int64_t head_dim,
                              int64_t rows_per_position) {
  __shared__ float partial[kMaxWarps];
  const int64_t chunks = dim / 8, row = blockIdx.x;
  uint4* x_row = reinterpret_cast<uint4*>(x + row * dim);
  uint4 packed[kSlots];
  float squares = 0;
#pragma unroll
  for (int s = 0; s < kSlots; ++s) {
    const int64_t c = threadIdx.x + int64_t(s) * blockDim.x;
    packed[s] = c < chunks ? x_row[c] : make_uint4(0, 0, 0, 0);
    const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(&packed[s]);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 v = __bfloat1622float2(pairs[i]);
      squares += v.x * v.x + v.y * v.y;
    }
  }
  const float inverse = rsqrtf(row_sum(squares, partial) / float(dim) + eps);
  const int64_t half = head_dim / 2, position = (row / rows_per_position) % tokens;
#pragma unroll
  for (int s = 0; s < kSlots; ++s) {
    const int64_t c = threadIdx.x + int64_t(s) * blockDim.x;
    if (c >= chunks) continue;
    const float4 w0 = reinterpret_cast<const float4*>(weight)[2 * c];
    const float4 w1 = reinterpret_cast<const float4*>(weight)[2 * c + 1];
    float4 cs = make_float4(1.0f, 1.0f, 1.0f, 1.0f), sn = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (cos) {
      const int64_t j = (8 * c % head_dim) / 2;  // the chunk's first pair within its head
      cs = *reinterpret_cast<const float4*>(cos + position * half + j);
      sn = *reinterpret_cast<const float4*>(sin + position * half + j);
    }
    const float2 w[4] = {{w0.x, w0.y}, {w0.z, w0.w}, {w1.x, w1.y}, {w1.z, w1.w}};
    const float cv[4] = {cs.x, cs.y, cs.z, cs.w}, sv[4] = {sn.x, sn.y, sn.z, sn.w};
    const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(&packed[s]);
    uint4 result;
    __nv_bfloat162* written = reinterpret_cast<__nv_bfloat162*>(&result);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 v = __bfloat1622float2(pairs[i]);
      const float x1 = v.x * inverse * w[i].x, x2 = v.y * inverse * w[i].y;
      written[i] = __floats2bfloat162_rn(x1 * cv[i] - x2 * sv[i], x1 * sv[i] + x2 * cv[i]);
    }
    x_row[c] = result;
  }
}

// Warps for a row of `chunks` chunks at up to `max_slots` chunks per thread; 0 when the row is
// wider than kMaxWarps warps hold.
int warps_for(int64_t chunks, int64_t max_slots) {
  const int64_t warps = (chunks + 32 * max_slots - 1) / (32 * max_slots);
  return warps <= kMaxWarps ? int(warps > 0 ? warps : 1) : 0;
}

template <typename In, bool kFp8>
void launch_residual_layer_norm(int slots, int threads, int64_t rows, float* x, const In* y,
                                const float* gate, int64_t dim, const float* scale,
                                const float* shift, float eps, void* out, float* scales,
                                cudaStream_t stream) {
  if (slots <= 4)
    residual_layer_norm_kernel<4, In, kFp8>
        <<<unsigned(rows), threads, 0, stream>>>(x, y, gate, dim, scale, shift, eps, out, scales);
  else if (slots <= 8)
    residual_layer_norm_kernel<8, In, kFp8>
        <<<unsigned(rows), threads, 0, stream>>>(x, y, gate, dim, scale, shift, eps, out, scales);
  else
    residual_layer_norm_kernel<12, In, kFp8>
        <<<unsigned(rows), threads, 0, stream>>>(x, y, gate, dim, scale, shift, eps, out, scales);
}

template <bool kFp8>
void launch_residual_layer_norm(int slots, int threads, int64_t rows, float* x, const void* y,
                                bool y_bf16, const float* gate, int64_t dim, const float* scale,
                                const float* shift, float eps, void* out, float* scales,
                                cudaStream_t stream) {
  if (y && y_bf16)
    launch_residual_layer_norm<bf16, kFp8>(slots, threads, rows, x, static_cast<const bf16*>(y),
                                           gate, dim, scale, shift, eps, out, scales, stream);
  else
    launch_residual_layer_norm<float, kFp8>(slots, threads, rows, x, static_cast<const float*>(y),
                                            gate, dim, scale, shift, eps, out, scales, stream);
}

}  // namespace

bool residual_layer_norm_bf16(float* x, const void* y, bool y_bf16, const float* gate, int64_t rows,
                              int64_t dim, const float* scale, const float* shift, float eps,
                              void* out, cudaStream_t stream, float* e4m3_scales) {
  const int warps = warps_for(dim / 4, 12);
  if (dim % 4 != 0 || warps == 0 || rows > 0x7fffffff || !aligned(x, 16) || !aligned(scale, 16) ||
      !aligned(shift, 16) || (gate && !aligned(gate, 16)) || !aligned(out, e4m3_scales ? 4 : 8) ||
      (y && !aligned(y, y_bf16 ? 8 : 16)))
    return false;
  if (rows == 0) return true;
  const int threads = 32 * warps;
  const int slots = int((dim / 4 + threads - 1) / threads);
  if (e4m3_scales)
    launch_residual_layer_norm<true>(slots, threads, rows, x, y, y_bf16, gate, dim, scale, shift,
                                     eps, out, e4m3_scales, stream);
  else
    launch_residual_layer_norm<false>(slots, threads, rows, x, y, y_bf16, gate, dim, scale, shift,
                                      eps, out, nullptr, stream);
  MMGEN_CUDA_CHECK_LAUNCH();
  return true;
}

bool rms_norm_rope_rows_bf16(void* x, int64_t rows, int64_t dim, const float* weight, float eps,
                             const float* cos, const float* sin, int64_t tokens, int64_t head_dim,
                             int64_t rows_per_position, cudaStream_t stream) {
  const int warps = warps_for(dim / 8, 8);
  if (dim % 8 != 0 || warps == 0 || rows > 0x7fffffff || !aligned(x, 16) || !aligned(weight, 16) ||
      (cos && (head_dim % 8 != 0 || dim % head_dim != 0 || !aligned(cos, 16) || !aligned(sin, 16))))
    return false;
  if (rows == 0) return true;
  const int threads = 32 * warps;
  const int64_t slots = (dim / 8 + threads - 1) / threads;
  bf16* values = static_cast<bf16*>(x);
  if (slots <= 4)
    rms_norm_rope_rows_kernel<4><<<unsigned(rows), threads, 0, stream>>>(
        values, dim, weight, eps, cos, sin, tokens, head_dim, rows_per_position);
  else
    rms_norm_rope_rows_kernel<8><<<unsigned(rows), threads, 0, stream>>>(
        values, dim, weight, eps, cos, sin, tokens, head_dim, rows_per_position);
  MMGEN_CUDA_CHECK_LAUNCH();
  return true;
}

}  // namespace mmgen::cuda
