// V-MoBA's kernels (vmoba_kernels.h):
// - split means: a thread per (chunk, column), coalesced along the hidden dimension,
//   double sums in slot order as on the CPU;
// - selection: one warp per query; the query's (normalised) scores become order-preserving keys in
//   shared memory, a bitwise search finds the cut key (no sort), and one ordered pass takes the
//   keys above it and the first ties (lower chunk first, as the CPU's ranking breaks ties); chosen
//   chunks go to a bitmask and a per-CTA histogram;
// - runs: one thread per query, a CTA per 256 queries of a pair: entries and rows are reserved
//   per CTA with one atomic each, then handed out in shared memory;
// - gather and merge: plain copies, one warp per (query, head) for the merge.
#include <cuda_bf16.h>

#include <climits>
#include <cmath>
#include <cstdint>

#include "attention/backends/vmoba_attn/vmoba_kernels.h"
#include "attention/cuda/radix_select.cuh"
#include "core/cuda/cuda_check.h"
#include "core/error.h"

namespace mmgen::cuda {
namespace {

constexpr int kSelectWarps = 4;
constexpr int kQueriesPerWarp = 2;
constexpr int kMaxChunks = 8192;
constexpr int kRunThreads = 256;
constexpr unsigned kFull = 0xffffffffu;
// Upstream's guard, as on the CPU (vmoba_select.cpp): a normalisation range at or below it counts
// as 1; it is added to the total mass before dividing.
constexpr double kEps = 1e-6;

__device__ __forceinline__ float bf16_value(uint16_t bits) {
  return __uint_as_float(uint32_t(bits) << 16);
}
__device__ __forceinline__ uint16_t bf16_bits(float value) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(value));
}

// ordered_key (radix_select.cuh) undone.
__device__ __forceinline__ float from_ordered(uint32_t key) {
  return __uint_as_float((key & 0x80000000u) ? key & 0x7fffffffu : ~key);
}

// A CTA per (chunk, batch, 64 columns): lane l sums columns 2l, 2l + 1 (4-byte loads: a warp
// reads 128 contiguous bytes of a row) over the rows i ≡ warp (mod 8), eight rows' loads in
// flight; the warps' partial sums are then added in warp order. The sums are in double and of
// bf16 values (8 significant bits), so every partial sum is exact while the values span less than
// about 2^40: the order does not change the result, which equals the CPU's slot-order sum.
constexpr int kMeanWarps = 8, kMeanColumns = 64;

__global__ void __launch_bounds__(kMeanWarps * 32)
    split_means_kernel(const uint16_t* x, uint16_t* parts, int64_t rows, int64_t chunks,
                       int64_t stride, int64_t heads, int64_t head_dim, const int32_t* lengths) {
  __shared__ double partial[kMeanWarps][kMeanColumns];
  const int64_t chunk = blockIdx.x, b = blockIdx.y, width = heads * head_dim;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int length = lengths[chunk];
  const uint16_t* slots = x + (b * chunks + chunk) * stride * width;
  const int64_t column = int64_t(blockIdx.z) * kMeanColumns + 2 * lane;
  double sum0 = 0.0, sum1 = 0.0;
  if (column < width) {
#pragma unroll 8
    for (int i = warp; i < length; i += kMeanWarps) {
      const uint32_t two = *reinterpret_cast<const uint32_t*>(slots + int64_t(i) * width + column);
      sum0 += double(__uint_as_float(two << 16));
      sum1 += double(__uint_as_float(two & 0xffff0000u));
    }
  }
  partial[warp][2 * lane] = sum0, partial[warp][2 * lane + 1] = sum1;
  __syncthreads();
  if (warp != 0) return;
  for (int e = 0; e < 2; ++e) {
    const int64_t c = column + e;
    if (c >= width) break;
    double sum = 0.0;
    for (int w = 0; w < kMeanWarps; ++w) sum += partial[w][2 * lane + e];
    const float mean = length ? float(sum / double(length)) : 0.0f;
    const uint16_t hi = bf16_bits(mean);
    const float rest = mean - bf16_value(hi);
    const uint16_t mid = bf16_bits(rest);
    const uint16_t lo = bf16_bits(rest - bf16_value(mid));
    const int64_t h = c / head_dim, d = c % head_dim;
    uint16_t* out = parts + ((b * heads + h) * rows + chunk) * 3 * head_dim;
    out[d] = hi, out[head_dim + d] = mid, out[2 * head_dim + d] = lo;
  }
}

