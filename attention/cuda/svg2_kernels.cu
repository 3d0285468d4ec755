// SVG2's k-means and permutation kernels (svg2_kernels.h). Everything that decides a label or a
// centroid is computed in a fixed order, with the CPU's roundings spelled out (__dmul_rn and
// friends: nvcc would otherwise fuse a·b + c where the CPU, built with -ffp-contract=off, rounds
// twice), so the same labels give the same centroids to the bit; no float atomics anywhere.
#include <cuda_bf16.h>

#include <cfloat>
#include <cstdint>
#include <cub/device/device_radix_sort.cuh>

#include "attention/cuda/svg2_kernels.h"
#include "core/cuda/cuda_check.h"
#include "core/error.h"

namespace mmgen::cuda {
namespace {

constexpr unsigned kFull = 0xffffffffu;

__device__ __forceinline__ float bf16_value(uint16_t bits) {
  return __uint_as_float(uint32_t(bits) << 16);
}

unsigned blocks_for(int64_t items, int threads) {
  return unsigned((items + threads - 1) / threads);
}

__global__ void gather_centroids_kernel(const uint16_t* x, const int32_t* picks, float* centroids,
                                        int64_t seq, int64_t heads, int64_t head_dim,
                                        int64_t clusters, int64_t total) {
  const int64_t item = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (item >= total) return;
  const int64_t d = item % head_dim, pc = item / head_dim, p = pc / clusters;
  const int64_t b = p / heads, h = p % heads, token = picks[pc];
  centroids[item] = bf16_value(x[((b * seq + token) * heads + h) * head_dim + d]);
}

__global__ void norms_kernel(const float* centroids, float* norms, const int32_t* active,
                             int64_t clusters, int64_t head_dim, int64_t total) {
  const int64_t item = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (item >= total || !active[item / clusters]) return;
  const float* c = centroids + item * head_dim;
  double n = 0;
  for (int64_t d = 0; d < head_dim; ++d) n = __dadd_rn(n, __dmul_rn(double(c[d]), double(c[d])));
  norms[item] = __double2float_rn(n);
}

// A CTA per 64 points of one pair: the points' rows stay in shared memory while the centroids
// stream through in tiles of 64 (32 dimensions at a time); each thread owns 4 points × 4
// centroids of a tile and keeps, per point, the smallest distance it has seen and its index
// (centroids visited in ascending order, "strictly smaller replaces": the lowest index among
// equals). The 16 threads of a point then merge by (distance, index).
constexpr int kTilePoints = 64, kTileClusters = 64, kChunk = 32, kAssignThreads = 256;

template <int D>
__global__ void __launch_bounds__(kAssignThreads)
    assign_kernel(const uint16_t* x, const float* centroids, const float* norms, int32_t* labels,
                  const int32_t* active, int64_t seq, int64_t heads, int64_t clusters) {
  const int64_t p = blockIdx.y;
  if (!active[p]) return;
  const int64_t b = p / heads, h = p % heads, first = int64_t(blockIdx.x) * kTilePoints;
  __shared__ float xs[D][kTilePoints + 1];  // +1: the transposed stores hit distinct banks
  __shared__ float cs[kChunk][kTileClusters + 1];
  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
  for (int e = tid; e < kTilePoints * D; e += kAssignThreads) {
    const int i = e / D, d = e % D;
    const int64_t t = first + i;
    xs[d][i] = t < seq ? bf16_value(x[((b * seq + t) * heads + h) * D + d]) : 0.0f;
  }
  const float* pair_centroids = centroids + p * clusters * D;
  const float* pair_norms = norms + p * clusters;
  float best[4];
  int32_t best_index[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) best[i] = INFINITY, best_index[i] = -1;

  for (int64_t c0 = 0; c0 < clusters; c0 += kTileClusters) {
    float acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;
    for (int k0 = 0; k0 < D; k0 += kChunk) {
      __syncthreads();  // the last chunk is consumed (and, the first time, xs is written)
      for (int e = tid; e < kTileClusters * kChunk; e += kAssignThreads) {
        const int j = e / kChunk, k = e % kChunk;
        const int64_t c = c0 + j;
        cs[k][j] = c < clusters ? pair_centroids[c * D + k0 + k] : 0.0f;
      }
      __syncthreads();
#pragma unroll 8
      for (int k = 0; k < kChunk; ++k) {
        float a[4], w[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) a[i] = xs[k0 + k][ty * 4 + i];
#pragma unroll
        for (int j = 0; j < 4; ++j) w[j] = cs[k][tx * 4 + j];
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j) acc[i][j] = __fmaf_rn(a[i], w[j], acc[i][j]);
      }
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t c = c0 + tx * 4 + j;
      if (c >= clusters) break;
      const float norm = pair_norms[c];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        // The CPU's norms[c] − 2·dots[c], rounded as it rounds (2·dot is exact).
        const float distance = __fsub_rn(norm, __fmul_rn(2.0f, acc[i][j]));
        if (distance < best[i]) best[i] = distance, best_index[i] = int32_t(c);
      }
    }
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    float value = best[i];
    uint32_t index = uint32_t(best_index[i]);  // -1 (none) sorts last
#pragma unroll
    for (int offset = 8; offset >= 1; offset /= 2) {
      const float other_value = __shfl_xor_sync(kFull, value, offset);
      const uint32_t other_index = __shfl_xor_sync(kFull, index, offset);
      if (other_value < value || (other_value == value && other_index < index))
        value = other_value, index = other_index;
    }
    const int64_t t = first + ty * 4 + i;
    if (tx == 0 && t < seq) labels[p * seq + t] = index == 0xffffffffu ? 0 : int32_t(index);
  }
}

