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
                                     int64_t head_dim, int64_t rows_per_position) {
  __nv_bfloat162* row = reinterpret_cast<__nv_bfloat162*>(x + blockIdx.x * dim);
  const int64_t pairs = dim / 2;
  float squares = 0;
  for (int64_t p = threadIdx.x; p < pairs; p += kRowThreads) {
    const float2 v = __bfloat1622float2(row[p]);
    squares += v.x * v.x + v.y * v.y;
  }
  const float inverse = rsqrtf(block_sum(squares) / float(dim) + eps);
  const int64_t token = (blockIdx.x / rows_per_position) % tokens;
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

// Short rows (q/k viewed one row per head, dim ≤ 32 · 2 · kPairsPerLane): one warp per row and
// kWarpRows rows per block, the row kept in registers between the sum of squares (a warp shuffle,
// no block barrier) and the write. The block-per-row kernel above would leave most of its 256
// threads idle on a 128-wide row and pay two barriers per row. Same float32 math, one bf16
// rounding per value.
constexpr int kWarpRows = 8;

template <int kPairsPerLane>
__global__ void rms_norm_rope_warp_kernel(bf16* x, int64_t rows, int64_t dim, const float* weight,
                                          float eps, const float* cos, const float* sin,
                                          int64_t tokens, int64_t head_dim,
                                          int64_t rows_per_position) {
  const int lane = threadIdx.x % 32;
  const int64_t r = int64_t(blockIdx.x) * kWarpRows + threadIdx.x / 32;
  if (r >= rows) return;  // a whole warp leaves together: the shuffles below see full warps
  __nv_bfloat162* row = reinterpret_cast<__nv_bfloat162*>(x + r * dim);
  const int64_t pairs = dim / 2, half = head_dim / 2;
  const int64_t position = (r / rows_per_position) % tokens;
  const float* c_row = cos ? cos + position * half : nullptr;
  const float* s_row = cos ? sin + position * half : nullptr;
  // Every load is issued before the reduction waits on the row's, so the table reads overlap it.
  float2 v[kPairsPerLane], w[kPairsPerLane], rotation[kPairsPerLane];
#pragma unroll
  for (int i = 0; i < kPairsPerLane; ++i) {
    const int64_t p = lane + 32 * i;
    const bool inside = p < pairs;
    v[i] = inside ? __bfloat1622float2(row[p]) : make_float2(0.0f, 0.0f);
    w[i] = inside ? make_float2(weight[2 * p], weight[2 * p + 1]) : make_float2(0.0f, 0.0f);
    const int64_t j = p < half ? p : p % half;  // skips a 64-bit division when one head per row
    rotation[i] = inside && cos ? make_float2(c_row[j], s_row[j]) : make_float2(1.0f, 0.0f);
  }
  float squares = 0;
#pragma unroll
  for (int i = 0; i < kPairsPerLane; ++i) squares += v[i].x * v[i].x + v[i].y * v[i].y;
  for (int offset = 16; offset > 0; offset /= 2)
    squares += __shfl_xor_sync(0xffffffffu, squares, offset);
  const float inverse = rsqrtf(squares / float(dim) + eps);
#pragma unroll
  for (int i = 0; i < kPairsPerLane; ++i) {
    const int64_t p = lane + 32 * i;
    if (p >= pairs) break;
    float x1 = v[i].x * inverse * w[i].x, x2 = v[i].y * inverse * w[i].y;
    if (cos) {
      const float c = rotation[i].x, s = rotation[i].y;
      const float r1 = x1 * c - x2 * s, r2 = x1 * s + x2 * c;
      x1 = r1, x2 = r2;
    }
    row[p] = __floats2bfloat162_rn(x1, x2);
  }
}

template <int kPairsPerLane>
void launch_rms_norm_rope_warp(bf16* x, int64_t rows, int64_t dim, const float* weight, float eps,
                               const float* cos, const float* sin, int64_t tokens, int64_t head_dim,
                               int64_t rows_per_position, cudaStream_t stream) {
  const int64_t blocks = (rows + kWarpRows - 1) / kWarpRows;
  rms_norm_rope_warp_kernel<kPairsPerLane><<<unsigned(blocks), 32 * kWarpRows, 0, stream>>>(
      x, rows, dim, weight, eps, cos, sin, tokens, head_dim, rows_per_position);
}

// Rows of exactly 8 · kLanes values with one head each (Z-Image's q/k viewed one row per head,
// head_dim 128: 16 lanes): each lane moves its 8 values in one 16-byte load and one store and
// reads its 4 (cos, sin) pairs as two float4, 32 / kLanes rows per warp, the sum of squares
// reduced within the row's lanes. The warp-per-row kernel's 4-byte accesses kept Z-Image's q/k
// pass near half the memory bandwidth. Same float32 math, one bf16 rounding per value.
template <int kLanes>
__global__ void rms_norm_rope_vector_kernel(bf16* x, int64_t rows, const float* weight, float eps,
                                            const float* cos, const float* sin, int64_t tokens,
                                            int64_t rows_per_position) {
  constexpr int kDim = 8 * kLanes, kRowsPerWarp = 32 / kLanes;
  const int lane = threadIdx.x % 32, part = lane % kLanes;
  const int64_t r =
      (int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32) * kRowsPerWarp + lane / kLanes;
  // No early return: the shuffles below need the whole warp; a row past the end computes zeros.
  const bool inside = r < rows;
  uint4* row = reinterpret_cast<uint4*>(x + r * kDim);
  const uint4 packed = inside ? row[part] : make_uint4(0, 0, 0, 0);
  const float4 w0 = reinterpret_cast<const float4*>(weight)[2 * part];
  const float4 w1 = reinterpret_cast<const float4*>(weight)[2 * part + 1];
  float4 c = make_float4(1.0f, 1.0f, 1.0f, 1.0f), s = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  if (cos && inside) {
    const int64_t position = (r / rows_per_position) % tokens;
    c = reinterpret_cast<const float4*>(cos + position * (kDim / 2))[part];
    s = reinterpret_cast<const float4*>(sin + position * (kDim / 2))[part];
  }
  const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(&packed);
  float2 v[4];
  float squares = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    v[i] = __bfloat1622float2(pairs[i]);
    squares += v[i].x * v[i].x + v[i].y * v[i].y;
  }
#pragma unroll
  for (int offset = kLanes / 2; offset > 0; offset /= 2)
    squares += __shfl_xor_sync(0xffffffffu, squares, offset);
  const float inverse = rsqrtf(squares / float(kDim) + eps);
  const float2 w[4] = {{w0.x, w0.y}, {w0.z, w0.w}, {w1.x, w1.y}, {w1.z, w1.w}};
  const float cs[4] = {c.x, c.y, c.z, c.w}, sn[4] = {s.x, s.y, s.z, s.w};
  uint4 out;
  __nv_bfloat162* written = reinterpret_cast<__nv_bfloat162*>(&out);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float x1 = v[i].x * inverse * w[i].x, x2 = v[i].y * inverse * w[i].y;
    written[i] = __floats2bfloat162_rn(x1 * cs[i] - x2 * sn[i], x1 * sn[i] + x2 * cs[i]);
  }
  if (inside) row[part] = out;
}