__global__ void tripled_queries_kernel(const uint16_t* x, uint16_t* y, int64_t b, int64_t h,
                                       int64_t slots, int64_t heads, int64_t head_dim) {
  const int64_t item = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (item >= slots * head_dim) return;
  const int64_t s = item / head_dim, d = item % head_dim;
  const uint16_t value = x[(b * slots + s) * heads * head_dim + h * head_dim + d];
  uint16_t* row = y + s * 3 * head_dim;
  row[d] = value, row[head_dim + d] = value, row[2 * head_dim + d] = value;
}

__device__ __forceinline__ double warp_sum(double value) {
  for (int offset = 16; offset > 0; offset /= 2) value += __shfl_xor_sync(kFull, value, offset);
  return value;
}

// Over the warp's candidate keys (0: not a candidate) that reach `cut` (or exceed it): how many,
// and their mass in double.
struct Reach {
  int count;
  double mass;
};
__device__ __forceinline__ Reach reach(const uint32_t* keys, int chunks, int lane, uint32_t cut,
                                       bool strictly_above = false) {
  int count = 0;
  double mass = 0;
  for (int c = lane; c < chunks; c += 32) {
    const uint32_t key = keys[c];
    if (key != 0 && (strictly_above ? key > cut : key >= cut)) {
      ++count;
      mass += double(from_ordered(key));
    }
  }
  return {__reduce_add_sync(kFull, count), warp_sum(mass)};
}

