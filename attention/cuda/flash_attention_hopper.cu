// The Hopper (sm_90a) version of the attention kernel: the same contract and blocking as the
// portable one (flash_attention.cu: 128 query rows per CTA, key blocks of 64, dense or a block
// list), with both products on the warpgroup MMA:
// - two warpgroups, 64 query rows each; S = Q·Kᵀ reads Q and K straight from shared memory
//   (m64n128k16, both K-major), O += P·V takes P from registers (the softmax output, converted to
//   bf16 in place) and V from shared memory read transposed (m64nDk16);
// - every tile is stored in the 128-byte swizzle wgmma expects (rows of 64 elements, 8-row groups
//   of 1024 bytes, chunks XOR-ed by row mod 8), D/64 column halves one after the other;
// - key tiles are two list entries (128 keys); K and V stream through two-slot cp.async rings;
// - while the tensor cores run O += P·V for one tile, the threads compute the next tile's softmax
//   (its Q·Kᵀ was issued just before), so the exponentials hide behind the matrix work.
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
// A key tile is two list entries (2 x kFlashBlockN = 128 keys): one wgmma m64n128 per step.
constexpr int kTileKeys = 2 * kFlashBlockN;
constexpr int kTileRegs = kTileKeys / 2;  // m64n128 fp32 accumulators per thread

// Element offset of (row, 16-byte chunk) in a [Rows, D] tile stored as D/64 swizzled halves.
template <int Rows>
__device__ __forceinline__ int swizzled128(int row, int chunk) {
  return (chunk >> 3) * Rows * 64 + row * 64 + (((chunk & 7) ^ (row & 7)) << 3);
}

// Copies `Rows` rows starting at `first_row` into rows [tile_row, tile_row + Rows) of a swizzled
// [TileRows, D] tile; rows at or past `valid_rows` (or all, when `present` is false) become zeros.
template <int D, int TileRows, int Rows>
__device__ __forceinline__ void load_rows_async(bf16* tile, int tile_row, const bf16* head_base,
                                                int64_t token_stride, int64_t first_row,
                                                int64_t valid_rows, bool present, int thread) {
  constexpr int kChunks = D / 8;
  static_assert(Rows * kChunks % kThreads == 0);
#pragma unroll
  for (int i = 0; i < Rows * kChunks / kThreads; ++i) {
    const int index = i * kThreads + thread;
    const int row = index / kChunks, chunk = index % kChunks;
    const bool valid = present && first_row + row < valid_rows;
    const bf16* source =
        valid ? head_base + (first_row + row) * token_stride + chunk * 8 : head_base;
    copy_16_async(shared_address(tile + swizzled128<TileRows>(tile_row + row, chunk)), source,
                  valid);
  }
}

template <int D>
struct OutputProduct;
template <>
struct OutputProduct<64> {
  static __device__ __forceinline__ void run(float (&o)[32], const uint32_t (&a)[4], uint64_t b) {
    wgmma_m64n64k16_rs_bt(o, a, b);
  }
};
template <>
struct OutputProduct<128> {
  static __device__ __forceinline__ void run(float (&o)[64], const uint32_t (&a)[4], uint64_t b) {
    wgmma_m64n128k16_rs_bt(o, a, b);
  }
};

// Per-thread online-softmax state for its two rows (lane/4 and lane/4 + 8 of its warp's 16).
struct SoftmaxRows {
  float max[2] = {-INFINITY, -INFINITY};  // scaled, log2 domain
  float sum[2] = {0.0f, 0.0f};            // this thread's share; reduced over the quad at the end
};

// Turns raw scores into unnormalised probabilities in place, masking keys that are not there;
// returns the factors the accumulated output must be scaled by.
__device__ __forceinline__ void softmax_tile(float (&scores)[kTileRegs], SoftmaxRows& rows,
                                             float scale_log2, bool mask, int64_t first_key_a,
                                             int64_t first_key_b, bool has_b, int64_t seq_k,
                                             int lane, float (&correction)[2]) {
  if (mask) {
#pragma unroll
    for (int i = 0; i < kTileKeys / 8; ++i)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int column = (i % 8) * 8 + 2 * (lane & 3) + (c & 1);
        const bool valid =
            i < 8 ? first_key_a + column < seq_k : has_b && first_key_b + column < seq_k;
        if (!valid) scores[4 * i + c] = -INFINITY;
      }
  }
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    float tile_max = -INFINITY;
#pragma unroll
    for (int i = 0; i < kTileKeys / 8; ++i)
      tile_max = fmaxf(tile_max, fmaxf(scores[4 * i + 2 * half], scores[4 * i + 2 * half + 1]));
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 2));
    const float new_max = fmaxf(rows.max[half], tile_max * scale_log2);
    // A row that has seen only masked keys keeps -inf; 0 as offset avoids inf - inf.
    const float offset = new_max == -INFINITY ? 0.0f : new_max;
    correction[half] = exp2f(rows.max[half] - offset);
    rows.max[half] = new_max;
    float sum = rows.sum[half] * correction[half];
