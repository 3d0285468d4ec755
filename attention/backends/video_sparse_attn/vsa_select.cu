// VSA's coarse branch kernels (vsa_select.h):
// - cube means in place: one CTA per (cube, batch), a thread per 16-byte chunk of the row, the
//   cube's tokens read straight from the video in the CPU tiling's order and summed in double in
//   that order, as the CPU oracle sums them (so the means are the oracle's, bit for bit);
// - gather with cube means: one CTA per (cube, batch), a thread per 16-byte chunk of the row, the
//   cube's rows copied into slots and summed in the same pass;
// - scores: one batched float32 product of the query and key means (cuBLASLt, full fp32);
// - selection: one CTA per 8 query cubes of a (batch, head), their score rows in shared memory;
//   warp r selects row r's top-k exactly: a byte-wise radix search for the k-th largest score
//   (as order-preserving integers; four histogram passes), then one ordered pass that takes every
//   larger score and the first ties by index, writing the indices already ascending;
// - coarse output (with a gate): the same warp's softmax of its row, then one batched product of
//   those probabilities with the value means.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "attention/backends/video_sparse_attn/vsa_select.h"
#include "attention/cuda/radix_select.cuh"
#include "core/cuda/cuda_check.h"
#include "core/cuda/device_memory.h"
#include "core/cuda/gemm_f32.h"
#include "core/error.h"

