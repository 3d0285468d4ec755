// SVG2's k-means and permutation kernels (svg2_kernels.h). Everything that decides a label or a
// centroid is computed in a fixed order, with the CPU's roundings spelled out (__dmul_rn and
// friends: nvcc would otherwise fuse a·b + c where the CPU, built with -ffp-contract=off, rounds
// twice), so the same labels give the same centroids to the bit; no float atomics anywhere.
#include <cuda_bf16.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>

#include "attention/backends/sparse_video_gen_2_attn/svg2_kernels.h"
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

// ---- The plan (svg2_kernels.h) ----

constexpr int kSelectThreads = 256, kSelectWarps = kSelectThreads / 32;
constexpr int kMaxSortKeys = 2048;  // more key clusters than this: every row goes to the host

__device__ __forceinline__ bool before_in_order(double pa, int32_t a, double pb, int32_t b) {
  return pa > pb || (pa == pb && a < b);  // the CPU's order: descending mass, ties by index
}

// A CTA per (pair, query cluster) row. Scores: a warp per key cluster, lanes along head_dim, in
// double (the products of two floats are exact there, so the only error is the double sums', far
// below the float32 error the check allows for). Then the masses, a bitonic sort of (mass, index)
// in shared memory, the top-p walk and the robustness check in one thread.
template <int D>
__global__ void __launch_bounds__(kSelectThreads, 1)
    select_kernel(const float* q_centroids, const float* k_centroids, const int32_t* k_counts,
                  double scale, double top_p, int64_t always_kept, int64_t q_clusters,
                  int64_t k_clusters, int sort_n, uint8_t* selected, uint8_t* flags,
                  int32_t* flag_count) {
  extern __shared__ double mass[];  // [sort_n], then int32 order[sort_n]
  int32_t* order = reinterpret_cast<int32_t*>(mass + sort_n);
  __shared__ float q[D];
  __shared__ double reduce_a[kSelectWarps], reduce_b[kSelectWarps];
  __shared__ int kept_count;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int64_t row = blockIdx.x, pair = row / q_clusters;
  const float* keys = k_centroids + pair * k_clusters * D;
  const int32_t* sizes = k_counts + pair * k_clusters;
  uint8_t* keep = selected + row * k_clusters;
  if (top_p >= 1.0) {  // the CPU keeps every cluster, whatever the masses
    for (int64_t j = tid; j < k_clusters; j += kSelectThreads) keep[j] = 1;
    if (tid == 0) flags[row] = 0;
    return;
  }
  for (int d = tid; d < D; d += kSelectThreads) q[d] = q_centroids[row * D + d];
  for (int64_t j = tid; j < k_clusters; j += kSelectThreads) keep[j] = 0;
  __syncthreads();

  // x_j = scale · (q · k_j) and Σ_d |q_d·k_d| (what bounds the CPU's float32 rounding).
  double x_max = -INFINITY, magnitude_max = 0;
  for (int64_t j = warp; j < k_clusters; j += kSelectWarps) {
    double dot = 0, magnitude = 0;
#pragma unroll
    for (int d = lane; d < D; d += 32) {
      const double a = q[d], b = keys[j * D + d];
      dot = fma(a, b, dot);
      magnitude = fma(fabs(a), fabs(b), magnitude);
    }
#pragma unroll
    for (int offset = 16; offset >= 1; offset /= 2) {
      dot += __shfl_xor_sync(kFull, dot, offset);
      magnitude += __shfl_xor_sync(kFull, magnitude, offset);
    }
    const double x = dot * scale;
    if (lane == 0) mass[j] = x;
    x_max = fmax(x_max, x), magnitude_max = fmax(magnitude_max, magnitude);
  }
  // NaN scores poison the max (fmax ignores NaN, so carry them as a flag through magnitude).
  if (lane == 0) reduce_a[warp] = x_max, reduce_b[warp] = magnitude_max;
  __syncthreads();
  x_max = -INFINITY, magnitude_max = 0;
  for (int w = 0; w < kSelectWarps; ++w)
    x_max = fmax(x_max, reduce_a[w]), magnitude_max = fmax(magnitude_max, reduce_b[w]);
  __syncthreads();  // reduce_a is reused below
  double total = 0;
  bool sound = true;  // every score finite
  for (int64_t j = tid; j < k_clusters; j += kSelectThreads) {
    const double x = mass[j];
    sound = sound && isfinite(x);
    const double m = double(sizes[j]) * exp(x - x_max);
    mass[j] = m, total += m;
  }
  for (int64_t j = k_clusters + tid; j < sort_n; j += kSelectThreads) mass[j] = -1.0;  // last
  for (int j = tid; j < sort_n; j += kSelectThreads) order[j] = j;
#pragma unroll
  for (int offset = 16; offset >= 1; offset /= 2) total += __shfl_xor_sync(kFull, total, offset);
  sound = __all_sync(kFull, sound);
  if (lane == 0) reduce_a[warp] = total, reduce_b[warp] = sound ? 1.0 : 0.0;
  __syncthreads();
  total = 0;
  for (int w = 0; w < kSelectWarps; ++w) total += reduce_a[w], sound = sound && reduce_b[w] != 0;
  // The CPU divides by max(total, 1e-12); keep clear of that clamp (total >= 1 whenever the
  // largest score belongs to a non-empty cluster).
  sound = sound && isfinite(total) && total > 1e-6;
  const double divisor = fmax(total, 1e-12);
  // Positive masses must stay positive on the CPU (so they order before the empty clusters' exact
  // zeros there too): flag a row with a non-empty cluster of (nearly) no mass.
  bool positive = true;
  for (int64_t j = tid; j < k_clusters; j += kSelectThreads) {
    mass[j] /= divisor;
    positive = positive && (sizes[j] == 0 || mass[j] > 1e-290);
  }
  positive = __syncthreads_and(positive);

  // Bitonic sort, "ascending" in the CPU's order (a strict total order: the indices differ).
  for (int k = 2; k <= sort_n; k <<= 1)
    for (int j = k >> 1; j > 0; j >>= 1) {
      for (int i = tid; i < sort_n; i += kSelectThreads) {
        const int partner = i ^ j;
        if (partner <= i) continue;
        const bool partner_first =
            before_in_order(mass[partner], order[partner], mass[i], order[i]);
        if ((i & k) == 0 ? partner_first : !partner_first) {
          const double m = mass[i];
          mass[i] = mass[partner], mass[partner] = m;
          const int32_t o = order[i];
          order[i] = order[partner], order[partner] = o;
        }
      }
      __syncthreads();
    }

  if (tid == 0) {
    // The CPU's walk: kept while rank 0, rank < always_kept or the mass before <= top_p.
    int64_t n = 0;
    double before = 0, before_last = 0;
    for (int64_t rank = 0; rank < k_clusters; ++rank) {
      if (!(rank == 0 || rank < always_kept || before <= top_p)) break;
      before_last = before, before += mass[rank], n = rank + 1;
    }
    // The check. The CPU's x_j = float32(q·k_j)·scale differs from the exact one by at most
    // eps = scale·γ_D·max_j Σ|q_d·k_{j,d}| (γ_D = D·u/(1 − D·u), u = 2^-24: any summation order,
    // with or without fused multiply-adds; plus a subnormal allowance), so each of its normalised
    // masses is within a factor exp(±2·eps) of the exact one; eta covers the double roundings of
    // the exponentials, the normalisation and the running sums on both sides.
    const double u = 0x1p-24, gamma = D * u / (1.0 - D * u);
    const double eps = fabs(scale) * (gamma * magnitude_max * (1.0 + 1e-6) + D * 0x1p-126);
    const double eta = 4.0 * double(k_clusters + 16) * 0x1p-53;
    const double up = exp(2.0 * eps) * (1.0 + eta) * (1.0 + 1e-12),
                 down = exp(-2.0 * eps) * (1.0 - eta) * (1.0 - 1e-12);
    const int64_t forced = always_kept > 1 ? always_kept : 1;
    bool robust = sound && positive;
    // The kept set stays the top n: the last kept stays above the first dropped (unless that one
    // is an empty cluster: then every later one is too, an exact zero on both sides, ordered by
    // index on both).
    if (n < k_clusters && sizes[order[n]] > 0) robust = robust && mass[n - 1] * down > mass[n] * up;
    // The walk stops at n: the top n's mass stays above top_p, the top n − 1's (when that rank
    // was kept by the test, not by force) at or below it.
    if (n < k_clusters) robust = robust && before * down > top_p;
    if (n - 1 >= forced) robust = robust && before_last * up < top_p;
    kept_count = int(n);
    flags[row] = robust ? 0 : 1;
    if (!robust) atomicAdd(flag_count, 1);
  }
  __syncthreads();
  for (int r = tid; r < kept_count; r += kSelectThreads) keep[order[r]] = 1;
}