template <int kLanes>
void launch_rms_norm_rope_vector(bf16* x, int64_t rows, const float* weight, float eps,
                                 const float* cos, const float* sin, int64_t tokens,
                                 int64_t rows_per_position, cudaStream_t stream) {
  constexpr int64_t kRowsPerBlock = kWarpRows * (32 / kLanes);
  const int64_t blocks = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
  rms_norm_rope_vector_kernel<kLanes><<<unsigned(blocks), 32 * kWarpRows, 0, stream>>>(
      x, rows, weight, eps, cos, sin, tokens, rows_per_position);
}

bool aligned16(const void* pointer) {
  return reinterpret_cast<uintptr_t>(pointer) % 16 == 0;
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

__device__ __forceinline__ float load(const float* p) {
  return *p;
}
__device__ __forceinline__ float load(const bf16* p) {
  return __bfloat162float(*p);
}

// One block per row: the squares of y, then the update (the second read of y hits the cache).
// The same expression as rms_norm (core/cuda/t5_ops.cu) followed by add_gated, so the fused and
// the separate ops agree to the rounding of one multiply. With `normed`, a third pass writes the
// next pre-norm of the updated row: each thread reads back the values it wrote itself, so it
// needs no barrier beyond the sum's.
template <typename In>
__global__ void add_rms_norm_gated_kernel(float* x, const In* y, int64_t dim, const float* weight,
                                          float eps, const float* gate, const float* next_weight,
                                          float next_eps, bf16* normed) {
  const In* in = y + blockIdx.x * dim;
  float* out = x + blockIdx.x * dim;
  float squares = 0;
  for (int64_t i = threadIdx.x; i < dim; i += kRowThreads) {
    const float v = load(in + i);
    squares += v * v;
  }
  const float inverse = rsqrtf(block_sum(squares) / float(dim) + eps);
  float next_squares = 0;
  for (int64_t i = threadIdx.x; i < dim; i += kRowThreads) {
    const float n = load(in + i) * inverse * weight[i];
    const float updated = out[i] + (gate ? n * gate[i] : n);
    out[i] = updated;
    next_squares += updated * updated;
  }
  if (!normed) return;  // the same for the whole block: block_sum below sees every thread
  const float next_inverse = rsqrtf(block_sum(next_squares) / float(dim) + next_eps);
  bf16* normed_row = normed + blockIdx.x * dim;
  for (int64_t i = threadIdx.x; i < dim; i += kRowThreads)
    normed_row[i] = __float2bfloat16_rn(out[i] * next_inverse * next_weight[i]);
}

unsigned grid_for(int64_t count) {
  const int64_t blocks = (count + 255) / 256;
  return unsigned(blocks < 65536 ? blocks : 65536);
}

}  // namespace

