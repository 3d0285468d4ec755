// FlashAttention-2-style forward kernel on the warp-level bf16 tensor-core instruction
// (mma.sync m16n8k16), for head sizes 64 and 128:
// - a CTA of 4 warps owns 128 query rows (32 per warp, two 16-row MMA tiles) and walks key blocks
//   of 64 tokens: every key block (dense) or the CTA's list of key blocks (block-sparse); with
//   lists per 64 rows it walks the first half's list, then the second's, each half's warps
//   ignoring the other's blocks (twice the work, but this kernel is the portable fallback);
// - Q stays in shared memory; K and V are double-buffered there with cp.async, so the next block
//   streams in while this one is computed; out-of-range rows are zero-filled by the copy;
// - shared rows are stored with their 16-byte chunks XOR-swizzled by (row mod 8), so the 8-row
//   ldmatrix reads hit 8 different bank groups;
// - the softmax runs online in fp32 in the log2 domain (exp2), with the row sums kept per thread
//   and reduced across the 4 threads of a row only at the end.
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

#include "attention/cuda/device_helpers.cuh"
#include "attention/cuda/flash_attention.h"
#include "attention/cuda/flash_kernels.h"
#include "core/cuda/cuda_check.h"

namespace mmgen::cuda {
namespace {

using bf16 = __nv_bfloat16;
using namespace device;

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kRowsPerWarp = kFlashBlockM / kWarps;  // 32
constexpr int kMTiles = kRowsPerWarp / 16;           // 16-row MMA tiles per warp
constexpr int kNTiles = kFlashBlockN / 8;            // 8-column MMA tiles per key block

// Element offset of (row, 16-byte chunk) in a swizzled [rows, D] bf16 tile.
template <int D>
__device__ __forceinline__ int swizzled(int row, int chunk) {
  return row * D + ((chunk ^ (row & 7)) << 3);
}

// Copies rows [first_row, first_row + Rows) of one head into a swizzled shared tile; rows at or
// past `valid_rows` become zeros.
template <int D, int Rows>
__device__ __forceinline__ void load_tile_async(bf16* tile, const bf16* head_base,
                                                int64_t token_stride, int64_t first_row,
                                                int64_t valid_rows, int thread) {
  constexpr int kChunks = D / 8;
  static_assert(Rows * kChunks % kThreads == 0);
#pragma unroll
  for (int i = 0; i < Rows * kChunks / kThreads; ++i) {
    const int index = i * kThreads + thread;
    const int row = index / kChunks, chunk = index % kChunks;
    const bool valid = first_row + row < valid_rows;
    const bf16* source =
        valid ? head_base + (first_row + row) * token_stride + chunk * 8 : head_base;
    copy_16_async(shared_address(tile + swizzled<D>(row, chunk)), source, valid);
  }
}

template <int D, int kMode>
__global__ void __launch_bounds__(kThreads, 2) flash_forward_kernel(const FlashAttentionArgs args) {
  constexpr bool kSparse = kMode != kFlashDense, kPerHalf = kMode == kFlashPerHalf;
  extern __shared__ __align__(128) unsigned char shared_bytes[];
  bf16* shared_q = reinterpret_cast<bf16*>(shared_bytes);
  bf16* shared_k = shared_q + kFlashBlockM * D;  // two buffers
  bf16* shared_v = shared_k + 2 * kFlashBlockN * D;

  const int query_block = blockIdx.x, head = blockIdx.y, batch = blockIdx.z;
  const int thread = threadIdx.x, warp = thread / 32, lane = thread % 32;
  const bf16* q =
      static_cast<const bf16*>(args.q) + batch * args.q_strides.batch + head * args.q_strides.head;
  const bf16* k =
      static_cast<const bf16*>(args.k) + batch * args.k_strides.batch + head * args.k_strides.head;
  const bf16* v =
      static_cast<const bf16*>(args.v) + batch * args.v_strides.batch + head * args.v_strides.head;
  bf16* out =
      static_cast<bf16*>(args.out) + batch * args.out_strides.batch + head * args.out_strides.head;
  const int64_t first_query = int64_t(query_block) * kFlashBlockM;

  // Entries [0, first_size) come from the first list, the rest (lists per 64 rows) from the
  // second half's list.
  int list_begin = 0, list_size = 0, first_size = 0, second_begin = 0;
  if constexpr (kPerHalf) {
    const int64_t halves = (args.seq_q + kFlashBlockM / 2 - 1) / (kFlashBlockM / 2);
    const int64_t base = (int64_t(batch) * args.heads + head) * halves + 2 * int64_t(query_block);
    list_begin = args.block_offsets[base];
    first_size = args.block_offsets[base + 1] - list_begin;
    list_size = first_size;
    if (2 * int64_t(query_block) + 1 < halves) {
      second_begin = args.block_offsets[base + 1];
      list_size += args.block_offsets[base + 2] - second_begin;
    }
  } else if constexpr (kSparse) {
    const int64_t entry = (int64_t(batch) * args.heads + head) * gridDim.x + query_block;
    list_begin = args.block_offsets[entry];
    list_size = args.block_offsets[entry + 1] - list_begin;
    first_size = list_size;
  } else {
    list_size = int((args.seq_k + kFlashBlockN - 1) / kFlashBlockN);
  }
  auto key_block_at = [&](int j) {
    if constexpr (kPerHalf)
      return j < first_size ? args.block_indices[list_begin + j]
                            : args.block_indices[second_begin + j - first_size];
    return kSparse ? args.block_indices[list_begin + j] : j;
  };

  load_tile_async<D, kFlashBlockM>(shared_q, q, args.q_strides.token, first_query, args.seq_q,
                                   thread);
  if (list_size > 0) {
    const int64_t first_key = int64_t(key_block_at(0)) * kFlashBlockN;
    load_tile_async<D, kFlashBlockN>(shared_k, k, args.k_strides.token, first_key, args.seq_k,
                                     thread);
    load_tile_async<D, kFlashBlockN>(shared_v, v, args.v_strides.token, first_key, args.seq_k,
                                     thread);
  }
  commit_copies();

  float acc[kMTiles][D / 8][4];
  float row_max[kMTiles][2], row_sum[kMTiles][2];  // row_max in the scaled log2 domain
#pragma unroll
  for (int mi = 0; mi < kMTiles; ++mi) {
#pragma unroll
    for (int dn = 0; dn < D / 8; ++dn)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[mi][dn][c] = 0.0f;
    row_max[mi][0] = row_max[mi][1] = -INFINITY;
    row_sum[mi][0] = row_sum[mi][1] = 0.0f;
  }
  const float scale_log2 = args.scale * 1.4426950408889634f;

  for (int j = 0; j < list_size; ++j) {
    const int buffer = j & 1;
    const int64_t first_key = int64_t(key_block_at(j)) * kFlashBlockN;
    wait_copies();
    __syncthreads();  // block j has landed, and every warp is done with the other buffer
    if (j + 1 < list_size) {
      const int64_t next_key = int64_t(key_block_at(j + 1)) * kFlashBlockN;
      load_tile_async<D, kFlashBlockN>(shared_k + (buffer ^ 1) * kFlashBlockN * D, k,
                                       args.k_strides.token, next_key, args.seq_k, thread);
      load_tile_async<D, kFlashBlockN>(shared_v + (buffer ^ 1) * kFlashBlockN * D, v,
                                       args.v_strides.token, next_key, args.seq_k, thread);
    }
    commit_copies();
    const bf16* tile_k = shared_k + buffer * kFlashBlockN * D;
    const bf16* tile_v = shared_v + buffer * kFlashBlockN * D;

    // S = Q K^T for this warp's 32 rows and the block's 64 keys.
    float scores[kMTiles][kNTiles][4];
#pragma unroll
    for (int mi = 0; mi < kMTiles; ++mi)
#pragma unroll
      for (int ni = 0; ni < kNTiles; ++ni)
#pragma unroll
        for (int c = 0; c < 4; ++c) scores[mi][ni][c] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
      uint32_t a[kMTiles][4];
#pragma unroll
      for (int mi = 0; mi < kMTiles; ++mi) {
        const int row = warp * kRowsPerWarp + mi * 16 + (lane & 15);
        load_matrix_x4(shared_address(shared_q + swizzled<D>(row, ks * 2 + (lane >> 4))), a[mi][0],
                       a[mi][1], a[mi][2], a[mi][3]);
      }
#pragma unroll
      for (int np = 0; np < kNTiles / 2; ++np) {
        const int row = np * 16 + (lane & 7) + ((lane >> 4) << 3);
        uint32_t b0, b1, b2, b3;
        load_matrix_x4(shared_address(tile_k + swizzled<D>(row, ks * 2 + ((lane >> 3) & 1))), b0,
                       b1, b2, b3);
#pragma unroll
        for (int mi = 0; mi < kMTiles; ++mi) {
          mma_16x8x16(scores[mi][2 * np], a[mi], b0, b1);
          mma_16x8x16(scores[mi][2 * np + 1], a[mi], b2, b3);
        }
      }
    }

    // Keys past the end of the sequence (only in the last, partial block), past the block's valid
    // length, or in a block of the other half's list take no weight (warps 0-1 are the first 64
    // rows, 2-3 the rest).
    int64_t key_limit = args.seq_k;
    if constexpr (kSparse)
      if (args.key_block_lengths)
        key_limit = min(key_limit, first_key + args.key_block_lengths[key_block_at(j)]);
    if constexpr (kPerHalf)
      if ((j < first_size) != (warp / 2 == 0)) key_limit = first_key;
    if (first_key + kFlashBlockN > key_limit) {
#pragma unroll
      for (int mi = 0; mi < kMTiles; ++mi)
#pragma unroll
        for (int ni = 0; ni < kNTiles; ++ni)
#pragma unroll
          for (int c = 0; c < 4; ++c)
            if (first_key + ni * 8 + 2 * (lane & 3) + (c & 1) >= key_limit)
              scores[mi][ni][c] = -INFINITY;
    }

    // Online softmax: rescale what was accumulated when a row's maximum grows.
#pragma unroll
    for (int mi = 0; mi < kMTiles; ++mi) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {  // rows lane/4 and lane/4 + 8 of the tile
        float block_max = -INFINITY;
#pragma unroll
        for (int ni = 0; ni < kNTiles; ++ni)
          block_max =
              fmaxf(block_max, fmaxf(scores[mi][ni][2 * half], scores[mi][ni][2 * half + 1]));
        block_max = fmaxf(block_max, __shfl_xor_sync(0xffffffffu, block_max, 1));
        block_max = fmaxf(block_max, __shfl_xor_sync(0xffffffffu, block_max, 2));
        const float new_max = fmaxf(row_max[mi][half], block_max * scale_log2);
        // A row that has seen only masked keys keeps -inf; 0 as offset avoids inf - inf.
        const float offset = new_max == -INFINITY ? 0.0f : new_max;
        const float correction = exp2f(row_max[mi][half] - offset);
        row_max[mi][half] = new_max;
        row_sum[mi][half] *= correction;
#pragma unroll
        for (int dn = 0; dn < D / 8; ++dn) {
          acc[mi][dn][2 * half] *= correction;
          acc[mi][dn][2 * half + 1] *= correction;
        }
#pragma unroll
        for (int ni = 0; ni < kNTiles; ++ni)
#pragma unroll
          for (int c = 2 * half; c < 2 * half + 2; ++c) {
            const float p = exp2f(fmaf(scores[mi][ni][c], scale_log2, -offset));
            scores[mi][ni][c] = p;
            row_sum[mi][half] += p;
          }
      }
    }