__global__ void patch_rows_kernel(const uint8_t* rows, const int32_t* row_ids, int64_t count,
                                  int64_t k_clusters, uint8_t* selected) {
  const int64_t item = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (item >= count * k_clusters) return;
  const int64_t r = item / k_clusters, j = item % k_clusters;
  selected[int64_t(row_ids[r]) * k_clusters + j] = rows[item];
}

__global__ void block_counts_kernel(const int32_t* counts, int64_t n, int32_t* blocks) {
  const int64_t item = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (item < n) blocks[item] = (counts[item] + 63) / 64;
  if (item == n) blocks[item] = 0;
}

// A warp per query-cluster row.
__global__ void list_lengths_kernel(const uint8_t* selected, const int32_t* q_counts,
                                    const int32_t* k_counts, int64_t rows, int64_t q_clusters,
                                    int64_t k_clusters, int32_t* list_len, int64_t* entries,
                                    unsigned long long* kept_pairs) {
  const int64_t row = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row > rows) return;
  if (row == rows) {
    if (lane == 0) entries[rows] = 0;
    return;
  }
  const int32_t queries = q_counts[row];
  const int64_t pair = row / q_clusters;
  const uint8_t* keep = selected + row * k_clusters;
  const int32_t* sizes = k_counts + pair * k_clusters;
  int64_t blocks = 0, keys = 0;
  if (queries > 0)
    for (int64_t j = lane; j < k_clusters; j += 32)
      if (keep[j] && sizes[j] > 0) blocks += (sizes[j] + 63) / 64, keys += sizes[j];