// One warp per query. The taken entries are those above a cut key plus the first `ties` entries
// at the cut (lower chunk first): in descending order (ties to the lower chunk) that is the run
// the CPU takes. The cut is found over the order-preserving keys: in top-k mode the largest key
// that at least `need` entries reach (the need-th largest, by a byte-wise radix search); in
// threshold mode, by a bitwise search, the largest key whose entries at or above it hold the
// target mass (the entry where the CPU's running mass first reaches the target has that key).
__global__ void __launch_bounds__(kSelectWarps * 32) select_kernel(VmobaSelectArgs a, int words) {
  extern __shared__ __align__(16) unsigned char shared[];
  uint32_t* all_keys = reinterpret_cast<uint32_t*>(shared);  // [warps, chunks]
  int32_t* histogram = reinterpret_cast<int32_t*>(all_keys + kSelectWarps * a.chunks);
  __shared__ int bins[kSelectWarps][256];  // each warp's radix histogram (top-k mode)
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int chunks = int(a.chunks);
  const int64_t pair = blockIdx.y;
  for (int i = threadIdx.x; i < chunks; i += blockDim.x) histogram[i] = 0;
  __syncthreads();
  uint32_t* keys = all_keys + warp * chunks;
  const int64_t first = int64_t(blockIdx.x) * kSelectWarps * kQueriesPerWarp;
  for (int round = 0; round < kQueriesPerWarp; ++round) {
    const int64_t s = first + round * kSelectWarps + warp;
    if (s >= a.slots) break;
    const int own = int(s / a.stride);
    uint32_t* out = a.chosen + (pair * a.slots + s) * words;
    if (s - int64_t(own) * a.stride >= a.lengths[own]) {  // padding: chooses nothing
      for (int w = lane; w < words; w += 32) out[w] = 0;
      continue;
    }
    const float* g = a.scores + (pair * a.slots + s) * a.score_stride;
    const int others = chunks - 1;
    uint32_t cut = 0;  // take every candidate above it ...
    int ties = 0;      // ... and this many at it
    if (a.topk_mode) {
      for (int c = lane; c < chunks; c += 32) keys[c] = c != own ? ordered_key(g[c]) : 0;
      __syncwarp();
      const int need = int(min(a.topk - 1, int64_t(others)));
      if (need > 0) {
        // The need-th largest key (the own chunk's 0 is below every other key, and need <=
        // others, so it is never the one), by the radix search.
        cut = kth_largest_key([&](int c) { return keys[c]; }, chunks, need, bins[warp], lane);
        ties = need - reach(keys, chunks, lane, cut, true).count;
      } else {
        cut = 0xffffffffu;  // nothing is above it
      }
    } else {
      float low = INFINITY, high = -INFINITY;
      for (int c = lane; c < chunks; c += 32) low = fminf(low, g[c]), high = fmaxf(high, g[c]);
      for (int offset = 16; offset > 0; offset /= 2) {
        low = fminf(low, __shfl_xor_sync(kFull, low, offset));
        high = fmaxf(high, __shfl_xor_sync(kFull, high, offset));
      }
      const double scale = double(high) - double(low) <= kEps ? 1.0 : double(high) - low;
      double total = 0, own_mass = 0;
      for (int c = lane; c < chunks; c += 32) {
        const float value = float((double(g[c]) - low) / scale);
        total += value;
        if (c == own) own_mass = value;
        // Normalised values are >= 0, so their keys have the top bit set: never 0.
        keys[c] = c != own ? ordered_key(value) : 0;
      }
      total = warp_sum(total), own_mass = warp_sum(own_mass);
      const double target = fmax(0.0, a.threshold - own_mass / (total + kEps)) * (total + kEps);
      __syncwarp();
      if (others > 0 && reach(keys, chunks, lane, 1).mass >= target) {
        // (A target of 0 is reached by the first entry alone: the cut is then the largest key.)
        for (int bit = 31; bit >= 0; --bit) {
          const uint32_t candidate = cut | (1u << bit);
          const Reach r = reach(keys, chunks, lane, candidate);
          if (r.count > 0 && r.mass >= target) cut = candidate;
        }
        // The CPU adds the entries at the cut one by one after those above it.
        const double value = double(from_ordered(cut));
        const Reach above = reach(keys, chunks, lane, cut, true);
        const int at_cut = reach(keys, chunks, lane, cut).count - above.count;
        double mass = above.mass;
        do {
          mass += value;
          ++ties;
        } while (mass < target && ties < at_cut);
      }
      // Otherwise even every other chunk falls short of the target: all of them (cut 0, no
      // ties), as the CPU takes them.
    }
    const uint32_t lower_lanes = (1u << lane) - 1u;
    int ties_seen = 0;
    for (int base = 0; base < chunks; base += 32) {
      const int c = base + lane;
      const uint32_t key = c < chunks ? keys[c] : 0u;
      const bool tie = key != 0 && key == cut;
      const uint32_t tied = __ballot_sync(kFull, tie);
      const bool take =
          (key != 0 && key > cut) || (tie && ties_seen + __popc(tied & lower_lanes) < ties);
      const uint32_t taken = __ballot_sync(kFull, take);
      if (take) atomicAdd(&histogram[c], 1);
      if (lane == 0) out[base / 32] = taken;
      ties_seen += __popc(tied);
    }
    __syncwarp();
  }
  __syncthreads();
  for (int c = threadIdx.x; c < chunks; c += blockDim.x)
    if (histogram[c]) atomicAdd(&a.chunk_counts[pair * a.chunks + c], histogram[c]);
}

size_t select_shared_bytes(int64_t chunks) {
  return size_t(kSelectWarps + 1) * size_t(chunks) * sizeof(uint32_t);
}