namespace mmgen::cuda {
namespace {

constexpr int kRows = 8;  // query cubes per selection CTA = warps
constexpr int kSelectThreads = kRows * 32;
constexpr int kMaxSharedBytes = 200 * 1024;

// The gather into slots and the cube means in one pass: a CTA per (cube, batch), a thread per
// 16-byte chunk of the row (8 columns), the cube's 64 slots in order, eight rows' loads in flight
// at a time. Each column sums the cube's valid rows in slot order (the CPU tiling's order) in
// double, as the CPU oracle (vsa_coarse.cpp) does, so the means are the oracle's bit for bit.
constexpr int kGatherThreads = 256, kGatherRowsInFlight = 8;

// Adds a 16-byte chunk of a row (eight bf16 columns) to the columns' double sums.
__device__ __forceinline__ void add_row(double (&sum)[8], const uint4& row) {
  const uint32_t words[4] = {row.x, row.y, row.z, row.w};
#pragma unroll
  for (int w = 0; w < 4; ++w) {
    sum[2 * w] += double(__uint_as_float(words[w] << 16));
    sum[2 * w + 1] += double(__uint_as_float(words[w] & 0xffff0000u));
  }
}

// Chunk c's eight means of cube `cube` of batch b: its sums over `length` tokens, as the CPU
// divides them (in double, then rounded to float); an empty cube's means are 0.
__device__ __forceinline__ void write_means(float* means, const double (&sum)[8], int length,
                                            int64_t b, int64_t cube, int64_t cubes, int64_t c,
                                            int64_t heads, int64_t head_dim) {
  const int64_t column = c * 8, h = column / head_dim, d = column % head_dim;
  float* mean = means + ((b * heads + h) * cubes + cube) * head_dim + d;
#pragma unroll
  for (int e = 0; e < 8; ++e) mean[e] = length > 0 ? float(sum[e] / double(length)) : 0.0f;
}

__global__ void __launch_bounds__(kGatherThreads)
    gather_means_kernel(const uint4* __restrict__ x, uint4* __restrict__ y, float* means,
                        int64_t tokens, int64_t cubes, int64_t heads, int64_t head_dim,
                        const int32_t* token_of_slot, const int32_t* lengths) {
  __shared__ int32_t token_of[kVsaCube];
  const int64_t cube = blockIdx.x, b = blockIdx.y, chunks = heads * head_dim / 8;
  if (threadIdx.x < kVsaCube) token_of[threadIdx.x] = token_of_slot[cube * kVsaCube + threadIdx.x];
  __syncthreads();
  const int length = lengths[cube];
  const uint4* in = x + b * tokens * chunks;
  uint4* out = y + (b * cubes + cube) * kVsaCube * chunks;
  for (int64_t c = threadIdx.x; c < chunks; c += kGatherThreads) {
    double sum[8] = {};
    for (int r0 = 0; r0 < kVsaCube; r0 += kGatherRowsInFlight) {
      uint4 rows[kGatherRowsInFlight];
#pragma unroll
      for (int i = 0; i < kGatherRowsInFlight; ++i) {
        const int32_t token = token_of[r0 + i];
        rows[i] = token < 0 ? make_uint4(0, 0, 0, 0) : in[int64_t(token) * chunks + c];
      }
#pragma unroll
      for (int i = 0; i < kGatherRowsInFlight; ++i) {
        out[int64_t(r0 + i) * chunks + c] = rows[i];
        if (r0 + i >= length) continue;
        add_row(sum, rows[i]);
      }
    }
    write_means(means, sum, length, b, cube, cubes, c, heads, head_dim);
  }
}

// The cube means of several operands (blockIdx.z picks one) read in place: a CTA per (cube,
// batch), a thread per 16-byte chunk, eight rows' loads in flight.
struct MeanOperands {
  const uint4* x[3];
  float* means[3];
};

__global__ void __launch_bounds__(kGatherThreads)
    cube_means_kernel(MeanOperands operands, int frames, int height, int width, int64_t heads,
                      int64_t head_dim) {
  __shared__ int32_t token_of[kVsaCube];
  const int along_h = (height + 3) / 4, along_w = (width + 3) / 4, plane = along_h * along_w;
  const int cube = blockIdx.x, cubes = ((frames + 3) / 4) * plane;
  const int64_t b = blockIdx.y, chunks = heads * head_dim / 8;
  const int t0 = 4 * (cube / plane), h0 = 4 * ((cube % plane) / along_w), w0 = 4 * (cube % along_w);
  const int in_t = min(4, frames - t0), in_h = min(4, height - h0), in_w = min(4, width - w0);
  const int length = in_t * in_h * in_w;  // the cube's tokens, in (t, h, w) order as tile_video
  for (int i = threadIdx.x; i < length; i += blockDim.x) {
    const int t = i / (in_h * in_w), h = (i / in_w) % in_h, w = i % in_w;
    token_of[i] = ((t0 + t) * height + h0 + h) * width + w0 + w;
  }
  __syncthreads();
  const int64_t tokens = int64_t(frames) * height * width;
  const uint4* in = operands.x[blockIdx.z] + b * tokens * chunks;
  float* means = operands.means[blockIdx.z];
  for (int64_t c = threadIdx.x; c < chunks; c += blockDim.x) {
    double sum[8] = {};
    for (int r0 = 0; r0 < length; r0 += kGatherRowsInFlight) {
      uint4 rows[kGatherRowsInFlight];
#pragma unroll
      for (int i = 0; i < kGatherRowsInFlight; ++i)
        rows[i] = r0 + i < length ? in[int64_t(token_of[r0 + i]) * chunks + c] : uint4{};
#pragma unroll
      for (int i = 0; i < kGatherRowsInFlight; ++i) {
        if (r0 + i >= length) break;
        add_row(sum, rows[i]);
      }
    }
    write_means(means, sum, length, b, cube, cubes, c, heads, head_dim);
  }
}

__global__ void __launch_bounds__(kSelectThreads)
    select_kernel(float* raw_scores, float scale, int64_t rows, int64_t cubes, int64_t topk,
                  int32_t* selected, bool probabilities) {
  extern __shared__ float scores[];  // [kRows, cubes]
  __shared__ int bins[kRows][256];   // each warp's byte histogram
  const int64_t pair = blockIdx.y, first_row = int64_t(blockIdx.x) * kRows;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float* raw = raw_scores + (pair * rows + first_row) * cubes;
  const int64_t here = min(int64_t(kRows), rows - first_row) * cubes;
#pragma unroll 4
  for (int i = threadIdx.x; i < int(here); i += kSelectThreads) scores[i] = raw[i] * scale;
  __syncthreads();

  const int64_t row = first_row + warp;
  if (row < rows) {
    const float* s = scores + warp * cubes;
    // The k-th largest key (the largest threshold that at least `topk` keys reach), a byte at a
    // time from the top: a histogram of the next byte over the keys that match the bytes found
    // so far, then the byte at which the count from the top first reaches the keys still wanted.
    const uint32_t threshold = kth_largest_key([&](int j) { return ordered_key(s[j]); }, int(cubes),
                                               int(topk), bins[warp], lane);
    int above = 0;
#pragma unroll 4
    for (int j = lane; j < int(cubes); j += 32) above += ordered_key(s[j]) > threshold;
    const int ties_wanted = int(topk) - __reduce_add_sync(0xffffffffu, above);
    int32_t* out = selected + (pair * rows + row) * topk;
    int written = 0, ties_seen = 0;
    const uint32_t lower_lanes = (1u << lane) - 1u;
    for (int64_t base = 0; base < cubes; base += 32) {
      const int64_t j = base + lane;
      const uint32_t key = j < cubes ? ordered_key(s[j]) : 0u;
      const bool tie = j < cubes && key == threshold;
      const uint32_t ties = __ballot_sync(0xffffffffu, tie);
      const bool take = (j < cubes && key > threshold) ||
                        (tie && ties_seen + __popc(ties & lower_lanes) < ties_wanted);
      const uint32_t taken = __ballot_sync(0xffffffffu, take);
      if (take) out[written + __popc(taken & lower_lanes)] = int32_t(j);
      written += __popc(taken);
      ties_seen += __popc(ties);
    }
  }
  if (!probabilities) return;

  // The coarse branch's softmax of each row (its warp), written over the raw scores for the
  // product with the value means that follows.
  if (row < rows) {
    float* s = scores + warp * cubes;
    float top = -INFINITY;
    for (int64_t j = lane; j < cubes; j += 32) top = fmaxf(top, s[j]);
    for (int offset = 16; offset > 0; offset /= 2)
      top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, offset));
    float total = 0.0f;
    for (int64_t j = lane; j < cubes; j += 32) total += s[j] = expf(s[j] - top);
    for (int offset = 16; offset > 0; offset /= 2)
      total += __shfl_xor_sync(0xffffffffu, total, offset);
    for (int64_t j = lane; j < cubes; j += 32) raw[warp * cubes + j] = s[j] / total;
  }
}