__global__ void sort_keys_kernel(const int32_t* labels, int32_t* keys, int32_t* tokens, int64_t seq,
                                 int64_t clusters, int64_t total) {
  const int64_t item = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (item >= total) return;
  keys[item] = int32_t((item / seq) * clusters + labels[item]);
  tokens[item] = int32_t(item % seq);
}

// Each cluster's first position (its run's first thread) and its end (the last thread), in the
// pair's own run; counts_from_ends turns the ends into sizes.
__global__ void bounds_kernel(const int32_t* keys_sorted, int32_t* starts, int32_t* ends,
                              int64_t seq, int64_t clusters, int64_t total) {
  const int64_t item = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (item >= total) return;
  const int32_t key = keys_sorted[item];
  const int64_t local = item - (key / clusters) * seq;
  if (item == 0 || keys_sorted[item - 1] != key) starts[key] = int32_t(local);
  if (item == total - 1 || keys_sorted[item + 1] != key) ends[key] = int32_t(local + 1);
}

__global__ void counts_from_ends_kernel(const int32_t* starts, int32_t* counts, int64_t total) {
  const int64_t item = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (item < total) counts[item] -= starts[item];
}

// A warp per (pair, cluster): lanes along head_dim, members in token order, sums in double.
template <int D>
__global__ void update_kernel(const uint16_t* x, const int32_t* members, const int32_t* counts,
                              const int32_t* starts, float* centroids, uint32_t* shift_bits,
                              const int32_t* active, int64_t seq, int64_t heads, int64_t clusters,
                              int64_t total) {
  constexpr int kPerLane = D / 32, kWarps = 4;
  __shared__ double squares[kWarps][D];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t item = int64_t(blockIdx.x) * kWarps + warp;  // p·clusters + c
  if (item >= total) return;
  const int64_t p = item / clusters;
  const int32_t size = counts[item];
  if (!active[p] || size == 0) return;  // an empty cluster keeps its centroid
  const int64_t b = p / heads, h = p % heads;
  const int32_t* run = members + p * seq + starts[item];
  double sum[kPerLane];
#pragma unroll
  for (int r = 0; r < kPerLane; ++r) sum[r] = 0;
  for (int32_t m = 0; m < size; ++m) {
    const uint16_t* row = x + ((b * seq + run[m]) * heads + h) * D;
#pragma unroll
    for (int r = 0; r < kPerLane; ++r)
      sum[r] = __dadd_rn(sum[r], double(bf16_value(row[lane + 32 * r])));
  }
  float* centroid = centroids + item * D;
#pragma unroll
  for (int r = 0; r < kPerLane; ++r) {
    const int d = lane + 32 * r;
    const float mean = __double2float_rn(__ddiv_rn(sum[r], double(size)));
    const double moved = double(__fsub_rn(mean, centroid[d]));
    squares[warp][d] = __dmul_rn(moved, moved);
    centroid[d] = mean;
  }
  __syncwarp();
  if (lane == 0) {  // Σ_d in the CPU's order
    double moved = 0;
    for (int d = 0; d < D; ++d) moved = __dadd_rn(moved, squares[warp][d]);
    // Non-negative floats order as their bits: an integer max is the float max, in any order.
    atomicMax(shift_bits + p, __float_as_uint(__double2float_rn(sqrt(moved))));
  }
}

__global__ void finish_kernel(const uint32_t* shift_bits, int32_t* iterations, int32_t* active,
                              int64_t max_iterations, float tolerance, int64_t pairs) {
  const int64_t p = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (p >= pairs || !active[p]) return;
  const int32_t done = ++iterations[p];
  if (__uint_as_float(shift_bits[p]) < tolerance || done == max_iterations) active[p] = 0;
}