__global__ void __launch_bounds__(kRunThreads) runs_kernel(VmobaRunsArgs a, int words) {
  extern __shared__ int32_t run_shared[];
  int32_t* local = run_shared;            // [chunks]: this CTA's queries per chunk, then cursor
  int32_t* base = run_shared + a.chunks;  // [chunks]: this CTA's first row in each run
  __shared__ int32_t warp_prefix[kRunThreads / 32];
  __shared__ int32_t block_base;
  const int64_t pair = blockIdx.y, s = int64_t(blockIdx.x) * kRunThreads + threadIdx.x;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const bool valid = s < a.slots;
  for (int64_t c = threadIdx.x; c < a.chunks; c += kRunThreads) local[c] = 0;
  const uint32_t* mine = a.chosen + (pair * a.slots + (valid ? s : 0)) * words;
  int count = 0;
  if (valid)
    for (int w = 0; w < words; ++w) count += __popc(mine[w]);
  // Entries: an exclusive scan over the CTA, one atomic for the CTA's place among all entries.
  int inclusive = count;
  for (int offset = 1; offset < 32; offset *= 2) {
    const int before = __shfl_up_sync(kFull, inclusive, offset);
    if (lane >= offset) inclusive += before;
  }
  if (lane == 31) warp_prefix[warp] = inclusive;
  __syncthreads();
  if (threadIdx.x == 0) {
    int running = 0;
    for (int w = 0; w < kRunThreads / 32; ++w) {
      const int sum = warp_prefix[w];
      warp_prefix[w] = running;
      running += sum;
    }
    block_base = running ? atomicAdd(a.entry_total, running) : 0;
  }
  __syncthreads();
  const int offset = block_base + warp_prefix[warp] + inclusive - count;
  if (valid) {
    a.entry_offset[pair * a.slots + s] = offset;
    for (int w = 0; w < words; ++w)
      for (uint32_t bits = mine[w]; bits; bits &= bits - 1)
        atomicAdd(&local[w * 32 + __ffs(bits) - 1], 1);
  }
  __syncthreads();
  for (int64_t c = threadIdx.x; c < a.chunks; c += kRunThreads) {
    base[c] = local[c] ? atomicAdd(&a.cursor[pair * a.chunks + c], local[c]) : 0;
    local[c] = 0;
  }
  __syncthreads();
  if (!valid) return;
  int entry = offset;
  for (int w = 0; w < words; ++w)
    for (uint32_t bits = mine[w]; bits; bits &= bits - 1) {
      const int c = w * 32 + __ffs(bits) - 1;
      const int row = a.run_start[pair * a.chunks + c] + base[c] + atomicAdd(&local[c], 1);
      a.entry_rows[entry++] = row;
      a.slot_of_row[pair * a.rows + row] = int32_t(s);
    }
}

__global__ void expert_lists_kernel(const int32_t* run_end, int64_t pairs, int64_t chunks,
                                    int64_t halves, int64_t blocks, int32_t* offsets,
                                    int32_t* indices) {
  const int64_t item = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (item > pairs * halves) return;
  offsets[item] = int32_t(item * blocks);
  if (item == pairs * halves) return;
  const int64_t pair = item / halves, row = (item % halves) * 64;
  const int32_t* ends = run_end + pair * chunks;
  // The first chunk whose run ends past the row (ends are non-decreasing).
  int64_t low = 0, high = chunks;
  while (low < high) {
    const int64_t middle = (low + high) / 2;
    if (ends[middle] > row)
      high = middle;
    else
      low = middle + 1;
  }
  const int64_t chunk = low < chunks ? low : 0;
  for (int64_t j = 0; j < blocks; ++j) indices[item * blocks + j] = int32_t(chunk * blocks + j);
}