int select_shared_bytes(int64_t cubes) {
  return int(kRows * cubes * sizeof(float));
}

}  // namespace

void vsa_gather_with_means(const void* x, void* y, float* means, int64_t batch, int64_t tokens,
                           int64_t cubes, int64_t heads, int64_t head_dim,
                           const int32_t* token_of_slot, const int32_t* lengths,
                           cudaStream_t stream) {
  check(head_dim % 8 == 0, "vsa_gather_with_means: head size {} is not a multiple of 8", head_dim);
  if (batch * cubes == 0) return;
  gather_means_kernel<<<dim3(unsigned(cubes), unsigned(batch)), kGatherThreads, 0, stream>>>(
      static_cast<const uint4*>(x), static_cast<uint4*>(y), means, tokens, cubes, heads, head_dim,
      token_of_slot, lengths);
  MMGEN_CUDA_CHECK_LAUNCH();
}

void vsa_cube_means(const void* const* x, float* const* means, int operands, int64_t batch,
                    const std::array<int64_t, 3>& grid, int64_t heads, int64_t head_dim,
                    cudaStream_t stream) {
  check(head_dim % 8 == 0, "vsa_cube_means: head size {} is not a multiple of 8", head_dim);
  check(operands >= 1 && operands <= 3, "vsa_cube_means: 1 to 3 operands, got {}", operands);
  const int64_t cubes = ((grid[0] + 3) / 4) * ((grid[1] + 3) / 4) * ((grid[2] + 3) / 4);
  if (batch * cubes == 0) return;
  MeanOperands list{};
  for (int i = 0; i < operands; ++i)
    list.x[i] = static_cast<const uint4*>(x[i]), list.means[i] = means[i];
  const int64_t chunks = heads * head_dim / 8;
  const int threads = int(std::min<int64_t>(kGatherThreads, (chunks + 31) / 32 * 32));
  cube_means_kernel<<<dim3(unsigned(cubes), unsigned(batch), unsigned(operands)), threads, 0,
                      stream>>>(list, int(grid[0]), int(grid[1]), int(grid[2]), heads, head_dim);
  MMGEN_CUDA_CHECK_LAUNCH();
}

int64_t vsa_max_cubes() {
  return kMaxSharedBytes / int64_t(kRows * sizeof(float));
}

void vsa_select(const float* qc, const float* kc, const float* vc, float scale, int64_t batch,
                int64_t heads, int64_t rows, int64_t cubes, int64_t head_dim, int64_t topk,
                int32_t* selected, float* coarse, cudaStream_t stream) {
  if (batch * heads * rows * cubes == 0) return;
  const int64_t pairs = batch * heads;
  // Raw scores qc · kcᵀ per pair, [rows, cubes] row-major: one batched float32 product (full
  // fp32, not TF32); column-major that is C[cubes, rows] = kcᵀ · qc.
  DeviceBuffer scores(size_t(pairs * rows * cubes) * sizeof(float));
  gemm_f32(true, false, cubes, rows, head_dim, kc, head_dim, qc, head_dim, scores.as<float>(),
           cubes, /*tf32=*/false, stream,
           GemmBatch{pairs, cubes * head_dim, rows * head_dim, rows * cubes});
  const int bytes = select_shared_bytes(cubes);
  static const bool configured = [] {
    MMGEN_CUDA_CHECK(cudaFuncSetAttribute(
        select_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kMaxSharedBytes));
    return true;
  }();
  (void)configured;
  const dim3 grid(unsigned((rows + kRows - 1) / kRows), unsigned(pairs));
  select_kernel<<<grid, kSelectThreads, bytes, stream>>>(scores.as<float>(), scale, rows, cubes,
                                                         topk, selected, vc != nullptr);
  MMGEN_CUDA_CHECK_LAUNCH();
  if (!vc) return;
  // coarse = P · vc per pair, [rows, D] row-major: column-major C[D, rows] = vc · P.
  gemm_f32(false, false, head_dim, rows, cubes, vc, head_dim, scores.as<float>(), cubes, coarse,
           head_dim, /*tf32=*/false, stream,
           GemmBatch{pairs, cubes * head_dim, rows * cubes, rows * head_dim});
}

}  // namespace mmgen::cuda
