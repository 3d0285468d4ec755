// Paged-attention kernels (see paged_kernels.h). Scores are kept in the log2 domain: the query is
// scaled by scale·log2(e) and the bias by log2(e), so the softmax uses exp2.
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

#include "attention/cuda/device_helpers.cuh"
#include "attention/paged/cuda/paged_kernels.h"
#include "core/cuda/cuda_check.h"

namespace mmgen::cuda::paged {
namespace {

using bf16 = __nv_bfloat16;
using namespace mmgen::cuda::device;

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kRowUnroll = 4;

// The key positions query position qp of request r sees: [lo, hi) (empty when lo ≥ hi).
__device__ __forceinline__ void visible_keys(const PagedAttentionParams& p, int r, int64_t qp,
                                             int64_t& lo, int64_t& hi) {
  lo = p.kv_pos0 ? p.kv_pos0[r] : 0;
  hi = lo + p.kv_len[r];
  if (p.valid_len) hi = min(hi, int64_t(p.valid_len[r]));
  if (p.causal) {
    hi = min(hi, qp + 1);
    if (p.window >= 0) lo = max(lo, qp - p.window);
  } else if (p.window >= 0) {
    lo = max(lo, qp - p.window);
    hi = min(hi, qp + p.window + 1);
  }
  if (p.chunk_len > 0) {  // dual chunk attention: one region of the query's chunk
    const int64_t chunk0 = qp / p.chunk_len * p.chunk_len;
    if (p.chunk_region == 0) {
      lo = max(lo, chunk0);
    } else if (p.chunk_region == 1) {
      lo = max(lo, chunk0 - p.chunk_len);
      hi = min(hi, chunk0);
    } else {
      hi = min(hi, chunk0 - p.chunk_len);
    }
  }
}

// Dual chunk attention's per-request multiplier of the scores (1 without it).
__device__ __forceinline__ float length_scale(const PagedAttentionParams& p, int r) {
  if (p.length_scale_base <= 0.0f) return 1.0f;
  return fmaxf(1.0f, 0.1f * logf(float(p.seq_len[r]) / p.length_scale_base) + 1.0f);
}

// The row (in the packed tokens or the pool) of key position `pos` of request r.
__device__ __forceinline__ int64_t key_row(const PagedAttentionParams& p, int r, int64_t pos) {
  switch (p.source) {
    case KeySource::Packed:
      return p.kv_start[r] + (pos - (p.kv_pos0 ? p.kv_pos0[r] : 0));
    case KeySource::Slots:
    case KeySource::PrefixThenPacked:  // (its prefix part)
      return p.indices[p.kv_start[r] + (pos - (p.kv_pos0 ? p.kv_pos0[r] : 0))];
    case KeySource::Pages:
    default:
      return int64_t(p.indices[int64_t(r) * p.max_pages + pos / p.page_size]) * p.page_size +
             pos % p.page_size;
  }
}

// Where key position `pos` of request r starts its K and V rows, at `column`.
template <typename T>
__device__ __forceinline__ void key_value_at(const PagedAttentionParams& p, int r, int64_t pos,
                                             int64_t column, const T*& key, const T*& value) {
  if (p.source == KeySource::PrefixThenPacked && pos >= p.q_pos0[r]) {
    const int64_t row = p.q_start[r] + (pos - p.q_pos0[r]);
    key = static_cast<const T*>(p.k_new) + row * p.k_new_stride + column;
    value = static_cast<const T*>(p.v_new) + row * p.v_new_stride + column;
    return;
  }
  const int64_t row = key_row(p, r, pos);
  key = static_cast<const T*>(p.k) + row * p.k_stride + column;
  value = static_cast<const T*>(p.v) + row * p.v_stride + column;
}

__device__ __forceinline__ float bias_log2(const PagedAttentionParams& p, int head,
                                           int64_t offset) {
  return __ldg(p.bias + head * (2 * p.bias_max_len - 1) + offset + p.bias_max_len - 1) * kLog2e;
}

__device__ __forceinline__ void unpack8(const uint4& raw, float (&out)[8]) {
  const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __bfloat1622float2(pairs[i]);
    out[2 * i] = f.x;
    out[2 * i + 1] = f.y;
  }
}

// Eight consecutive elements of a row, as loaded (one 16-byte load of bf16, two of float).
template <typename T>
struct Vec8;
template <>
struct Vec8<bf16> {
  uint4 raw = make_uint4(0, 0, 0, 0);
  __device__ __forceinline__ void load(const bf16* p) { raw = *reinterpret_cast<const uint4*>(p); }
  __device__ __forceinline__ void unpack(float (&out)[8]) const { unpack8(raw, out); }
};
template <>
struct Vec8<float> {
  float4 a = make_float4(0, 0, 0, 0), b = make_float4(0, 0, 0, 0);
  __device__ __forceinline__ void load(const float* p) {
    a = *reinterpret_cast<const float4*>(p);
    b = *reinterpret_cast<const float4*>(p + 4);
  }
  __device__ __forceinline__ void unpack(float (&out)[8]) const {
    out[0] = a.x, out[1] = a.y, out[2] = a.z, out[3] = a.w;
    out[4] = b.x, out[5] = b.y, out[6] = b.z, out[7] = b.w;
  }
};

__device__ __forceinline__ void store_value(bf16* p, float value) {
  *p = __float2bfloat16_rn(value);
}
__device__ __forceinline__ void store_value(float* p, float value) {
  *p = value;
}

// ------------------------------------------------------------------ tile kernel

constexpr int kTileM = kPagedTileQueries;  // 4 warps x 16 query rows
constexpr int kTileN = 64;                 // keys per block
constexpr int kNTiles = kTileN / 8;

template <int D>
__device__ __forceinline__ int swizzled(int row, int chunk) {
  return row * D + ((chunk ^ (row & 7)) << 3);
}

// Query rows [0, count) of the tile from token0 on; the rest become zeros.
template <int D>
__device__ __forceinline__ void load_queries(bf16* tile, const PagedAttentionParams& p,
                                             int64_t token0, int count, int head, int thread) {
  constexpr int kChunks = D / 8;
  const bf16* q = static_cast<const bf16*>(p.q);
#pragma unroll
  for (int i = 0; i < kTileM * kChunks / kThreads; ++i) {
    const int index = i * kThreads + thread;
    const int row = index / kChunks, chunk = index % kChunks;
    const bool valid = row < count;
    const bf16* source = valid ? q + (token0 + row) * p.q_stride + head * D + chunk * 8 : q;
    copy_16_async(shared_address(tile + swizzled<D>(row, chunk)), source, valid);
  }
}

// Key and value rows of positions start .. start + kTileN − 1 (those < end) of request r.
template <int D>
__device__ __forceinline__ void load_keys(bf16* tile_k, bf16* tile_v, const PagedAttentionParams& p,
                                          int r, int64_t start, int64_t end, int kv_head,
                                          int thread) {
  constexpr int kChunks = D / 8;
  const bf16* k = static_cast<const bf16*>(p.k);
  const bf16* v = static_cast<const bf16*>(p.v);
#pragma unroll
  for (int i = 0; i < kTileN * kChunks / kThreads; ++i) {
    const int index = i * kThreads + thread;
    const int row = index / kChunks, chunk = index % kChunks;
    const int64_t pos = start + row;
    const bool valid = pos < end;
    const bf16* key = k;
    const bf16* value = v;
    if (valid) key_value_at(p, r, pos, int64_t(kv_head) * D + chunk * 8, key, value);
    copy_16_async(shared_address(tile_k + swizzled<D>(row, chunk)), key, valid);
    copy_16_async(shared_address(tile_v + swizzled<D>(row, chunk)), value, valid);
  }
}

template <int D>
__global__ void __launch_bounds__(kThreads) paged_tiles_kernel(const PagedAttentionParams p) {
  extern __shared__ __align__(128) unsigned char shared_bytes[];
  bf16* shared_q = reinterpret_cast<bf16*>(shared_bytes);
  bf16* shared_k = shared_q + kTileM * D;  // two buffers each
  bf16* shared_v = shared_k + 2 * kTileN * D;

  const int r = p.tiles[2 * blockIdx.x], first = p.tiles[2 * blockIdx.x + 1];
  const int head = blockIdx.y, kv_head = head / int(p.group);
  const int thread = threadIdx.x, warp = thread / 32, lane = thread % 32;
  const int count = min(kTileM, p.q_len[r] - first);
  const int64_t token0 = int64_t(p.q_start[r]) + first;
  const int64_t qp0 = int64_t(p.q_pos0[r]) + first;

  // Both ends of a query's visible interval grow with its position.
  int64_t span_lo, span_hi, unused;
  visible_keys(p, r, qp0, span_lo, unused);
  visible_keys(p, r, qp0 + count - 1, unused, span_hi);
  const int blocks = span_hi > span_lo ? int((span_hi - span_lo + kTileN - 1) / kTileN) : 0;

  // This thread's two query rows (lane/4 and lane/4 + 8 of its warp's 16): position and interval.
  int64_t row_qp[2], row_lo[2], row_hi[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    row_qp[half] = qp0 + warp * 16 + (lane >> 2) + half * 8;
    visible_keys(p, r, row_qp[half], row_lo[half], row_hi[half]);
  }

  load_queries<D>(shared_q, p, token0, count, head, thread);
  if (blocks > 0) load_keys<D>(shared_k, shared_v, p, r, span_lo, span_hi, kv_head, thread);
  commit_copies();

  float acc[D / 8][4];
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};
#pragma unroll
  for (int dn = 0; dn < D / 8; ++dn)
#pragma unroll
    for (int c = 0; c < 4; ++c) acc[dn][c] = 0.0f;
  const float scale_log2 = p.scale * length_scale(p, r) * kLog2e;

