// The Hopper (sm_90a) version of the attention kernel: the same contract and blocking as the
// portable one (flash_attention.cu: 128 query rows per CTA, key blocks of 64, dense or a block
// list), with both products on the warpgroup MMA:
// - two warpgroups, 64 query rows each; S = Q·Kᵀ reads Q and K straight from shared memory
//   (m64n64k16, both K-major), O += P·V takes P from registers (the softmax output, converted to
//   bf16 in place) and V from shared memory read transposed (m64nDk16);
// - every tile is stored in the 128-byte swizzle wgmma expects (rows of 64 elements, 8-row groups
//   of 1024 bytes, chunks XOR-ed by row mod 8), D/64 column halves one after the other;
// - K and V stream through a 3-stage cp.async ring, so two blocks are in flight while one is used.
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

#include "attention/cuda/device_helpers.cuh"
#include "attention/cuda/flash_kernels.h"
#include "attention/cuda/wgmma.cuh"
#include "core/cuda/cuda_check.h"

namespace mmgen::cuda {
namespace {

using bf16 = __nv_bfloat16;
using namespace device;

constexpr int kThreads = 256;  // two warpgroups
constexpr int kStages = 3;
constexpr int kNTiles = kFlashBlockN / 8;

// Element offset of (row, 16-byte chunk) in a [Rows, D] tile stored as D/64 swizzled halves.
template <int Rows>
__device__ __forceinline__ int swizzled128(int row, int chunk) {
  return (chunk >> 3) * Rows * 64 + row * 64 + (((chunk & 7) ^ (row & 7)) << 3);
}

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
    copy_16_async(shared_address(tile + swizzled128<Rows>(row, chunk)), source, valid);
  }
}

template <int D>
struct OutputTile;
template <>
struct OutputTile<64> {
  static __device__ __forceinline__ void product(float (&o)[32], const uint32_t (&a)[4],
                                                 uint64_t b) {
    wgmma_m64n64k16_rs_bt(o, a, b);
  }
};
template <>
struct OutputTile<128> {
  static __device__ __forceinline__ void product(float (&o)[64], const uint32_t (&a)[4],
                                                 uint64_t b) {
    wgmma_m64n128k16_rs_bt(o, a, b);
  }
};