__global__ void slots_kernel(const int32_t* keys_sorted, const int32_t* members,
                             const int32_t* starts, const int32_t* slot_start,
                             int32_t* token_of_slot, int64_t seq, int64_t clusters, int64_t total) {
  const int64_t item = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (item >= total) return;
  const int32_t key = keys_sorted[item];
  const int64_t p = key / clusters, rank = item - p * seq - starts[key];
  token_of_slot[slot_start[key] + rank] = int32_t(p * seq + members[item]);
}

// A thread per 8 bf16 (16 bytes) of a row.
__global__ void gather_rows_kernel(const uint16_t* x, const int32_t* token_of_slot, uint16_t* rows,
                                   int64_t slots, int64_t seq, int64_t heads, int64_t head_dim) {
  const int64_t vectors = head_dim / 8;
  const int64_t item = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (item >= slots * vectors) return;
  const int64_t slot = item / vectors, v = item % vectors;
  const int32_t token = token_of_slot[slot];
  uint4 value = make_uint4(0, 0, 0, 0);
  if (token >= 0) {
    const int64_t p = token / seq, t = token % seq, b = p / heads, h = p % heads;
    value = reinterpret_cast<const uint4*>(x + ((b * seq + t) * heads + h) * head_dim)[v];
  }
  reinterpret_cast<uint4*>(rows + slot * head_dim)[v] = value;
}

__global__ void scatter_rows_kernel(const uint16_t* rows, const int32_t* token_of_slot,
                                    uint16_t* out, int64_t slots, int64_t seq, int64_t heads,
                                    int64_t head_dim) {
  const int64_t vectors = head_dim / 8;
  const int64_t item = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (item >= slots * vectors) return;
  const int64_t slot = item / vectors, v = item % vectors;
  const int32_t token = token_of_slot[slot];
  if (token < 0) return;
  const int64_t p = token / seq, t = token % seq, b = p / heads, h = p % heads;
  reinterpret_cast<uint4*>(out + ((b * seq + t) * heads + h) * head_dim)[v] =
      reinterpret_cast<const uint4*>(rows + slot * head_dim)[v];
}

void check_shape(const Svg2KmeansShape& shape) {
  check(shape.head_dim == 64 || shape.head_dim == 128,
        "sparse_video_gen_2_attn on the GPU: head size {} is not compiled in (64 and 128 are)",
        shape.head_dim);
  check(shape.pairs() * shape.seq < (int64_t(1) << 31) &&
            shape.pairs() * shape.clusters < (int64_t(1) << 31) && shape.pairs() <= 65535,
        "sparse_video_gen_2_attn on the GPU: {} heads of {} tokens are too many", shape.pairs(),
        shape.seq);
}

int end_bit(const Svg2KmeansShape& shape) {
  int bits = 1;
  while ((int64_t(1) << bits) < shape.pairs() * shape.clusters) ++bits;
  return bits;
}

}  // namespace

void svg2_gather_centroids(const void* x, const int32_t* picks, float* centroids,
                           const Svg2KmeansShape& shape, cudaStream_t stream) {
  const int64_t total = shape.pairs() * shape.clusters * shape.head_dim;
  gather_centroids_kernel<<<blocks_for(total, 256), 256, 0, stream>>>(
      static_cast<const uint16_t*>(x), picks, centroids, shape.seq, shape.heads, shape.head_dim,
      shape.clusters, total);
  MMGEN_CUDA_CHECK_LAUNCH();
}

void svg2_centroid_norms(const float* centroids, float* norms, const int32_t* active,
                         const Svg2KmeansShape& shape, cudaStream_t stream) {
  const int64_t total = shape.pairs() * shape.clusters;
  norms_kernel<<<blocks_for(total, 128), 128, 0, stream>>>(centroids, norms, active, shape.clusters,
                                                           shape.head_dim, total);
  MMGEN_CUDA_CHECK_LAUNCH();
}

void svg2_assign(const void* x, const float* centroids, const float* norms, int32_t* labels,
                 const int32_t* active, const Svg2KmeansShape& shape, cudaStream_t stream) {
  check_shape(shape);
  const dim3 grid(blocks_for(shape.seq, kTilePoints), unsigned(shape.pairs()));
  const auto* bits = static_cast<const uint16_t*>(x);
  if (shape.head_dim == 64)
    assign_kernel<64><<<grid, kAssignThreads, 0, stream>>>(bits, centroids, norms, labels, active,
                                                           shape.seq, shape.heads, shape.clusters);
  else
    assign_kernel<128><<<grid, kAssignThreads, 0, stream>>>(bits, centroids, norms, labels, active,
                                                            shape.seq, shape.heads, shape.clusters);
  MMGEN_CUDA_CHECK_LAUNCH();
}