  for (int j = 0; j < blocks; ++j) {
    const int buffer = j & 1;
    const int64_t start = span_lo + int64_t(j) * kTileN;
    wait_copies();
    __syncthreads();  // block j has landed, and every warp is done with the other buffer
    if (j + 1 < blocks)
      load_keys<D>(shared_k + (buffer ^ 1) * kTileN * D, shared_v + (buffer ^ 1) * kTileN * D, p, r,
                   start + kTileN, span_hi, kv_head, thread);
    commit_copies();
    const bf16* tile_k = shared_k + buffer * kTileN * D;
    const bf16* tile_v = shared_v + buffer * kTileN * D;

    // S = Q Kᵀ for this warp's 16 rows and the block's 64 keys.
    float scores[kNTiles][4];
#pragma unroll
    for (int ni = 0; ni < kNTiles; ++ni)
#pragma unroll
      for (int c = 0; c < 4; ++c) scores[ni][c] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
      uint32_t a[4];
      load_matrix_x4(
          shared_address(shared_q + swizzled<D>(warp * 16 + (lane & 15), ks * 2 + (lane >> 4))),
          a[0], a[1], a[2], a[3]);
#pragma unroll
      for (int np = 0; np < kNTiles / 2; ++np) {
        const int row = np * 16 + (lane & 7) + ((lane >> 4) << 3);
        uint32_t b0, b1, b2, b3;
        load_matrix_x4(shared_address(tile_k + swizzled<D>(row, ks * 2 + ((lane >> 3) & 1))), b0,
                       b1, b2, b3);
        mma_16x8x16(scores[2 * np], a, b0, b1);
        mma_16x8x16(scores[2 * np + 1], a, b2, b3);
      }
    }