void layer_norm_to_bf16(const float* x, void* out, int64_t rows, int64_t dim, const float* scale,
                        const float* shift, float eps, cudaStream_t stream) {
  if (rows == 0) return;
  if (residual_layer_norm_bf16(const_cast<float*>(x), nullptr, false, nullptr, rows, dim, scale,
                               shift, eps, out, stream))
    return;  // x is only read when there is no update
  layer_norm_kernel<<<unsigned(rows), kRowThreads, 0, stream>>>(x, static_cast<bf16*>(out), dim,
                                                                scale, shift, eps);
  MMGEN_CUDA_CHECK_LAUNCH();
}

void rms_norm_rope_bf16(void* x, int64_t rows, int64_t dim, const float* weight, float eps,
                        const float* cos, const float* sin, int64_t tokens, int64_t head_dim,
                        int64_t rows_per_position, cudaStream_t stream) {
  if (rows == 0) return;
  bf16* values = static_cast<bf16*>(x);
  // One head of 64 or 128 per row, everything 16-byte aligned: the vector kernel (a rotation
  // without tables is cos 1, sin 0, which it reads as such).
  const bool vector = (dim == 64 || dim == 128) && head_dim == dim && aligned16(x) &&
                      aligned16(weight) && (!cos || (aligned16(cos) && aligned16(sin)));
  if (vector && dim == 128) {
    launch_rms_norm_rope_vector<16>(values, rows, weight, eps, cos, sin, tokens, rows_per_position,
                                    stream);
    MMGEN_CUDA_CHECK_LAUNCH();
    return;
  }
  if (vector && dim == 64) {
    launch_rms_norm_rope_vector<8>(values, rows, weight, eps, cos, sin, tokens, rows_per_position,
                                   stream);
    MMGEN_CUDA_CHECK_LAUNCH();
    return;
  }
  // Rows up to 512 wide (a head's q/k) take a warp each, with as few register slots as fit;
  // longer ones (Wan normalises the full hidden width) a block each.
  if (dim <= 64)
    launch_rms_norm_rope_warp<1>(values, rows, dim, weight, eps, cos, sin, tokens, head_dim,
                                 rows_per_position, stream);
  else if (dim <= 128)
    launch_rms_norm_rope_warp<2>(values, rows, dim, weight, eps, cos, sin, tokens, head_dim,
                                 rows_per_position, stream);
  else if (dim <= 256)
    launch_rms_norm_rope_warp<4>(values, rows, dim, weight, eps, cos, sin, tokens, head_dim,
                                 rows_per_position, stream);
  else if (dim <= 512)
    launch_rms_norm_rope_warp<8>(values, rows, dim, weight, eps, cos, sin, tokens, head_dim,
                                 rows_per_position, stream);
  else if (!rms_norm_rope_rows_bf16(values, rows, dim, weight, eps, cos, sin, tokens, head_dim,
                                    rows_per_position, stream))
    rms_norm_rope_kernel<<<unsigned(rows), kRowThreads, 0, stream>>>(
        values, dim, weight, eps, cos, sin, tokens, head_dim, rows_per_position);
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

void add_rms_norm_gated_f32(float* x, const void* y, bool y_bf16, int64_t rows, int64_t dim,
                            const float* weight, float eps, const float* gate,
                            const float* next_weight, float next_eps, void* normed,
                            cudaStream_t stream) {
  if (rows == 0) return;
  bf16* out = static_cast<bf16*>(normed);
  if (y_bf16)
    add_rms_norm_gated_kernel<<<unsigned(rows), kRowThreads, 0, stream>>>(
        x, static_cast<const bf16*>(y), dim, weight, eps, gate, next_weight, next_eps, out);
  else
    add_rms_norm_gated_kernel<<<unsigned(rows), kRowThreads, 0, stream>>>(
        x, static_cast<const float*>(y), dim, weight, eps, gate, next_weight, next_eps, out);
  MMGEN_CUDA_CHECK_LAUNCH();
}

}  // namespace mmgen::cuda