#pragma unroll
    for (int i = 0; i < kTileKeys / 8; ++i)
#pragma unroll
      for (int c = 2 * half; c < 2 * half + 2; ++c) {
        const float p = exp2f(fmaf(scores[4 * i + c], scale_log2, -offset));
        scores[4 * i + c] = p;
        sum += p;
      }
    rows.sum[half] = sum;
  }
}

// P as the A operand of the output product: 16 keys per step, the m16n8k16 A-fragment layout.
__device__ __forceinline__ void pack_probabilities(const float (&p)[kTileRegs],
                                                   uint32_t (&fragments)[kTileKeys / 16][4]) {
#pragma unroll
  for (int ks = 0; ks < kTileKeys / 16; ++ks) {
    fragments[ks][0] = pack_bf16x2(p[8 * ks + 0], p[8 * ks + 1]);
    fragments[ks][1] = pack_bf16x2(p[8 * ks + 2], p[8 * ks + 3]);
    fragments[ks][2] = pack_bf16x2(p[8 * ks + 4], p[8 * ks + 5]);
    fragments[ks][3] = pack_bf16x2(p[8 * ks + 6], p[8 * ks + 7]);
  }
}

template <int D, bool kSparse>
__global__ void __launch_bounds__(kThreads, 1)
    flash_forward_hopper_kernel(const FlashAttentionArgs args) {
  extern __shared__ unsigned char shared_raw[];
  // wgmma's swizzle is on absolute shared addresses: tiles start on 1024-byte boundaries.
  const uint32_t raw_address = shared_address(shared_raw);
  bf16* shared_q =
      reinterpret_cast<bf16*>(shared_raw + (((raw_address + 1023) & ~1023u) - raw_address));
  bf16* shared_k = shared_q + kFlashBlockM * D;   // two [128, D] key tiles
  bf16* shared_v = shared_k + 2 * kTileKeys * D;  // two [128, D] value tiles

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
  const int tiles = (list_size + 1) / 2;
  // First key of list entry `e` (entries 2t and 2t + 1 make tile t).
  auto first_key_of = [&](int e) {
    return int64_t(kSparse ? args.block_indices[list_begin + e] : e) * kFlashBlockN;
  };
  auto load_tile = [&](bf16* base, const bf16* source, int64_t token_stride, int t) {
    bf16* tile = base + (t & 1) * kTileKeys * D;
    const bool has_b = 2 * t + 1 < list_size;
    load_rows_async<D, kTileKeys, kFlashBlockN>(tile, 0, source, token_stride, first_key_of(2 * t),
                                                args.seq_k, true, thread);
    load_rows_async<D, kTileKeys, kFlashBlockN>(tile, kFlashBlockN, source, token_stride,
                                                has_b ? first_key_of(2 * t + 1) : 0, args.seq_k,
                                                has_b, thread);
  };
  auto load_keys = [&](int t) { load_tile(shared_k, k, args.k_strides.token, t); };
  auto load_values = [&](int t) { load_tile(shared_v, v, args.v_strides.token, t); };

  constexpr int kORegs = D / 2;  // m64nD fp32 accumulators per thread
  float acc[kORegs];
#pragma unroll
  for (int i = 0; i < kORegs; ++i) acc[i] = 0.0f;
  SoftmaxRows rows;
  const float scale_log2 = args.scale * 1.4426950408889634f;
  const uint32_t q_address = shared_address(shared_q) + warpgroup * 64 * 128;

  float scores[kTileRegs];
  uint32_t p_fragments[kTileKeys / 16][4];
  auto issue_scores = [&](int t) {  // scores = Q·K_tᵀ, asynchronously
    const uint32_t k_address = shared_address(shared_k + (t & 1) * kTileKeys * D);
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const uint32_t half = kk / 4, step = (kk % 4) * 32;
      wgmma_m64n128k16_ss(
          scores, swizzle128_descriptor(q_address + half * kFlashBlockM * 128 + step, 16, 1024),
          swizzle128_descriptor(k_address + half * kTileKeys * 128 + step, 16, 1024), kk > 0);
    }
  };
  auto softmax = [&](int t, float(&correction)[2]) {
    const int64_t first_key_a = first_key_of(2 * t);
    const bool has_b = 2 * t + 1 < list_size;
    const int64_t first_key_b = has_b ? first_key_of(2 * t + 1) : 0;
    const bool mask = !has_b || first_key_a + kFlashBlockN > args.seq_k ||
                      first_key_b + kFlashBlockN > args.seq_k;
    softmax_tile(scores, rows, scale_log2, mask, first_key_a, first_key_b, has_b, args.seq_k, lane,
                 correction);
  };

  // Prologue: Q, key tiles 0 and 1, value tile 0; then tile 0's scores and probabilities.
  load_rows_async<D, kFlashBlockM, kFlashBlockM>(shared_q, 0, q, args.q_strides.token, first_query,
                                                 args.seq_q, true, thread);
  if (tiles > 0) load_keys(0), load_values(0);
  if (tiles > 1) load_keys(1);
  commit_copies();
  if (tiles > 0) {
    wait_copies_until<0>();
    fence_shared_for_async_proxy();
    __syncthreads();
    pin_registers(scores);
    wgmma_fence();
    issue_scores(0);
    wgmma_commit();
    wgmma_wait_all();
    pin_registers(scores);
    float correction[2];
    softmax(0, correction);  // the output is still zero: nothing to rescale
    pack_probabilities(scores, p_fragments);
  }

  // O += P_t·V_t, asynchronously; V [keys, D] is N-major for this product (transposed read):
  // 64-column halves are 128 * 128 bytes apart, 8-key groups 1024 bytes apart.
  auto issue_output = [&](int t) {
    const uint32_t v_address = shared_address(shared_v + (t & 1) * kTileKeys * D);
#pragma unroll
    for (int ks = 0; ks < kTileKeys / 16; ++ks)
      OutputProduct<D>::run(
          acc, p_fragments[ks],
          swizzle128_descriptor(v_address + ks * 16 * 128, kTileKeys * 128, 1024));
  };
  auto next_tiles_landed = [&](int t) {
    wait_copies_until<0>();  // key tile t + 1 and value tile t have landed
    fence_shared_for_async_proxy();
    __syncthreads();                      // ...for every thread; every warp is done with tile t - 1
    if (t + 2 < tiles) load_keys(t + 2);  // into key tile t's slot (its scores are done)
    if (t + 1 < tiles) load_values(t + 1);  // into value tile t - 1's slot
    commit_copies();
  };

  // Tile t: while the tensor cores run O += P_t·V_t, the threads turn tile t + 1's scores into
  // probabilities; the output is rescaled once that product is done. (The last tile is peeled
  // off so the loop body has no branch around its wgmma: ptxas then keeps them asynchronous.)
  for (int t = 0; t + 1 < tiles; ++t) {
    next_tiles_landed(t);
    pin_registers(scores);
    pin_registers(acc);
    wgmma_fence();
    issue_scores(t + 1);
    wgmma_commit();
    issue_output(t);
    wgmma_commit();
    asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");  // scores of t + 1 done
    pin_registers(scores);
    float correction[2];
    softmax(t + 1, correction);
    wgmma_wait_all();  // O += P_t·V_t done: P_t's registers and O are free again
    pin_registers(acc);
#pragma unroll
    for (int i = 0; i < D / 8; ++i) {
      acc[4 * i + 0] *= correction[0];
      acc[4 * i + 1] *= correction[0];
      acc[4 * i + 2] *= correction[1];
      acc[4 * i + 3] *= correction[1];
    }
    pack_probabilities(scores, p_fragments);
  }
  if (tiles > 0) {
    next_tiles_landed(tiles - 1);
    pin_registers(acc);
    wgmma_fence();
    issue_output(tiles - 1);
    wgmma_commit();
    wgmma_wait_all();
    pin_registers(acc);
  }
  wait_copies_until<0>();

  // acc[4i + c]: row lane/4 (+8 for c >= 2) of this warp's 16, column 8i + 2(lane%4) + (c&1).
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    float sum = rows.sum[half];
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
          sum > 0.0f ? (rows.max[half] + log2f(sum)) * 0.6931471805599453f : -INFINITY;
  }
}

}  // namespace

template <int D, bool kSparse>
void launch_flash_attention_hopper(const FlashAttentionArgs& args, cudaStream_t stream) {
  constexpr int kSharedBytes = (kFlashBlockM + 4 * kTileKeys) * D * int(sizeof(bf16)) + 1024;
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