size_t svg2_sort_scratch_bytes(const Svg2KmeansShape& shape) {
  check_shape(shape);
  size_t bytes = 0;
  MMGEN_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
      nullptr, bytes, static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr),
      static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr),
      int(shape.pairs() * shape.seq), 0, end_bit(shape)));
  return bytes;
}

void svg2_sort_members(const int32_t* labels, const Svg2Members& m, const Svg2KmeansShape& shape,
                       cudaStream_t stream) {
  check_shape(shape);
  const int64_t total = shape.pairs() * shape.seq, clusters = shape.pairs() * shape.clusters;
  sort_keys_kernel<<<blocks_for(total, 256), 256, 0, stream>>>(labels, m.keys, m.tokens, shape.seq,
                                                               shape.clusters, total);
  MMGEN_CUDA_CHECK_LAUNCH();
  // LSD radix sort: stable, so each cluster's tokens stay ascending.
  size_t bytes = m.scratch_bytes;
  MMGEN_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(m.scratch, bytes, m.keys, m.keys_sorted,
                                                   m.tokens, m.members, int(total), 0,
                                                   end_bit(shape), stream));
  MMGEN_CUDA_CHECK(cudaMemsetAsync(m.starts, 0, size_t(clusters) * sizeof(int32_t), stream));
  MMGEN_CUDA_CHECK(cudaMemsetAsync(m.counts, 0, size_t(clusters) * sizeof(int32_t), stream));
  bounds_kernel<<<blocks_for(total, 256), 256, 0, stream>>>(m.keys_sorted, m.starts, m.counts,
                                                            shape.seq, shape.clusters, total);
  MMGEN_CUDA_CHECK_LAUNCH();
  counts_from_ends_kernel<<<blocks_for(clusters, 256), 256, 0, stream>>>(m.starts, m.counts,
                                                                         clusters);
  MMGEN_CUDA_CHECK_LAUNCH();
}

void svg2_update(const void* x, const Svg2Members& m, float* centroids, uint32_t* shift_bits,
                 int32_t* iterations, int32_t* active, int64_t max_iterations, float tolerance,
                 const Svg2KmeansShape& shape, cudaStream_t stream) {
  check_shape(shape);
  const int64_t total = shape.pairs() * shape.clusters;
  const auto* bits = static_cast<const uint16_t*>(x);
  if (shape.head_dim == 64)
    update_kernel<64><<<blocks_for(total, 4), 128, 0, stream>>>(
        bits, m.members, m.counts, m.starts, centroids, shift_bits, active, shape.seq, shape.heads,
        shape.clusters, total);
  else
    update_kernel<128><<<blocks_for(total, 4), 128, 0, stream>>>(
        bits, m.members, m.counts, m.starts, centroids, shift_bits, active, shape.seq, shape.heads,
        shape.clusters, total);
  MMGEN_CUDA_CHECK_LAUNCH();
  finish_kernel<<<blocks_for(shape.pairs(), 128), 128, 0, stream>>>(
      shift_bits, iterations, active, max_iterations, tolerance, shape.pairs());
  MMGEN_CUDA_CHECK_LAUNCH();
}

void svg2_slots(const Svg2Members& m, const int32_t* slot_start, int32_t* token_of_slot,
                const Svg2KmeansShape& shape, cudaStream_t stream) {
  const int64_t total = shape.pairs() * shape.seq;
  slots_kernel<<<blocks_for(total, 256), 256, 0, stream>>>(m.keys_sorted, m.members, m.starts,
                                                           slot_start, token_of_slot, shape.seq,
                                                           shape.clusters, total);
  MMGEN_CUDA_CHECK_LAUNCH();
}

void svg2_gather_rows(const void* x, const int32_t* token_of_slot, void* rows, int64_t slots,
                      const Svg2KmeansShape& shape, cudaStream_t stream) {
  const int64_t items = slots * (shape.head_dim / 8);
  gather_rows_kernel<<<blocks_for(items, 256), 256, 0, stream>>>(
      static_cast<const uint16_t*>(x), token_of_slot, static_cast<uint16_t*>(rows), slots,
      shape.seq, shape.heads, shape.head_dim);
  MMGEN_CUDA_CHECK_LAUNCH();
}

void svg2_scatter_rows(const void* rows, const int32_t* token_of_slot, void* out, int64_t slots,
                       const Svg2KmeansShape& shape, cudaStream_t stream) {
  const int64_t items = slots * (shape.head_dim / 8);
  scatter_rows_kernel<<<blocks_for(items, 256), 256, 0, stream>>>(
      static_cast<const uint16_t*>(rows), token_of_slot, static_cast<uint16_t*>(out), slots,
      shape.seq, shape.heads, shape.head_dim);
  MMGEN_CUDA_CHECK_LAUNCH();
}

}  // namespace mmgen::cuda