__global__ void gather_rows_kernel(const uint4* x, uint4* gathered, const int32_t* slot_of_row,
                                   int64_t batch, int64_t slots, int64_t rows, int64_t heads,
                                   int64_t head_dim) {
  const int64_t vectors = heads * head_dim / 8;  // 16-byte vectors per row
  const int64_t item = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (item >= batch * rows * vectors) return;
  const int64_t row = item / vectors, v = item % vectors, b = row / rows, r = row % rows;
  const int64_t h = v * 8 / head_dim;
  const int32_t slot = slot_of_row[(b * heads + h) * rows + r];
  gathered[item] = slot < 0 ? make_uint4(0, 0, 0, 0) : x[(b * slots + slot) * vectors + v];
}

template <int PerLane>
__global__ void merge_kernel(VmobaMergeArgs a, int words) {
  const int64_t warp_index = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (warp_index >= a.batch * a.slots * a.heads) return;
  const int64_t h = warp_index % a.heads, s = (warp_index / a.heads) % a.slots,
                b = warp_index / (a.heads * a.slots);
  const int32_t token = a.token_of_slot[s];
  if (token < 0) return;
  const int64_t width = a.heads * a.head_dim, pair = b * a.heads + h;
  const int64_t column = h * a.head_dim + lane * PerLane;
  const uint16_t* own = static_cast<const uint16_t*>(a.own) + (b * a.slots + s) * width + column;
  float value[PerLane];
#pragma unroll
  for (int i = 0; i < PerLane; ++i) value[i] = bf16_value(own[i]);
  float lse = a.own_lse[pair * a.slots + s];
  const uint32_t* mine = a.chosen + (pair * a.slots + s) * words;
  int count = 0;
  for (int w = 0; w < words; ++w) count += __popc(mine[w]);
  const int32_t* rows = count ? a.entry_rows + a.entry_offset[pair * a.slots + s] : nullptr;
  for (int j = 0; j < count; ++j) {
    const int64_t r = rows[j];
    const float other = a.expert_lse[pair * a.rows + r];
    const float top = fmaxf(lse, other);
    if (top == -INFINITY) continue;
    const float wa = expf(lse - top), wb = expf(other - top), inverse = 1.0f / (wa + wb);
    const uint16_t* part =
        static_cast<const uint16_t*>(a.expert) + (b * a.rows + r) * width + column;
#pragma unroll
    for (int i = 0; i < PerLane; ++i)
      value[i] = (wa * value[i] + wb * bf16_value(part[i])) * inverse;
    lse = top + logf(wa + wb);
  }
  uint16_t* out = static_cast<uint16_t*>(a.out) + (b * a.tokens + token) * width + column;
#pragma unroll
  for (int i = 0; i < PerLane; ++i) out[i] = bf16_bits(value[i]);
}

unsigned blocks_for(int64_t items, int threads) {
  return unsigned((items + threads - 1) / threads);
}

}  // namespace

void vmoba_split_means(const void* x, uint16_t* parts, int64_t rows, int64_t batch, int64_t chunks,
                       int64_t stride, int64_t heads, int64_t head_dim, const int32_t* lengths,
                       cudaStream_t stream) {
  check(head_dim % 2 == 0, "vmoba_split_means: odd head size {}", head_dim);
  if (batch * chunks == 0) return;
  const dim3 grid(unsigned(chunks), unsigned(batch), blocks_for(heads * head_dim, kMeanColumns));
  split_means_kernel<<<grid, kMeanWarps * 32, 0, stream>>>(
      static_cast<const uint16_t*>(x), parts, rows, chunks, stride, heads, head_dim, lengths);
  MMGEN_CUDA_CHECK_LAUNCH();
}

void vmoba_tripled_queries(const void* x, uint16_t* y, int64_t b, int64_t h, int64_t slots,
                           int64_t heads, int64_t head_dim, cudaStream_t stream) {
  if (slots == 0) return;
  tripled_queries_kernel<<<blocks_for(slots * head_dim, 256), 256, 0, stream>>>(
      static_cast<const uint16_t*>(x), y, b, h, slots, heads, head_dim);
  MMGEN_CUDA_CHECK_LAUNCH();
}