    // Scale, bias and visibility, then the online softmax per row.
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      float block_max = -INFINITY;
#pragma unroll
      for (int ni = 0; ni < kNTiles; ++ni)
#pragma unroll
        for (int c = 2 * half; c < 2 * half + 2; ++c) {
          const int64_t kp = start + ni * 8 + 2 * (lane & 3) + (c & 1);
          float s = -INFINITY;
          if (kp >= row_lo[half] && kp < row_hi[half]) {
            s = scores[ni][c] * scale_log2;
            if (p.bias) s += bias_log2(p, head, kp - row_qp[half]);
          }
          scores[ni][c] = s;
          block_max = fmaxf(block_max, s);
        }
      block_max = fmaxf(block_max, __shfl_xor_sync(0xffffffffu, block_max, 1));
      block_max = fmaxf(block_max, __shfl_xor_sync(0xffffffffu, block_max, 2));
      const float new_max = fmaxf(row_max[half], block_max);
      // A row that has seen only masked keys keeps -inf; 0 as offset avoids inf - inf.
      const float offset = new_max == -INFINITY ? 0.0f : new_max;
      const float correction = exp2f(row_max[half] - offset);
      row_max[half] = new_max;
      row_sum[half] *= correction;
#pragma unroll
      for (int dn = 0; dn < D / 8; ++dn) {
        acc[dn][2 * half] *= correction;
        acc[dn][2 * half + 1] *= correction;
      }
#pragma unroll
      for (int ni = 0; ni < kNTiles; ++ni)
#pragma unroll
        for (int c = 2 * half; c < 2 * half + 2; ++c) {
          const float e = exp2f(scores[ni][c] - offset);
          scores[ni][c] = e;
          row_sum[half] += e;
        }
    }

    // O += P V: the score accumulators are already laid out as the A operand of the next MMA.
#pragma unroll
    for (int ks = 0; ks < kTileN / 16; ++ks) {
      uint32_t a[4];
      a[0] = pack_bf16x2(scores[2 * ks][0], scores[2 * ks][1]);
      a[1] = pack_bf16x2(scores[2 * ks][2], scores[2 * ks][3]);
      a[2] = pack_bf16x2(scores[2 * ks + 1][0], scores[2 * ks + 1][1]);
      a[3] = pack_bf16x2(scores[2 * ks + 1][2], scores[2 * ks + 1][3]);
#pragma unroll
      for (int dp = 0; dp < D / 16; ++dp) {
        const int row = ks * 16 + (lane & 7) + (((lane >> 3) & 1) << 3);
        uint32_t b0, b1, b2, b3;
        load_matrix_x4_transposed(shared_address(tile_v + swizzled<D>(row, dp * 2 + (lane >> 4))),
                                  b0, b1, b2, b3);
        mma_16x8x16(acc[2 * dp], a, b0, b1);
        mma_16x8x16(acc[2 * dp + 1], a, b2, b3);
      }
    }
  }
  wait_copies();

  bf16* out = static_cast<bf16*>(p.out);
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    float sum = row_sum[half];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    const float inverse = sum > 0.0f ? 1.0f / sum : 0.0f;
    const int row = warp * 16 + (lane >> 2) + half * 8;
    if (row >= count) continue;
    bf16* out_row = out + (token0 + row) * p.out_stride + head * D;