template <int D, bool kSparse>
__global__ void __launch_bounds__(kThreads, 1)
    flash_forward_hopper_kernel(const FlashAttentionArgs args) {
  extern __shared__ unsigned char shared_raw[];
  // wgmma's swizzle is on absolute shared addresses: tiles start on 1024-byte boundaries.
  const uint32_t raw_address = shared_address(shared_raw);
  bf16* shared_q =
      reinterpret_cast<bf16*>(shared_raw + (((raw_address + 1023) & ~1023u) - raw_address));
  bf16* shared_k = shared_q + kFlashBlockM * D;  // kStages tiles of [64, D]
  bf16* shared_v = shared_k + kStages * kFlashBlockN * D;

  const int query_block = blockIdx.x, head = blockIdx.y, batch = blockIdx.z;
  const int thread = threadIdx.x, warpgroup = thread / 128;
  const int warp_in_group = (thread % 128) / 32, lane = thread % 32;
  const bf16* q =
      static_cast<const bf16*>(args.q) + batch * args.q_strides.batch + head * args.q_strides.head;
  const bf16* k =
      static_cast<const bf16*>(args.k) + batch * args.k_strides.batch + head * args.k_strides.head;
  const bf16* v =
      static_cast<const bf16*>(args.v) + batch * args.v_strides.batch + head * args.v_strides.head;
  bf16* out =
      static_cast<bf16*>(args.out) + batch * args.out_strides.batch + head * args.out_strides.head;
  const int64_t first_query = int64_t(query_block) * kFlashBlockM;

  int list_begin = 0, list_size = 0;
  if constexpr (kSparse) {
    const int64_t entry = (int64_t(batch) * args.heads + head) * gridDim.x + query_block;
    list_begin = args.block_offsets[entry];
    list_size = args.block_offsets[entry + 1] - list_begin;
  } else {
    list_size = int((args.seq_k + kFlashBlockN - 1) / kFlashBlockN);
  }
  auto key_block_at = [&](int j) { return kSparse ? args.block_indices[list_begin + j] : j; };
  auto load_block = [&](int j) {
    const int stage = j % kStages;
    const int64_t first_key = int64_t(key_block_at(j)) * kFlashBlockN;
    load_tile_async<D, kFlashBlockN>(shared_k + stage * kFlashBlockN * D, k, args.k_strides.token,
                                     first_key, args.seq_k, thread);
    load_tile_async<D, kFlashBlockN>(shared_v + stage * kFlashBlockN * D, v, args.v_strides.token,
                                     first_key, args.seq_k, thread);
  };

  // Prologue: Q and block 0 in the first group, block 1 in the second.
  load_tile_async<D, kFlashBlockM>(shared_q, q, args.q_strides.token, first_query, args.seq_q,
                                   thread);
  if (list_size > 0) load_block(0);
  commit_copies();
  if (list_size > 1) load_block(1);
  commit_copies();

  constexpr int kORegs = D / 2;  // m64nD fp32 accumulators per thread
  float acc[kORegs];
#pragma unroll
  for (int i = 0; i < kORegs; ++i) acc[i] = 0.0f;
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};
  const float scale_log2 = args.scale * 1.4426950408889634f;
  const uint32_t q_address = shared_address(shared_q) + warpgroup * 64 * 128;

  for (int j = 0; j < list_size; ++j) {
    const int stage = j % kStages;
    const int64_t first_key = int64_t(key_block_at(j)) * kFlashBlockN;
    wait_copies_until<1>();  // block j's group is complete (block j + 1's may still fly)
    fence_shared_for_async_proxy();
    __syncthreads();  // ...for every thread; and every warp is done with block j - 1's stage
    if (j + 2 < list_size) load_block(j + 2);
    commit_copies();  // possibly empty: keeps the group count in step with the blocks

    // S = Q·Kᵀ: 64 rows of this warpgroup x 64 keys, D/16 steps along the head dimension.
    float scores[32];
    const uint32_t k_address = shared_address(shared_k + stage * kFlashBlockN * D);
    pin_registers(scores);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const uint32_t half = kk / 4, step = (kk % 4) * 32;
      wgmma_m64n64k16_ss(
          scores, swizzle128_descriptor(q_address + half * kFlashBlockM * 128 + step, 16, 1024),
          swizzle128_descriptor(k_address + half * kFlashBlockN * 128 + step, 16, 1024), kk > 0);
    }
    wgmma_commit();
    wgmma_wait_all();
    pin_registers(scores);

    // scores[4i + c]: row lane/4 (+8 for c >= 2) of this warp's 16, key 8i + 2(lane%4) + (c&1).
    if (first_key + kFlashBlockN > args.seq_k) {
#pragma unroll
      for (int i = 0; i < kNTiles; ++i)
#pragma unroll
        for (int c = 0; c < 4; ++c)
          if (first_key + i * 8 + 2 * (lane & 3) + (c & 1) >= args.seq_k)
            scores[4 * i + c] = -INFINITY;
    }
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      float block_max = -INFINITY;
#pragma unroll
      for (int i = 0; i < kNTiles; ++i)
        block_max = fmaxf(block_max, fmaxf(scores[4 * i + 2 * half], scores[4 * i + 2 * half + 1]));
      block_max = fmaxf(block_max, __shfl_xor_sync(0xffffffffu, block_max, 1));
      block_max = fmaxf(block_max, __shfl_xor_sync(0xffffffffu, block_max, 2));
      const float new_max = fmaxf(row_max[half], block_max * scale_log2);
      const float offset = new_max == -INFINITY ? 0.0f : new_max;
      const float correction = exp2f(row_max[half] - offset);
      row_max[half] = new_max;
      row_sum[half] *= correction;