#pragma unroll
  for (int offset = 16; offset >= 1; offset /= 2) {
    blocks += __shfl_xor_sync(kFull, blocks, offset);
    keys += __shfl_xor_sync(kFull, keys, offset);
  }
  if (lane == 0) {
    list_len[row] = int32_t(blocks);
    entries[row] = blocks * ((queries + 63) / 64);
    if (keys > 0) atomicAdd(kept_pairs, (unsigned long long)(keys * queries));
  }
}

// A warp per query-cluster row: the offsets of its halves, then its list (key clusters in
// ascending order, 32 at a time, each lane placing its cluster's blocks after a warp scan), once
// per half.
__global__ void write_lists_kernel(Svg2ListArgs a, int64_t rows, int64_t q_clusters,
                                   int64_t k_clusters) {
  const int64_t row = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const int32_t queries = a.q_counts[row];
  if (queries == 0) return;
  const int64_t pair = row / q_clusters, halves = (queries + 63) / 64;
  const int64_t first_half = a.q_half_start[row], start = a.entry_start[row];
  const int64_t length = a.list_len[row];
  for (int64_t t = lane; t < halves; t += 32)
    a.offsets[first_half + t] = int32_t(start + t * length);
  const uint8_t* keep = a.selected + row * k_clusters;
  const int32_t* sizes = a.k_counts + pair * k_clusters;
  const int32_t* block_start = a.k_block_start + pair * k_clusters;
  int64_t base = 0;
  for (int64_t j0 = 0; j0 < k_clusters; j0 += 32) {
    const int64_t j = j0 + lane;
    const int32_t mine = j < k_clusters && keep[j] && sizes[j] > 0 ? (sizes[j] + 63) / 64 : 0;
    int32_t inclusive = mine;
#pragma unroll
    for (int offset = 1; offset < 32; offset *= 2) {
      const int32_t other = __shfl_up_sync(kFull, inclusive, offset);
      if (lane >= offset) inclusive += other;
    }
    const int64_t at = base + inclusive - mine;
    for (int64_t t = 0; t < halves; ++t)
      for (int32_t b = 0; b < mine; ++b)
        a.indices[start + t * length + at + b] = block_start[j] + b;
    base += __shfl_sync(kFull, inclusive, 31);
  }
}