#pragma unroll
    for (int dn = 0; dn < D / 8; ++dn) {
      const int column = dn * 8 + 2 * (lane & 3);
      *reinterpret_cast<uint32_t*>(out_row + column) =
          pack_bf16x2(acc[dn][2 * half] * inverse, acc[dn][2 * half + 1] * inverse);
    }
    if (p.lse && (lane & 3) == 0)
      p.lse[(token0 + row) * p.num_q_heads + head] =
          sum > 0.0f ? (row_max[half] + log2f(sum)) * kLn2 : -INFINITY;
  }
}

// ------------------------------------------------------------------ row kernel

// One CTA per (token, query head, split). Lane groups of D/8 lanes each take one key at a time
// (every lane 8 dimensions, one 16-byte load of K and of V); groups keep their own running max,
// sum and accumulator, merged across the warp by shuffles and across warps through shared memory.
template <int D, typename T>
__global__ void __launch_bounds__(kThreads)
    paged_rows_kernel(const PagedAttentionParams p, int max_splits, float* partial_out,
                      float* partial_lse) {
  constexpr int kLanesPerKey = D / 8;
  constexpr int kGroupsPerWarp = 32 / kLanesPerKey;
  constexpr int kGroups = kWarps * kGroupsPerWarp;
  __shared__ float shared_acc[kWarps][D];
  __shared__ float shared_max[kWarps], shared_sum[kWarps];

  const int64_t token = blockIdx.x;
  const int head = blockIdx.y, split = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int sub = lane % kLanesPerKey, group = warp * kGroupsPerWarp + lane / kLanesPerKey;
  const int r = p.token_request[token];
  const int64_t qp = int64_t(p.q_pos0[r]) + (token - p.q_start[r]);
  const int kv_head = head / int(p.group);

  int64_t lo, hi;
  visible_keys(p, r, qp, lo, hi);
  const int64_t keys = hi > lo ? hi - lo : 0;
  int splits = 1;
  if (max_splits > 1)
    splits = int(min(int64_t(max_splits),
                     max(int64_t(1), (keys + kPagedSplitMinKeys - 1) / kPagedSplitMinKeys)));
  const int64_t per_split = (keys + splits - 1) / splits;
  const int64_t begin = split < splits ? lo + split * per_split : hi;
  const int64_t end = split < splits ? min(hi, begin + per_split) : hi;

  float q[8], acc[8];
  {
    Vec8<T> raw;
    raw.load(static_cast<const T*>(p.q) + token * p.q_stride + head * D + sub * 8);
    raw.unpack(q);
    const float factor = p.scale * length_scale(p, r) * kLog2e;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      q[i] *= factor;
      acc[i] = 0.0f;
    }
  }
  float running_max = -INFINITY, running_sum = 0.0f;
  const int64_t column = int64_t(kv_head) * D + sub * 8;
  // kRowUnroll keys per group and iteration, their loads issued before any is used: a decode
  // split is latency-bound (page-table read, then the row), so independent loads must overlap.
  // Every lane runs the same number of iterations (the shuffles need the whole warp).
  for (int64_t base = begin; base < end; base += int64_t(kGroups) * kRowUnroll) {
    Vec8<T> key_raw[kRowUnroll], value_raw[kRowUnroll];
    bool valid[kRowUnroll];
#pragma unroll
    for (int u = 0; u < kRowUnroll; ++u) {
      const int64_t pos = base + group + u * kGroups;
      valid[u] = pos < end;
      if (valid[u]) {
        const T* key;
        const T* value;
        key_value_at(p, r, pos, column, key, value);
        key_raw[u].load(key);
        value_raw[u].load(value);
      }
    }
    float dot[kRowUnroll];
#pragma unroll
    for (int u = 0; u < kRowUnroll; ++u) {
      float key_values[8];
      key_raw[u].unpack(key_values);
      dot[u] = 0.0f;
#pragma unroll
      for (int i = 0; i < 8; ++i) dot[u] = fmaf(q[i], key_values[i], dot[u]);
    }
#pragma unroll
    for (int offset = kLanesPerKey / 2; offset > 0; offset /= 2)
#pragma unroll
      for (int u = 0; u < kRowUnroll; ++u) dot[u] += __shfl_xor_sync(0xffffffffu, dot[u], offset);
    float block_max = -INFINITY;
#pragma unroll
    for (int u = 0; u < kRowUnroll; ++u) {
      if (!valid[u]) continue;
      if (p.bias) dot[u] += bias_log2(p, head, base + group + u * kGroups - qp);
      block_max = fmaxf(block_max, dot[u]);
    }
    if (block_max == -INFINITY) continue;  // no shuffle follows in this iteration
    const float new_max = fmaxf(running_max, block_max);
    const float correction = exp2f(running_max - new_max);
    running_sum *= correction;
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[i] *= correction;
#pragma unroll
    for (int u = 0; u < kRowUnroll; ++u) {
      if (!valid[u]) continue;
      const float e = exp2f(dot[u] - new_max);
      running_sum += e;
      float values[8];
      value_raw[u].unpack(values);
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[i] = fmaf(e, values[i], acc[i]);
    }
    running_max = new_max;
  }

  // Merge the lane groups of this warp (lanes with the same `sub` hold the same dimensions).