int64_t vmoba_max_chunks() {
  return kMaxChunks;
}

void vmoba_select(const VmobaSelectArgs& args, cudaStream_t stream) {
  check(args.chunks >= 1 && args.chunks <= kMaxChunks,
        "vmoba_attn on the GPU: {} chunks; its selection kernel takes 1 to {}", args.chunks,
        kMaxChunks);
  check(args.score_stride >= args.chunks,
        "vmoba_attn on the GPU: score rows shorter than the chunks");
  if (args.slots == 0) return;
  static const bool configured = [] {
    MMGEN_CUDA_CHECK(cudaFuncSetAttribute(select_kernel,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          int(select_shared_bytes(kMaxChunks))));
    return true;
  }();
  (void)configured;
  const int64_t per_block = kSelectWarps * kQueriesPerWarp;
  check(args.pairs >= 1 && args.pairs <= 65535, "vmoba_attn on the GPU: {} pairs in one selection",
        args.pairs);
  select_kernel<<<dim3(blocks_for(args.slots, int(per_block)), unsigned(args.pairs)),
                  kSelectWarps * 32, select_shared_bytes(args.chunks), stream>>>(
      args, int(vmoba_mask_words(args.chunks)));
  MMGEN_CUDA_CHECK_LAUNCH();
}

void vmoba_runs(const VmobaRunsArgs& args, cudaStream_t stream) {
  if (args.pairs * args.slots == 0) return;
  static const bool configured = [] {
    MMGEN_CUDA_CHECK(cudaFuncSetAttribute(runs_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          int(2 * kMaxChunks * sizeof(int32_t))));
    return true;
  }();
  (void)configured;
  const dim3 grid(blocks_for(args.slots, kRunThreads), unsigned(args.pairs));
  runs_kernel<<<grid, kRunThreads, 2 * args.chunks * sizeof(int32_t), stream>>>(
      args, int(vmoba_mask_words(args.chunks)));
  MMGEN_CUDA_CHECK_LAUNCH();
}

void vmoba_expert_lists(const int32_t* run_end, int64_t pairs, int64_t chunks, int64_t halves,
                        int64_t blocks, int32_t* offsets, int32_t* indices, cudaStream_t stream) {
  expert_lists_kernel<<<blocks_for(pairs * halves + 1, 256), 256, 0, stream>>>(
      run_end, pairs, chunks, halves, blocks, offsets, indices);
  MMGEN_CUDA_CHECK_LAUNCH();
}

void vmoba_gather_rows(const void* x, void* gathered, const int32_t* slot_of_row, int64_t batch,
                       int64_t slots, int64_t rows, int64_t heads, int64_t head_dim,
                       cudaStream_t stream) {
  const int64_t items = batch * rows * heads * head_dim / 8;
  if (items == 0) return;
  gather_rows_kernel<<<blocks_for(items, 256), 256, 0, stream>>>(
      static_cast<const uint4*>(x), static_cast<uint4*>(gathered), slot_of_row, batch, slots, rows,
      heads, head_dim);
  MMGEN_CUDA_CHECK_LAUNCH();
}

void vmoba_merge(const VmobaMergeArgs& args, cudaStream_t stream) {
  check(args.head_dim == 64 || args.head_dim == 128,
        "vmoba_attn on the GPU: head size {} (64 and 128 are compiled in)", args.head_dim);
  const int64_t threads = args.batch * args.slots * args.heads * 32;
  if (threads == 0) return;
  const int words = int(vmoba_mask_words(args.chunks));
  if (args.head_dim == 64)
    merge_kernel<2><<<blocks_for(threads, 256), 256, 0, stream>>>(args, words);
  else
    merge_kernel<4><<<blocks_for(threads, 256), 256, 0, stream>>>(args, words);
  MMGEN_CUDA_CHECK_LAUNCH();
}

}  // namespace mmgen::cuda