// A thread per cluster of either side: slot starts, and the key blocks' lengths.
__global__ void slots_and_lengths_kernel(Svg2ListArgs a, int64_t q_rows, int64_t k_rows) {
  const int64_t item = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (item < q_rows) a.q_slot_start[item] = a.q_half_start[item] * 64;
  if (item >= k_rows) return;
  const int32_t first = a.k_block_start[item], size = a.k_counts[item];
  a.k_slot_start[item] = first * 64;
  for (int32_t b = 0; b * 64 < size; ++b) a.key_lengths[first + b] = min(64, size - b * 64);
}

__global__ void finish_offsets_kernel(int32_t* offsets, const int32_t* q_half_start,
                                      const int64_t* entry_start, int64_t rows) {
  offsets[q_half_start[rows]] = int32_t(entry_start[rows]);
}

__global__ void totals_kernel(const int32_t* flag_count, const int32_t* q_half_start,
                              const int32_t* k_block_start, const int64_t* entry_start,
                              const unsigned long long* kept_pairs, int64_t q_rows, int64_t k_rows,
                              int64_t* out) {
  out[0] = *flag_count, out[1] = q_half_start[q_rows], out[2] = k_block_start[k_rows];
  out[3] = entry_start[q_rows], out[4] = int64_t(*kept_pairs);
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

void svg2_select_pairs(const float* q_centroids, const float* k_centroids, const int32_t* k_counts,
                       float scale, double top_p, double min_kc_ratio, const Svg2PlanShape& shape,
                       uint8_t* selected, uint8_t* flags, int32_t* flag_count,
                       cudaStream_t stream) {
  const int64_t rows = shape.q_rows(), kc = shape.k_clusters;
  check(shape.head_dim == 64 || shape.head_dim == 128,
        "sparse_video_gen_2_attn on the GPU: head size {} is not compiled in (64 and 128 are)",
        shape.head_dim);
  if (rows == 0 || kc == 0) return;
  int sort_n = 1;
  while (sort_n < kc) sort_n *= 2;
  if (kc > kMaxSortKeys && top_p < 1.0) {
    // Too many key clusters for one CTA's sort: every row is the host's.
    MMGEN_CUDA_CHECK(cudaMemsetAsync(flags, 1, size_t(rows), stream));
    const int32_t all = int32_t(rows);
    MMGEN_CUDA_CHECK(
        cudaMemcpyAsync(flag_count, &all, sizeof(all), cudaMemcpyHostToDevice, stream));
    MMGEN_CUDA_CHECK(cudaStreamSynchronize(stream));  // `all` lives on this stack frame
    return;
  }
  if (top_p >= 1.0) sort_n = 1;  // the kernel only fills the rows with ones
  const int64_t always_kept = int64_t(std::floor(min_kc_ratio * double(kc)));
  const size_t bytes = size_t(sort_n) * (sizeof(double) + sizeof(int32_t));
  if (shape.head_dim == 64)
    select_kernel<64><<<unsigned(rows), kSelectThreads, bytes, stream>>>(
        q_centroids, k_centroids, k_counts, double(scale), top_p, always_kept, shape.q_clusters, kc,
        sort_n, selected, flags, flag_count);
  else
    select_kernel<128><<<unsigned(rows), kSelectThreads, bytes, stream>>>(
        q_centroids, k_centroids, k_counts, double(scale), top_p, always_kept, shape.q_clusters, kc,
        sort_n, selected, flags, flag_count);
  MMGEN_CUDA_CHECK_LAUNCH();
}

void svg2_patch_rows(const uint8_t* rows, const int32_t* row_ids, int64_t count, int64_t k_clusters,
                     uint8_t* selected, cudaStream_t stream) {
  if (count == 0) return;
  patch_rows_kernel<<<blocks_for(count * k_clusters, 256), 256, 0, stream>>>(rows, row_ids, count,
                                                                             k_clusters, selected);
  MMGEN_CUDA_CHECK_LAUNCH();
}

void svg2_block_counts(const int32_t* counts, int64_t n, int32_t* blocks, cudaStream_t stream) {
  block_counts_kernel<<<blocks_for(n + 1, 256), 256, 0, stream>>>(counts, n, blocks);
  MMGEN_CUDA_CHECK_LAUNCH();
}

size_t svg2_scan_scratch_bytes(int64_t n) {
  size_t a = 0, b = 0;
  MMGEN_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(nullptr, a, static_cast<const int32_t*>(nullptr),
                                                 static_cast<int32_t*>(nullptr), int(n)));
  MMGEN_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(nullptr, b, static_cast<const int64_t*>(nullptr),
                                                 static_cast<int64_t*>(nullptr), int(n)));
  return std::max<size_t>({a, b, 1});
}