#pragma unroll
  for (int offset = kLanesPerKey; offset < 32; offset *= 2) {
    const float other_max = __shfl_xor_sync(0xffffffffu, running_max, offset);
    const float other_sum = __shfl_xor_sync(0xffffffffu, running_sum, offset);
    float other_acc[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) other_acc[i] = __shfl_xor_sync(0xffffffffu, acc[i], offset);
    const float new_max = fmaxf(running_max, other_max);
    if (new_max == -INFINITY) continue;
    const float mine = exp2f(running_max - new_max), theirs = exp2f(other_max - new_max);
    running_sum = running_sum * mine + other_sum * theirs;
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[i] = acc[i] * mine + other_acc[i] * theirs;
    running_max = new_max;
  }
  if (lane < kLanesPerKey) {
#pragma unroll
    for (int i = 0; i < 8; ++i) shared_acc[warp][sub * 8 + i] = acc[i];
    if (lane == 0) {
      shared_max[warp] = running_max;
      shared_sum[warp] = running_sum;
    }
  }
  __syncthreads();
  if (warp != 0 || lane >= kLanesPerKey) return;
  float total_max = -INFINITY;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) total_max = fmaxf(total_max, shared_max[w]);
  float total_sum = 0.0f, result[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  if (total_max != -INFINITY) {
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float weight = exp2f(shared_max[w] - total_max);
      total_sum += shared_sum[w] * weight;
#pragma unroll
      for (int i = 0; i < 8; ++i) result[i] += shared_acc[w][sub * 8 + i] * weight;
    }
  }
  const float inverse = total_sum > 0.0f ? 1.0f / total_sum : 0.0f;
  const float lse = total_sum > 0.0f ? (total_max + log2f(total_sum)) * kLn2 : -INFINITY;
  if (max_splits > 1) {
    const int64_t entry = (token * p.num_q_heads + head) * max_splits + split;
#pragma unroll
    for (int i = 0; i < 8; ++i) partial_out[entry * D + sub * 8 + i] = result[i] * inverse;
    if (lane == 0) partial_lse[entry] = lse;
    return;
  }
  T* out = static_cast<T*>(p.out) + token * p.out_stride + head * D + sub * 8;
#pragma unroll
  for (int i = 0; i < 8; ++i) store_value(out + i, result[i] * inverse);
  if (p.lse && lane == 0) p.lse[token * p.num_q_heads + head] = lse;
}

// ------------------------------------------------------------------ latent (MLA) row kernel

// Absorbed multi-head latent attention: one KV head whose rows are the latent (kLatent values,
// also the V) and the rotary part (kRope). One CTA per (token, query head, split); each warp takes
// every fourth key, its lanes holding chunks (8 values) `lane` and `lane + 32` of the latent and,
// lanes 0-7, chunk `lane` of the rotary part: one 16-byte load of each per key gives the score
// (a warp reduction) and the V row at once. Warps keep their own running max, sum and
// accumulator, merged through shared memory. A correctness-first kernel (no tensor cores, heads
// of one token read the same rows through L1/L2), not FlashMLA's speed.
constexpr int kLatent = 512, kRope = 64, kLatentChunks = kLatent / 8 / 32;  // 2 per lane