    // O += P V: the score accumulators are already laid out as the A operand of the next MMA.
#pragma unroll
    for (int ks = 0; ks < kFlashBlockN / 16; ++ks) {
      uint32_t a[kMTiles][4];
#pragma unroll
      for (int mi = 0; mi < kMTiles; ++mi) {
        a[mi][0] = pack_bf16x2(scores[mi][2 * ks][0], scores[mi][2 * ks][1]);
        a[mi][1] = pack_bf16x2(scores[mi][2 * ks][2], scores[mi][2 * ks][3]);
        a[mi][2] = pack_bf16x2(scores[mi][2 * ks + 1][0], scores[mi][2 * ks + 1][1]);
        a[mi][3] = pack_bf16x2(scores[mi][2 * ks + 1][2], scores[mi][2 * ks + 1][3]);
      }
#pragma unroll
      for (int dp = 0; dp < D / 16; ++dp) {
        const int row = ks * 16 + (lane & 7) + (((lane >> 3) & 1) << 3);
        uint32_t b0, b1, b2, b3;
        load_matrix_x4_transposed(shared_address(tile_v + swizzled<D>(row, dp * 2 + (lane >> 4))),
                                  b0, b1, b2, b3);
#pragma unroll
        for (int mi = 0; mi < kMTiles; ++mi) {
          mma_16x8x16(acc[mi][2 * dp], a[mi], b0, b1);
          mma_16x8x16(acc[mi][2 * dp + 1], a[mi], b2, b3);
        }
      }
    }
  }
  wait_copies();

#pragma unroll
  for (int mi = 0; mi < kMTiles; ++mi) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      float sum = row_sum[mi][half];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      const float inverse = sum > 0.0f ? 1.0f / sum : 0.0f;
      const int64_t row = first_query + warp * kRowsPerWarp + mi * 16 + (lane >> 2) + half * 8;
      if (row >= args.seq_q) continue;
      const int64_t target = args.out_rows ? args.out_rows[row] : row;
      bf16* out_row = out + target * args.out_strides.token;
      if (target >= 0)
#pragma unroll
        for (int dn = 0; dn < D / 8; ++dn) {
          const int column = dn * 8 + 2 * (lane & 3);
          *reinterpret_cast<uint32_t*>(out_row + column) =
              pack_bf16x2(acc[mi][dn][2 * half] * inverse, acc[mi][dn][2 * half + 1] * inverse);
        }
      if (args.lse && (lane & 3) == 0)
        args.lse[(int64_t(batch) * args.heads + head) * args.seq_q + row] =
            sum > 0.0f ? (row_max[mi][half] + log2f(sum)) * 0.6931471805599453f : -INFINITY;
    }
  }
}

}  // namespace

