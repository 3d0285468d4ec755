// SLA's kernels (sla_kernels.h): plain reductions and row maps; the products around them are
// cuBLASLt's and the attention is the block-sparse FlashAttention kernel.
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

#include "attention/backends/sla_attn/sla_kernels.h"
#include "core/cuda/cuda_check.h"
#include "core/error.h"

namespace mmgen::cuda {
namespace {

constexpr unsigned kFull = 0xffffffffu;
constexpr float kLinearEps = 1e-5f;  // attention/kernels/sla_core.cpp's

__device__ __forceinline__ uint16_t bf16_bits(float value) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(value));
}

unsigned blocks_for(int64_t items, int threads) {
  return unsigned((items + threads - 1) / threads);
}

// The sums over rows [first, last) of two adjacent bf16 columns (`at`: the first column's element
// in row 0; rows `stride` elements apart), each in row order, the rows unrolled so their loads
// are in flight together.
__device__ __forceinline__ float2 sum_two_columns(const uint16_t* at, int64_t stride, int64_t first,
                                                  int64_t last) {
  float sum0 = 0.0f, sum1 = 0.0f;
#pragma unroll 8
  for (int64_t t = first; t < last; ++t) {
    const uint32_t two = *reinterpret_cast<const uint32_t*>(at + t * stride);
    sum0 += __uint_as_float(two << 16);
    sum1 += __uint_as_float(two & 0xffff0000u);
  }
  return make_float2(sum0, sum1);
}

// A thread per (block, two adjacent columns): a warp reads 128 contiguous bytes per row, and the
// rows are unrolled so their loads are in flight together; each column still sums its rows in
// order.
__global__ void block_means_kernel(const uint16_t* x, int64_t token_stride, float* means,
                                   int64_t seq, int64_t heads, int64_t head_dim, int64_t block,
                                   int64_t blocks) {
  const int64_t j = blockIdx.x, b = blockIdx.y, width = heads * head_dim;
  const int64_t column = 2 * (int64_t(blockIdx.z) * blockDim.x + threadIdx.x);
  if (column >= width) return;
  const int64_t first = j * block, last = min(seq, first + block);
  const float2 sums =
      sum_two_columns(x + (b * seq) * token_stride + column, token_stride, first, last);
  const int64_t h = column / head_dim, d = column % head_dim;
  const float count = float(last - first);
  float* out = means + ((b * heads + h) * blocks + j) * head_dim + d;
  out[0] = sums.x / count;
  out[1] = sums.y / count;
}

// A CTA per (pair, 32 columns): warp w sums the blocks j ≡ w (mod 8) of its lane's column in
// double (block mean times its length), the eight partial sums are added in warp order, and
// every warp subtracts the mean from its blocks.
constexpr int kSmoothWarps = 8;