__global__ void __launch_bounds__(kThreads)
    paged_latent_kernel(const PagedAttentionParams p, int max_splits, float* partial_out,
                        float* partial_lse) {
  __shared__ float shared_acc[kWarps][kLatent];
  __shared__ float shared_max[kWarps], shared_sum[kWarps];
  const int64_t token = blockIdx.x;
  const int head = blockIdx.y, split = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int r = p.token_request[token];
  const int64_t qp = int64_t(p.q_pos0[r]) + (token - p.q_start[r]);

  int64_t lo, hi;
  visible_keys(p, r, qp, lo, hi);
  const int64_t keys = hi > lo ? hi - lo : 0;
  int splits = 1;
  if (max_splits > 1)
    splits = int(min(int64_t(max_splits),
                     max(int64_t(1), (keys + kPagedSplitMinKeys - 1) / kPagedSplitMinKeys)));
  const int64_t per_split = (keys + splits - 1) / splits;
  const int64_t begin = split < splits ? lo + split * per_split : hi;
  const int64_t end = split < splits ? min(hi, begin + per_split) : hi;

  // This lane's query values, scaled into the log2 domain: latent chunks lane, lane + 32; rope
  // chunk lane (lanes 0-7).
  const bf16* q = static_cast<const bf16*>(p.q) + token * p.q_stride + head * (kLatent + kRope);
  const float factor = p.scale * length_scale(p, r) * kLog2e;
  float q_latent[kLatentChunks][8], q_rope[8];
#pragma unroll
  for (int c = 0; c < kLatentChunks; ++c) {
    unpack8(*reinterpret_cast<const uint4*>(q + (lane + 32 * c) * 8), q_latent[c]);
#pragma unroll
    for (int i = 0; i < 8; ++i) q_latent[c][i] *= factor;
  }
  const bool rope_lane = lane < kRope / 8;
  if (rope_lane) unpack8(*reinterpret_cast<const uint4*>(q + kLatent + lane * 8), q_rope);
#pragma unroll
  for (int i = 0; i < 8; ++i) q_rope[i] = rope_lane ? q_rope[i] * factor : 0.0f;

  float running_max = -INFINITY, running_sum = 0.0f, acc[kLatentChunks][8] = {};
  for (int64_t pos = begin + warp; pos < end; pos += kWarps) {
    const bf16* row = static_cast<const bf16*>(p.k) + key_row(p, r, pos) * p.k_stride;
    float k[kLatentChunks][8], score = 0.0f;
#pragma unroll
    for (int c = 0; c < kLatentChunks; ++c) {
      unpack8(*reinterpret_cast<const uint4*>(row + (lane + 32 * c) * 8), k[c]);
#pragma unroll
      for (int i = 0; i < 8; ++i) score += q_latent[c][i] * k[c][i];
    }
    if (rope_lane) {
      float rope[8];
      unpack8(*reinterpret_cast<const uint4*>(row + kLatent + lane * 8), rope);
#pragma unroll
      for (int i = 0; i < 8; ++i) score += q_rope[i] * rope[i];
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2)
      score += __shfl_xor_sync(0xffffffffu, score, offset);
    const float new_max = fmaxf(running_max, score);
    const float correction = exp2f(running_max - new_max), weight = exp2f(score - new_max);
    running_sum = running_sum * correction + weight;
#pragma unroll
    for (int c = 0; c < kLatentChunks; ++c)
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[c][i] = acc[c][i] * correction + weight * k[c][i];
    running_max = new_max;
  }

  // Merge the warps: each scales its state to the CTA's maximum.
  if (lane == 0) shared_max[warp] = running_max;
  __syncthreads();
  float total_max = -INFINITY;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) total_max = fmaxf(total_max, shared_max[w]);
  const float scale_warp = running_max == -INFINITY ? 0.0f : exp2f(running_max - total_max);
  if (lane == 0) shared_sum[warp] = running_sum * scale_warp;
#pragma unroll
  for (int c = 0; c < kLatentChunks; ++c)
#pragma unroll
    for (int i = 0; i < 8; ++i) shared_acc[warp][(lane + 32 * c) * 8 + i] = acc[c][i] * scale_warp;
  __syncthreads();
  float total_sum = 0.0f;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) total_sum += shared_sum[w];
  const float inverse = total_sum > 0.0f ? 1.0f / total_sum : 0.0f;
  const float lse = total_sum > 0.0f ? (total_max + log2f(total_sum)) * kLn2 : -INFINITY;
  const int64_t entry = (token * p.num_q_heads + head) * max_splits + split;
  bf16* out = static_cast<bf16*>(p.out) + token * p.out_stride + head * kLatent;
  for (int d = threadIdx.x; d < kLatent; d += kThreads) {
    float value = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) value += shared_acc[w][d];
    if (max_splits > 1)
      partial_out[entry * kLatent + d] = value * inverse;
    else
      out[d] = __float2bfloat16_rn(value * inverse);
  }
  if (threadIdx.x == 0) {
    if (max_splits > 1)
      partial_lse[entry] = lse;
    else if (p.lse)
      p.lse[token * p.num_q_heads + head] = lse;
  }
}