template <int D, int kMode>
void launch_flash_attention(const FlashAttentionArgs& args, cudaStream_t stream) {
  constexpr int kSharedBytes = (kFlashBlockM + 4 * kFlashBlockN) * D * int(sizeof(bf16));
  auto kernel = flash_forward_kernel<D, kMode>;
  static const bool configured = [&] {
    MMGEN_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSharedBytes));
    return true;
  }();
  (void)configured;
  const dim3 grid(unsigned((args.seq_q + kFlashBlockM - 1) / kFlashBlockM), unsigned(args.heads),
                  unsigned(args.batch));
  kernel<<<grid, kThreads, kSharedBytes, stream>>>(args);
  MMGEN_CUDA_CHECK_LAUNCH();
}

#define MMGEN_INSTANTIATE(D, MODE) \
  template void launch_flash_attention<D, MODE>(const FlashAttentionArgs&, cudaStream_t);
MMGEN_INSTANTIATE(64, kFlashDense)
MMGEN_INSTANTIATE(64, kFlashSparse)
MMGEN_INSTANTIATE(64, kFlashPerHalf)
MMGEN_INSTANTIATE(128, kFlashDense)
MMGEN_INSTANTIATE(128, kFlashSparse)
MMGEN_INSTANTIATE(128, kFlashPerHalf)
#undef MMGEN_INSTANTIATE

}  // namespace mmgen::cuda
