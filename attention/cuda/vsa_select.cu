// VSA's coarse branch kernels (vsa_select.h):
// - cube means: one CTA per (cube, batch), threads along the hidden dimension two columns at a
//   time (coalesced rows);
// - selection: one CTA per 8 query cubes of a (batch, head); the query means sit in shared
//   memory, each warp streams key means (lanes along D) and scores all 8 rows at once, then
//   warp r selects row r's top-k exactly: a bitwise search for the k-th largest score (as
//   order-preserving integers), then one ordered pass that takes every larger score and the
//   first ties by index, writing the indices already ascending.
#include <cmath>
#include <cstdint>

#include "attention/cuda/vsa_select.h"
#include "core/cuda/cuda_check.h"

namespace mmgen::cuda {
namespace {

constexpr int kRows = 8;  // query cubes per selection CTA = warps
constexpr int kSelectThreads = kRows * 32;
constexpr int kMaxSharedBytes = 200 * 1024;

// A thread per two adjacent columns (4-byte loads: a warp reads 128 contiguous bytes of a row),
// rows unrolled so their loads are in flight together; each column sums its rows in order.
__global__ void cube_means_kernel(const __nv_bfloat16_raw* x, float* means, int64_t cubes,
                                  int64_t heads, int64_t head_dim, const int32_t* lengths) {
  const int64_t cube = blockIdx.x, b = blockIdx.y, width = heads * head_dim;
  const int length = lengths[cube];
  const float inverse = length > 0 ? 1.0f / float(length) : 0.0f;
  const uint16_t* rows =
      reinterpret_cast<const uint16_t*>(x) + (b * cubes + cube) * kVsaCube * width;
  for (int64_t c = 2 * threadIdx.x; c < width; c += 2 * blockDim.x) {
    float sum0 = 0.0f, sum1 = 0.0f;
#pragma unroll 8
    for (int i = 0; i < length; ++i) {
      const uint32_t two = *reinterpret_cast<const uint32_t*>(rows + int64_t(i) * width + c);
      sum0 += __uint_as_float(two << 16);
      sum1 += __uint_as_float(two & 0xffff0000u);
    }
    const int64_t h = c / head_dim, d = c % head_dim;
    float* out = means + ((b * heads + h) * cubes + cube) * head_dim + d;
    out[0] = sum0 * inverse;
    out[1] = sum1 * inverse;
  }
}

// Larger float, larger key (for the bitwise search).
__device__ __forceinline__ uint32_t ordered(float value) {
  const uint32_t bits = __float_as_uint(value);
  return (bits & 0x80000000u) ? ~bits : bits | 0x80000000u;
}

__global__ void __launch_bounds__(kSelectThreads)
    select_kernel(const float* qc, const float* kc, const float* vc, float scale, int64_t rows,
                  int64_t cubes, int64_t head_dim, int64_t topk, int32_t* selected, float* coarse) {
  extern __shared__ float shared[];
  float* q_rows = shared;                     // [kRows, head_dim]
  float* scores = shared + kRows * head_dim;  // [kRows, cubes]
  const int64_t pair = blockIdx.y, first_row = int64_t(blockIdx.x) * kRows;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const float* q = qc + pair * rows * head_dim;
  const float* k = kc + pair * cubes * head_dim;
  for (int i = threadIdx.x; i < kRows * head_dim; i += kSelectThreads) {
    const int64_t row = first_row + i / head_dim;
    q_rows[i] = row < rows ? q[row * head_dim + i % head_dim] : 0.0f;
  }
  __syncthreads();

  // Unrolled so a warp's key loads for several cubes are in flight together.
#pragma unroll 2
  for (int j = warp; j < int(cubes); j += kRows) {
    float dot[kRows] = {};
#pragma unroll 4
    for (int d = lane; d < int(head_dim); d += 32) {
      const float key = k[j * head_dim + d];
#pragma unroll
      for (int r = 0; r < kRows; ++r) dot[r] = fmaf(q_rows[r * head_dim + d], key, dot[r]);
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
      for (int offset = 16; offset > 0; offset /= 2)
        dot[r] += __shfl_xor_sync(0xffffffffu, dot[r], offset);
    if (lane < kRows) {
      float mine = dot[0];
#pragma unroll
      for (int r = 1; r < kRows; ++r)
        if (lane == r) mine = dot[r];
      scores[lane * cubes + j] = mine * scale;
    }
  }
  __syncthreads();

  const int64_t row = first_row + warp;
  if (row < rows) {
    const float* s = scores + warp * cubes;
    // The k-th largest key: the largest threshold that at least `topk` keys reach.
    uint32_t threshold = 0;
    for (int bit = 31; bit >= 0; --bit) {
      const uint32_t candidate = threshold | (1u << bit);
      int count = 0;
      for (int64_t j = lane; j < cubes; j += 32) count += ordered(s[j]) >= candidate;
      count = __reduce_add_sync(0xffffffffu, count);
      if (count >= topk) threshold = candidate;
    }
    int above = 0;
    for (int64_t j = lane; j < cubes; j += 32) above += ordered(s[j]) > threshold;
    const int ties_wanted = int(topk) - __reduce_add_sync(0xffffffffu, above);
    int32_t* out = selected + (pair * rows + row) * topk;
    int written = 0, ties_seen = 0;
    const uint32_t lower_lanes = (1u << lane) - 1u;
    for (int64_t base = 0; base < cubes; base += 32) {
      const int64_t j = base + lane;
      const uint32_t key = j < cubes ? ordered(s[j]) : 0u;
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
  if (!vc) return;

  // Coarse output: each row's softmax (its warp), then all threads form P·vc along D.
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
    for (int64_t j = lane; j < cubes; j += 32) s[j] /= total;
  }
  __syncthreads();
  const float* v = vc + pair * cubes * head_dim;
  for (int64_t item = threadIdx.x; item < kRows * head_dim; item += kSelectThreads) {
    const int r = int(item / head_dim);
    const int64_t d = item % head_dim;
    if (first_row + r >= rows) continue;
    float sum = 0.0f;
    // Unrolled so the loads of several cubes are in flight (the sum keeps cube order).
#pragma unroll 8
    for (int j = 0; j < int(cubes); ++j)
      sum = fmaf(scores[r * cubes + j], v[int64_t(j) * head_dim + d], sum);
    coarse[(pair * rows + first_row + r) * head_dim + d] = sum;
  }
}

int select_shared_bytes(int64_t cubes, int64_t head_dim) {
  return int((kRows * head_dim + kRows * cubes) * sizeof(float));
}

}  // namespace

void vsa_cube_means(const void* x, float* means, int64_t batch, int64_t cubes, int64_t heads,
                    int64_t head_dim, const int32_t* lengths, cudaStream_t stream) {
  if (batch * cubes == 0) return;
  cube_means_kernel<<<dim3(unsigned(cubes), unsigned(batch)), 256, 0, stream>>>(
      static_cast<const __nv_bfloat16_raw*>(x), means, cubes, heads, head_dim, lengths);
  MMGEN_CUDA_CHECK_LAUNCH();
}

int64_t vsa_max_cubes() {
  return kMaxSharedBytes / int64_t(kRows * sizeof(float)) - 256;  // room for D up to 256
}

void vsa_select(const float* qc, const float* kc, const float* vc, float scale, int64_t batch,
                int64_t heads, int64_t rows, int64_t cubes, int64_t head_dim, int64_t topk,
                int32_t* selected, float* coarse, cudaStream_t stream) {
  if (batch * heads * rows * cubes == 0) return;
  const int bytes = select_shared_bytes(cubes, head_dim);
  static const bool configured = [] {
    MMGEN_CUDA_CHECK(cudaFuncSetAttribute(
        select_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kMaxSharedBytes));
    return true;
  }();
  (void)configured;
  const dim3 grid(unsigned((rows + kRows - 1) / kRows), unsigned(batch * heads));
  select_kernel<<<grid, kSelectThreads, bytes, stream>>>(qc, kc, vc, scale, rows, cubes, head_dim,
                                                         topk, selected, coarse);
  MMGEN_CUDA_CHECK_LAUNCH();
}

}  // namespace mmgen::cuda