// One CTA of head_dim threads per (token, head): the LSE-weighted sum of the splits, in split
// order (the same bits whatever the batch around it).
template <typename T>
__global__ void merge_splits_kernel(const float* partial_out, const float* partial_lse,
                                    int max_splits, int64_t heads, int64_t head_dim, void* out,
                                    int64_t out_stride, float* lse) {
  const int64_t token = blockIdx.x, head = blockIdx.y;
  const int64_t entry = (token * heads + head) * max_splits;
  float total_max = -INFINITY;
  for (int s = 0; s < max_splits; ++s) total_max = fmaxf(total_max, partial_lse[entry + s]);
  float total = 0.0f, value = 0.0f;
  const int64_t d = threadIdx.x;
  if (total_max != -INFINITY)
    for (int s = 0; s < max_splits; ++s) {
      const float split_lse = partial_lse[entry + s];
      if (split_lse == -INFINITY) continue;
      const float weight = __expf(split_lse - total_max);
      total += weight;
      value += weight * partial_out[(entry + s) * head_dim + d];
    }
  T* row = static_cast<T*>(out) + token * out_stride + head * head_dim;
  store_value(row + d, total > 0.0f ? value / total : 0.0f);
  if (lse && d == 0) lse[token * heads + head] = total > 0.0f ? total_max + logf(total) : -INFINITY;
}

// ------------------------------------------------------------------ KV store and merges

__global__ void store_kv_kernel(const bf16* k, int64_t k_stride, const bf16* v, int64_t v_stride,
                                const int32_t* slots, int64_t n, bf16* pool_k, bf16* pool_v,
                                int64_t row_elems) {
  const int64_t chunks = row_elems / 8;
  const int64_t index = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (index >= n * chunks) return;
  const int64_t token = index / chunks, chunk = index % chunks;
  const int64_t slot = slots[token];
  *reinterpret_cast<uint4*>(pool_k + slot * row_elems + chunk * 8) =
      *reinterpret_cast<const uint4*>(k + token * k_stride + chunk * 8);
  if (!v) return;  // a keys-only pool (MLA's latent rows)
  *reinterpret_cast<uint4*>(pool_v + slot * row_elems + chunk * 8) =
      *reinterpret_cast<const uint4*>(v + token * v_stride + chunk * 8);
}

__global__ void merge_states_kernel(bf16* out_a, int64_t a_stride, const float* lse_a,
                                    const bf16* out_b, int64_t b_stride, const float* lse_b,
                                    int64_t tokens, int64_t heads, int64_t head_dim,
                                    float* lse_out) {
  const int64_t index = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (index >= tokens * heads * head_dim) return;
  const int64_t d = index % head_dim, th = index / head_dim, head = th % heads, token = th / heads;
  const float la = lse_a[th], lb = lse_b[th];
  if (lse_out && d == 0) {
    const float m = fmaxf(la, lb);
    lse_out[th] = m == -INFINITY ? -INFINITY : m + logf(__expf(la - m) + __expf(lb - m));
  }
  if (lb == -INFINITY) return;
  bf16* a = out_a + token * a_stride + head * head_dim + d;
  const float b = __bfloat162float(out_b[token * b_stride + head * head_dim + d]);
  if (la == -INFINITY) {
    *a = __float2bfloat16_rn(b);
    return;
  }
  const float m = fmaxf(la, lb), wa = __expf(la - m), wb = __expf(lb - m);
  *a = __float2bfloat16_rn((wa * __bfloat162float(*a) + wb * b) / (wa + wb));
}

template <int D>
void launch_tiles(const PagedAttentionParams& p, cudaStream_t stream) {
  constexpr int kSharedBytes = (kTileM + 4 * kTileN) * D * int(sizeof(bf16));
  auto kernel = paged_tiles_kernel<D>;
  static const bool configured = [&] {
    MMGEN_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSharedBytes));
    return true;
  }();
  (void)configured;
  const dim3 grid(unsigned(p.num_tiles), unsigned(p.num_q_heads));
  kernel<<<grid, kThreads, kSharedBytes, stream>>>(p);
  MMGEN_CUDA_CHECK_LAUNCH();
}

template <int D>
void launch_rows(const PagedAttentionParams& p, int max_splits, float* partial_out,
                 float* partial_lse, cudaStream_t stream) {
  const dim3 grid(unsigned(p.num_tokens), unsigned(p.num_q_heads), unsigned(max_splits));
  if (p.fp32)
    paged_rows_kernel<D, float>
        <<<grid, kThreads, 0, stream>>>(p, max_splits, partial_out, partial_lse);
  else
    paged_rows_kernel<D, bf16>
        <<<grid, kThreads, 0, stream>>>(p, max_splits, partial_out, partial_lse);
  MMGEN_CUDA_CHECK_LAUNCH();
}

}  // namespace

bool paged_tile_kernel_supports(int64_t head_dim) {
  return head_dim == 64 || head_dim == 128;
}