__global__ void smooth_keys_kernel(float* means, int64_t blocks, int64_t head_dim, int64_t seq,
                                   int64_t block) {
  __shared__ double partial[kSmoothWarps][32];
  __shared__ float mean[32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t p = blockIdx.x, d = int64_t(blockIdx.y) * 32 + lane;
  float* column = means + p * blocks * head_dim + d;
  double total = 0;
  if (d < head_dim)
#pragma unroll 4
    for (int64_t j = warp; j < blocks; j += kSmoothWarps)
      total += double(column[j * head_dim]) * double(min(block, seq - j * block));
  partial[warp][lane] = total;
  __syncthreads();
  if (warp == 0) {
    double sum = 0;
    for (int w = 0; w < kSmoothWarps; ++w) sum += partial[w][lane];
    mean[lane] = float(sum / double(seq));
  }
  __syncthreads();
  if (d >= head_dim) return;
  for (int64_t j = warp; j < blocks; j += kSmoothWarps) column[j * head_dim] -= mean[lane];
}

__global__ void expand_lists_kernel(const int32_t* selected, int64_t entries, int64_t factor,
                                    int32_t* out) {
  const int64_t item = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (item >= entries * factor) return;
  out[item] = int32_t(selected[item / factor] * factor + item % factor);
}

// A warp per (token, head) row of D = 32·PerLane elements, each lane PerLane adjacent ones (one
// 4- or 8-byte load and store): φ along the row, written in the same [batch, seq, heads·D] layout,
// contiguous.
template <int PerLane>
struct Lanes;
template <>
struct Lanes<2> {
  using Word = uint32_t;
};
template <>
struct Lanes<4> {
  using Word = uint2;
};

template <int PerLane>
__device__ __forceinline__ void unpack(const typename Lanes<PerLane>::Word& word, float* value) {
  const uint32_t* parts = reinterpret_cast<const uint32_t*>(&word);
#pragma unroll
  for (int i = 0; i < PerLane / 2; ++i) {
    value[2 * i] = __uint_as_float(parts[i] << 16);
    value[2 * i + 1] = __uint_as_float(parts[i] & 0xffff0000u);
  }
}
template <int PerLane>
__device__ __forceinline__ typename Lanes<PerLane>::Word pack(const float* value) {
  typename Lanes<PerLane>::Word word;
  uint32_t* parts = reinterpret_cast<uint32_t*>(&word);
#pragma unroll
  for (int i = 0; i < PerLane / 2; ++i)
    parts[i] = uint32_t(bf16_bits(value[2 * i])) | (uint32_t(bf16_bits(value[2 * i + 1])) << 16);
  return word;
}

template <int PerLane>
__global__ void feature_map_kernel(const uint16_t* x, int64_t token_stride, int64_t seq,
                                   int64_t heads, SlaFeature map, const float* sums, uint16_t* y,
                                   int64_t rows) {
  using Word = typename Lanes<PerLane>::Word;
  constexpr int kDim = PerLane * 32;
  const int64_t row = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;  // (b·seq + t)·H + h
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const int64_t token = row / heads, h = row % heads;
  float value[PerLane];
  unpack<PerLane>(reinterpret_cast<const Word*>(x + token * token_stride + h * kDim)[lane], value);
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
    for (int i = 0; i < PerLane; ++i) value[i] = value[i] > 0.0f ? value[i] + 1.0f : expf(value[i]);
  } else if (map == SlaFeature::Relu) {
#pragma unroll
    for (int i = 0; i < PerLane; ++i) value[i] = fmaxf(value[i], 0.0f);
  }
  if (sums) {  // the linear branch's normaliser, 1 / (1e-5 + φ(q)·Σφ(k)), from float32 φ
    const float* key_sums = sums + (token / seq * heads + h) * kDim + PerLane * lane;
    float dot = 0.0f;
#pragma unroll
    for (int i = 0; i < PerLane; ++i) dot += value[i] * key_sums[i];
    for (int offset = 16; offset > 0; offset /= 2) dot += __shfl_xor_sync(kFull, dot, offset);
    const float inverse = 1.0f / (kLinearEps + dot);
#pragma unroll
    for (int i = 0; i < PerLane; ++i) value[i] *= inverse;
  }
  reinterpret_cast<Word*>(y + row * kDim)[lane] = pack<PerLane>(value);
}

// Column sums of a contiguous [batch, seq, width] bf16 matrix in two deterministic stages: partial
// sums over chunks of kSumChunk rows (a thread per two columns, rows unrolled), then the chunks
// of each column in order.
constexpr int kSumChunk = 256;

__global__ void chunk_sums_kernel(const uint16_t* y, int64_t seq, int64_t width, int64_t chunks,
                                  float* partial) {
  const int64_t column = 2 * (int64_t(blockIdx.x) * blockDim.x + threadIdx.x);
  const int64_t chunk = blockIdx.y, b = blockIdx.z;
  if (column >= width) return;
  const int64_t first = chunk * kSumChunk, last = min(seq, first + kSumChunk);
  const float2 sums = sum_two_columns(y + b * seq * width + column, width, first, last);
  float* out = partial + (b * chunks + chunk) * width + column;
  out[0] = sums.x;
  out[1] = sums.y;
}

