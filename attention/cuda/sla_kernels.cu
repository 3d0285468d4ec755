// SLA's kernels (sla_kernels.h): plain reductions and row maps; the products around them are
// cuBLASLt's and the attention is the block-sparse FlashAttention kernel.
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

#include "attention/cuda/sla_kernels.h"
#include "core/cuda/cuda_check.h"
#include "core/error.h"

namespace mmgen::cuda {
namespace {

constexpr unsigned kFull = 0xffffffffu;
constexpr float kLinearEps = 1e-5f;  // attention/sla_core.cpp's

__device__ __forceinline__ float bf16_value(uint16_t bits) {
  return __uint_as_float(uint32_t(bits) << 16);
}
__device__ __forceinline__ uint16_t bf16_bits(float value) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(value));
}

unsigned blocks_for(int64_t items, int threads) {
  return unsigned((items + threads - 1) / threads);
}

// A thread per (block, column).
__global__ void block_means_kernel(const uint16_t* x, int64_t token_stride, float* means,
                                   int64_t seq, int64_t heads, int64_t head_dim, int64_t block,
                                   int64_t blocks) {
  const int64_t j = blockIdx.x, b = blockIdx.y, width = heads * head_dim;
  const int64_t column = int64_t(blockIdx.z) * blockDim.x + threadIdx.x;
  if (column >= width) return;
  const int64_t first = j * block, last = min(seq, first + block);
  float sum = 0.0f;
  for (int64_t t = first; t < last; ++t)
    sum += bf16_value(x[(b * seq + t) * token_stride + column]);
  const int64_t h = column / head_dim, d = column % head_dim;
  means[((b * heads + h) * blocks + j) * head_dim + d] = sum / float(last - first);
}

__global__ void smooth_keys_kernel(float* means, int64_t pairs, int64_t blocks, int64_t head_dim,
                                   int64_t seq, int64_t block) {
  const int64_t item = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (item >= pairs * head_dim) return;
  const int64_t p = item / head_dim, d = item % head_dim;
  float* column = means + p * blocks * head_dim + d;
  double total = 0;
  for (int64_t j = 0; j < blocks; ++j)
    total += double(column[j * head_dim]) * double(min(block, seq - j * block));
  const float mean = float(total / double(seq));
  for (int64_t j = 0; j < blocks; ++j) column[j * head_dim] -= mean;
}

__global__ void expand_lists_kernel(const int32_t* selected, int64_t entries, int64_t factor,
                                    int32_t* out) {
  const int64_t item = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (item >= entries * factor) return;
  out[item] = int32_t(selected[item / factor] * factor + item % factor);
}

// A CTA per 32 tokens of one (batch, head): each warp maps 4 rows (lanes along D), the tile goes
// through shared memory so the transposed writes are runs of 32 tokens.
template <int PerLane>
__global__ void feature_rows_kernel(const uint16_t* x, int64_t token_stride, int64_t seq,
                                    int64_t heads, SlaFeature map, uint16_t* rows_out,
                                    uint16_t* columns_out) {
  constexpr int kDim = PerLane * 32, kTokens = 32;
  __shared__ float tile[kTokens][kDim + 1];
  const int64_t pair = blockIdx.y, b = pair / heads, h = pair % heads;
  const int64_t first = int64_t(blockIdx.x) * kTokens;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int r = warp; r < kTokens; r += blockDim.x / 32) {
    const int64_t t = first + r;
    if (t >= seq) break;
    float value[PerLane];
    const uint16_t* row = x + (b * seq + t) * token_stride + h * kDim;
#pragma unroll
    for (int i = 0; i < PerLane; ++i) value[i] = bf16_value(row[lane + 32 * i]);
    if (map != SlaFeature::Identity) {
      if (map == SlaFeature::Softmax) {
        float top = value[0];
#pragma unroll
        for (int i = 1; i < PerLane; ++i) top = fmaxf(top, value[i]);
        for (int offset = 16; offset > 0; offset /= 2)
          top = fmaxf(top, __shfl_xor_sync(kFull, top, offset));
        float sum = 0.0f;
#pragma unroll
        for (int i = 0; i < PerLane; ++i) sum += value[i] = expf(value[i] - top);
        for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(kFull, sum, offset);
        const float inverse = 1.0f / sum;
#pragma unroll
        for (int i = 0; i < PerLane; ++i) value[i] *= inverse;
      } else if (map == SlaFeature::Elu) {
#pragma unroll
        for (int i = 0; i < PerLane; ++i)
          value[i] = value[i] > 0.0f ? value[i] + 1.0f : expf(value[i]);
      } else {
#pragma unroll
        for (int i = 0; i < PerLane; ++i) value[i] = fmaxf(value[i], 0.0f);
      }
    }
#pragma unroll
    for (int i = 0; i < PerLane; ++i) {
      tile[r][lane + 32 * i] = value[i];
      if (rows_out) rows_out[(pair * seq + t) * kDim + lane + 32 * i] = bf16_bits(value[i]);
    }
  }
  if (!columns_out) return;
  __syncthreads();
  for (int d = warp; d < kDim; d += blockDim.x / 32) {
    const int64_t t = first + lane;
    if (t < seq) columns_out[(pair * kDim + d) * seq + t] = bf16_bits(tile[lane][d]);
  }
}

__global__ void column_sums_kernel(const uint16_t* columns, int64_t rows, int64_t seq,
                                   float* sums) {
  const int64_t row = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  float sum = 0.0f;
  for (int64_t t = lane; t < seq; t += 32) sum += bf16_value(columns[row * seq + t]);
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(kFull, sum, offset);
  if (lane == 0) sums[row] = sum;
}