bool paged_row_kernel_supports(int64_t head_dim) {
  return head_dim == 8 || head_dim == 16 || head_dim == 32 || head_dim == 64 || head_dim == 128 ||
         head_dim == 256;
}

void paged_attention_tiles(const PagedAttentionParams& p, cudaStream_t stream) {
  if (p.num_tiles == 0) return;
  switch (p.head_dim) {
    case 64:
      return launch_tiles<64>(p, stream);
    case 128:
      return launch_tiles<128>(p, stream);
    default:
      check_cuda(cudaErrorInvalidValue, "paged_attention_tiles: head size not compiled", __FILE__,
                 __LINE__);
  }
}

bool paged_latent_kernel_supports(int64_t head_dim, int64_t value_dim) {
  return head_dim == kLatent + kRope && value_dim == kLatent;
}

void paged_attention_rows(const PagedAttentionParams& p, int64_t max_splits, float* partial_out,
                          float* partial_lse, cudaStream_t stream) {
  if (p.num_tokens == 0) return;
  const int splits = int(max_splits < 1 ? 1 : max_splits);
  const bool latent = p.v_dim > 0 && p.v_dim != p.head_dim;
  if (latent) {
    if (!paged_latent_kernel_supports(p.head_dim, p.v_dim) || p.fp32 || p.group != p.num_q_heads)
      check_cuda(cudaErrorInvalidValue,
                 "paged_attention_rows: the latent kernel takes bf16, one KV head, 512 + 64",
                 __FILE__, __LINE__);
    const dim3 grid(unsigned(p.num_tokens), unsigned(p.num_q_heads), unsigned(splits));
    paged_latent_kernel<<<grid, kThreads, 0, stream>>>(p, splits, partial_out, partial_lse);
    MMGEN_CUDA_CHECK_LAUNCH();
  } else {
    switch (p.head_dim) {
      case 8:
        launch_rows<8>(p, splits, partial_out, partial_lse, stream);
        break;
      case 16:
        launch_rows<16>(p, splits, partial_out, partial_lse, stream);
        break;
      case 32:
        launch_rows<32>(p, splits, partial_out, partial_lse, stream);
        break;
      case 64:
        launch_rows<64>(p, splits, partial_out, partial_lse, stream);
        break;
      case 128:
        launch_rows<128>(p, splits, partial_out, partial_lse, stream);
        break;
      case 256:
        launch_rows<256>(p, splits, partial_out, partial_lse, stream);
        break;
      default:
        check_cuda(cudaErrorInvalidValue, "paged_attention_rows: head size not compiled", __FILE__,
                   __LINE__);
    }
  }
  if (splits > 1) {
    const int64_t out_dim = latent ? p.v_dim : p.head_dim;
    const dim3 grid(unsigned(p.num_tokens), unsigned(p.num_q_heads));
    auto merge = p.fp32 ? merge_splits_kernel<float> : merge_splits_kernel<bf16>;
    merge<<<grid, unsigned(out_dim), 0, stream>>>(partial_out, partial_lse, splits, p.num_q_heads,
                                                  out_dim, p.out, p.out_stride, p.lse);
    MMGEN_CUDA_CHECK_LAUNCH();
  }
}

void store_kv(const void* k, int64_t k_stride, const void* v, int64_t v_stride,
              const int32_t* slots, int64_t n, void* pool_k, void* pool_v, int64_t row_elems,
              cudaStream_t stream) {
  if (n == 0) return;
  const int64_t total = n * (row_elems / 8);
  constexpr int kBlock = 256;
  store_kv_kernel<<<unsigned((total + kBlock - 1) / kBlock), kBlock, 0, stream>>>(
      static_cast<const bf16*>(k), k_stride, static_cast<const bf16*>(v), v_stride, slots, n,
      static_cast<bf16*>(pool_k), static_cast<bf16*>(pool_v), row_elems);
  MMGEN_CUDA_CHECK_LAUNCH();
}

void merge_attention_states(void* out_a, int64_t out_a_stride, const float* lse_a,
                            const void* out_b, int64_t out_b_stride, const float* lse_b,
                            int64_t tokens, int64_t heads, int64_t head_dim, cudaStream_t stream,
                            float* lse_out) {
  const int64_t total = tokens * heads * head_dim;
  if (total == 0) return;
  constexpr int kBlock = 256;
  merge_states_kernel<<<unsigned((total + kBlock - 1) / kBlock), kBlock, 0, stream>>>(
      static_cast<bf16*>(out_a), out_a_stride, lse_a, static_cast<const bf16*>(out_b), out_b_stride,
      lse_b, tokens, heads, head_dim, lse_out);
  MMGEN_CUDA_CHECK_LAUNCH();
}

}  // namespace mmgen::cuda::paged