#pragma unroll
      for (int i = 0; i < D / 8; ++i) {
        acc[4 * i + 2 * half] *= correction;
        acc[4 * i + 2 * half + 1] *= correction;
      }
#pragma unroll
      for (int i = 0; i < kNTiles; ++i)
#pragma unroll
        for (int c = 2 * half; c < 2 * half + 2; ++c) {
          const float p = exp2f(fmaf(scores[4 * i + c], scale_log2, -offset));
          scores[4 * i + c] = p;
          row_sum[half] += p;
        }
    }

    // O += P·V, 16 keys per step; V [keys, D] is N-major for this product (transposed read):
    // 64-column halves are 64 * 128 bytes apart, 8-key groups 1024 bytes apart.
    const uint32_t v_address = shared_address(shared_v + stage * kFlashBlockN * D);
    uint32_t p_fragments[kFlashBlockN / 16][4];
#pragma unroll
    for (int ks = 0; ks < kFlashBlockN / 16; ++ks) {
      p_fragments[ks][0] = pack_bf16x2(scores[8 * ks + 0], scores[8 * ks + 1]);
      p_fragments[ks][1] = pack_bf16x2(scores[8 * ks + 2], scores[8 * ks + 3]);
      p_fragments[ks][2] = pack_bf16x2(scores[8 * ks + 4], scores[8 * ks + 5]);
      p_fragments[ks][3] = pack_bf16x2(scores[8 * ks + 6], scores[8 * ks + 7]);
    }
    pin_registers(acc);
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < kFlashBlockN / 16; ++ks)
      OutputTile<D>::product(
          acc, p_fragments[ks],
          swizzle128_descriptor(v_address + ks * 16 * 128, kFlashBlockN * 128, 1024));
    wgmma_commit();
    wgmma_wait_all();
    pin_registers(acc);
  }
  wait_copies_until<0>();

  // acc[4i + c]: row lane/4 (+8 for c >= 2) of this warp's 16, column 8i + 2(lane%4) + (c&1).
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    float sum = row_sum[half];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    const float inverse = sum > 0.0f ? 1.0f / sum : 0.0f;
    const int64_t row = first_query + warpgroup * 64 + warp_in_group * 16 + (lane >> 2) + half * 8;
    if (row >= args.seq_q) continue;
    bf16* out_row = out + row * args.out_strides.token;
#pragma unroll
    for (int i = 0; i < D / 8; ++i)
      *reinterpret_cast<uint32_t*>(out_row + i * 8 + 2 * (lane & 3)) =
          pack_bf16x2(acc[4 * i + 2 * half] * inverse, acc[4 * i + 2 * half + 1] * inverse);
    if (args.lse && (lane & 3) == 0)
      args.lse[(int64_t(batch) * args.heads + head) * args.seq_q + row] =
          sum > 0.0f ? (row_max[half] + log2f(sum)) * 0.6931471805599453f : -INFINITY;
  }
}

}  // namespace

template <int D, bool kSparse>
void launch_flash_attention_hopper(const FlashAttentionArgs& args, cudaStream_t stream) {
  constexpr int kSharedBytes =
      (kFlashBlockM + 2 * kStages * kFlashBlockN) * D * int(sizeof(bf16)) + 1024;
  auto kernel = flash_forward_hopper_kernel<D, kSparse>;
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

template void launch_flash_attention_hopper<64, false>(const FlashAttentionArgs&, cudaStream_t);
template void launch_flash_attention_hopper<64, true>(const FlashAttentionArgs&, cudaStream_t);
template void launch_flash_attention_hopper<128, false>(const FlashAttentionArgs&, cudaStream_t);
template void launch_flash_attention_hopper<128, true>(const FlashAttentionArgs&, cudaStream_t);

}  // namespace mmgen::cuda