// A warp per (b·H + h, t) row: the sparse output plus the projected linear branch, normalised.
template <int PerLane>
__global__ void combine_kernel(const uint16_t* sparse, const float* projected,
                               const uint16_t* phi_q, const float* sums, const float* bias,
                               int64_t seq, int64_t heads, uint16_t* out, int64_t rows) {
  constexpr int kDim = PerLane * 32;
  const int64_t row = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;  // p·seq + t
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const int64_t pair = row / seq, t = row % seq, b = pair / heads, h = pair % heads;
  float dot = 0.0f;
#pragma unroll
  for (int i = 0; i < PerLane; ++i)
    dot += bf16_value(phi_q[row * kDim + lane + 32 * i]) * sums[pair * kDim + lane + 32 * i];
  for (int offset = 16; offset > 0; offset /= 2) dot += __shfl_xor_sync(kFull, dot, offset);
  const float inverse = 1.0f / (kLinearEps + dot);
  const int64_t at = ((b * seq + t) * heads + h) * kDim;
#pragma unroll
  for (int i = 0; i < PerLane; ++i) {
    const int d = lane + 32 * i;
    const float linear = projected[row * kDim + d] * inverse + (bias ? bias[d] : 0.0f);
    out[at + d] = bf16_bits(bf16_value(sparse[at + d]) + linear);
  }
}

void check_head_dim(int64_t head_dim) {
  check(head_dim == 64 || head_dim == 128,
        "sla_attn on the GPU: head size {} (64 and 128 are compiled in); use --device cpu",
        head_dim);
}

}  // namespace

void sla_block_means(const void* x, int64_t token_stride, float* means, int64_t batch, int64_t seq,
                     int64_t heads, int64_t head_dim, int64_t block, cudaStream_t stream) {
  const int64_t blocks = (seq + block - 1) / block;
  if (batch * blocks == 0) return;
  const dim3 grid(unsigned(blocks), unsigned(batch), blocks_for(heads * head_dim, 128));
  block_means_kernel<<<grid, 128, 0, stream>>>(static_cast<const uint16_t*>(x), token_stride, means,
                                               seq, heads, head_dim, block, blocks);
  MMGEN_CUDA_CHECK_LAUNCH();
}

void sla_smooth_key_means(float* means, int64_t pairs, int64_t blocks, int64_t head_dim,
                          int64_t seq, int64_t block, cudaStream_t stream) {
  if (pairs * head_dim == 0) return;
  smooth_keys_kernel<<<blocks_for(pairs * head_dim, 128), 128, 0, stream>>>(means, pairs, blocks,
                                                                            head_dim, seq, block);
  MMGEN_CUDA_CHECK_LAUNCH();
}

void sla_expand_lists(const int32_t* selected, int64_t lists, int64_t kept, int64_t factor,
                      int32_t* out, cudaStream_t stream) {
  const int64_t n = lists * kept * factor;
  if (n == 0) return;
  expand_lists_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(selected, lists * kept, factor, out);
  MMGEN_CUDA_CHECK_LAUNCH();
}

void sla_feature_rows(const void* x, int64_t token_stride, int64_t batch, int64_t seq,
                      int64_t heads, int64_t head_dim, SlaFeature map, uint16_t* rows_out,
                      uint16_t* columns_out, cudaStream_t stream) {
  check_head_dim(head_dim);
  if (batch * seq == 0) return;
  const dim3 grid(blocks_for(seq, 32), unsigned(batch * heads));
  const auto* in = static_cast<const uint16_t*>(x);
  if (head_dim == 64)
    feature_rows_kernel<2>
        <<<grid, 256, 0, stream>>>(in, token_stride, seq, heads, map, rows_out, columns_out);
  else
    feature_rows_kernel<4>
        <<<grid, 256, 0, stream>>>(in, token_stride, seq, heads, map, rows_out, columns_out);
  MMGEN_CUDA_CHECK_LAUNCH();
}

void sla_column_sums(const uint16_t* columns, int64_t pairs, int64_t head_dim, int64_t seq,
                     float* sums, cudaStream_t stream) {
  const int64_t rows = pairs * head_dim;
  if (rows == 0) return;
  column_sums_kernel<<<blocks_for(rows * 32, 256), 256, 0, stream>>>(columns, rows, seq, sums);
  MMGEN_CUDA_CHECK_LAUNCH();
}

void sla_combine(const void* sparse, const float* projected, const uint16_t* phi_q,
                 const float* sums, const float* bias, int64_t batch, int64_t seq, int64_t heads,
                 int64_t head_dim, void* out, cudaStream_t stream) {
  check_head_dim(head_dim);
  const int64_t rows = batch * heads * seq;
  if (rows == 0) return;
  const auto* in = static_cast<const uint16_t*>(sparse);
  auto* target = static_cast<uint16_t*>(out);
  if (head_dim == 64)
    combine_kernel<2><<<blocks_for(rows * 32, 256), 256, 0, stream>>>(
        in, projected, phi_q, sums, bias, seq, heads, target, rows);
  else
    combine_kernel<4><<<blocks_for(rows * 32, 256), 256, 0, stream>>>(
        in, projected, phi_q, sums, bias, seq, heads, target, rows);
  MMGEN_CUDA_CHECK_LAUNCH();
}

}  // namespace mmgen::cuda