__global__ void chunks_total_kernel(const float* partial, int64_t batch, int64_t chunks,
                                    int64_t width, float* sums) {
  const int64_t item = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;  // b·width + column
  if (item >= batch * width) return;
  const int64_t b = item / width, column = item % width;
  float sum = 0.0f;
  for (int64_t c = 0; c < chunks; ++c) sum += partial[(b * chunks + c) * width + column];
  sums[item] = sum;
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
  const dim3 grid(unsigned(blocks), unsigned(batch), blocks_for(heads * head_dim / 2, 128));
  block_means_kernel<<<grid, 128, 0, stream>>>(static_cast<const uint16_t*>(x), token_stride, means,
                                               seq, heads, head_dim, block, blocks);
  MMGEN_CUDA_CHECK_LAUNCH();
}

void sla_smooth_key_means(float* means, int64_t pairs, int64_t blocks, int64_t head_dim,
                          int64_t seq, int64_t block, cudaStream_t stream) {
  if (pairs * head_dim == 0) return;
  const dim3 grid(unsigned(pairs), unsigned((head_dim + 31) / 32));
  smooth_keys_kernel<<<grid, kSmoothWarps * 32, 0, stream>>>(means, blocks, head_dim, seq, block);
  MMGEN_CUDA_CHECK_LAUNCH();
}

void sla_expand_lists(const int32_t* selected, int64_t lists, int64_t kept, int64_t factor,
                      int32_t* out, cudaStream_t stream) {
  const int64_t n = lists * kept * factor;
  if (n == 0) return;
  expand_lists_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(selected, lists * kept, factor, out);
  MMGEN_CUDA_CHECK_LAUNCH();
}

void sla_feature_map(const void* x, int64_t token_stride, int64_t batch, int64_t seq, int64_t heads,
                     int64_t head_dim, SlaFeature map, const float* key_sums, uint16_t* y,
                     cudaStream_t stream) {
  check_head_dim(head_dim);
  const int64_t rows = batch * seq * heads;
  if (rows == 0) return;
  const auto* in = static_cast<const uint16_t*>(x);
  if (head_dim == 64)
    feature_map_kernel<2><<<blocks_for(rows * 32, 256), 256, 0, stream>>>(
        in, token_stride, seq, heads, map, key_sums, y, rows);
  else
    feature_map_kernel<4><<<blocks_for(rows * 32, 256), 256, 0, stream>>>(
        in, token_stride, seq, heads, map, key_sums, y, rows);
  MMGEN_CUDA_CHECK_LAUNCH();
}

int64_t sla_column_sums_scratch(int64_t batch, int64_t seq, int64_t width) {
  return batch * ((seq + kSumChunk - 1) / kSumChunk) * width;
}

void sla_column_sums(const uint16_t* y, int64_t batch, int64_t seq, int64_t width, float* scratch,
                     float* sums, cudaStream_t stream) {
  check(width % 2 == 0, "sla_column_sums: odd width {}", width);
  if (batch * seq * width == 0) return;
  const int64_t chunks = (seq + kSumChunk - 1) / kSumChunk;
  chunk_sums_kernel<<<dim3(blocks_for(width / 2, 128), unsigned(chunks), unsigned(batch)), 128, 0,
                      stream>>>(y, seq, width, chunks, scratch);
  MMGEN_CUDA_CHECK_LAUNCH();
  chunks_total_kernel<<<blocks_for(batch * width, 256), 256, 0, stream>>>(scratch, batch, chunks,
                                                                          width, sums);
  MMGEN_CUDA_CHECK_LAUNCH();
}

}  // namespace mmgen::cuda