void svg2_exclusive_scan(const int32_t* in, int32_t* out, int64_t n, void* scratch, size_t bytes,
                         cudaStream_t stream) {
  MMGEN_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(scratch, bytes, in, out, int(n), stream));
}

void svg2_exclusive_scan(const int64_t* in, int64_t* out, int64_t n, void* scratch, size_t bytes,
                         cudaStream_t stream) {
  MMGEN_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(scratch, bytes, in, out, int(n), stream));
}

void svg2_list_lengths(const uint8_t* selected, const int32_t* q_counts, const int32_t* k_counts,
                       const Svg2PlanShape& shape, int32_t* list_len, int64_t* entries,
                       unsigned long long* kept_pairs, cudaStream_t stream) {
  const int64_t rows = shape.q_rows();
  list_lengths_kernel<<<blocks_for((rows + 1) * 32, 256), 256, 0, stream>>>(
      selected, q_counts, k_counts, rows, shape.q_clusters, shape.k_clusters, list_len, entries,
      kept_pairs);
  MMGEN_CUDA_CHECK_LAUNCH();
}

void svg2_write_lists(const Svg2ListArgs& args, const Svg2PlanShape& shape, cudaStream_t stream) {
  const int64_t rows = shape.q_rows();
  if (rows > 0) {
    write_lists_kernel<<<blocks_for(rows * 32, 256), 256, 0, stream>>>(args, rows, shape.q_clusters,
                                                                       shape.k_clusters);
    MMGEN_CUDA_CHECK_LAUNCH();
  }
  const int64_t most = std::max(rows, shape.k_rows());
  if (most > 0) {
    slots_and_lengths_kernel<<<blocks_for(most, 256), 256, 0, stream>>>(args, rows, shape.k_rows());
    MMGEN_CUDA_CHECK_LAUNCH();
  }
  finish_offsets_kernel<<<1, 1, 0, stream>>>(args.offsets, args.q_half_start, args.entry_start,
                                             rows);
  MMGEN_CUDA_CHECK_LAUNCH();
}

void svg2_plan_totals(const int32_t* flag_count, const int32_t* q_half_start,
                      const int32_t* k_block_start, const int64_t* entry_start,
                      const unsigned long long* kept_pairs, const Svg2PlanShape& shape,
                      int64_t* out, cudaStream_t stream) {
  totals_kernel<<<1, 1, 0, stream>>>(flag_count, q_half_start, k_block_start, entry_start,
                                     kept_pairs, shape.q_rows(), shape.k_rows(), out);
  MMGEN_CUDA_CHECK_LAUNCH();
}

}  // namespace mmgen::cuda
