// The Hopper (sm_90a) version of the attention kernel: the same contract as the portable one
// (flash_attention.cu: 128 query rows per CTA, key blocks of 64 tokens, dense or a block list),
// organised the way Hopper wants it (the FlashAttention-3 design):
// - warp specialisation: one producer warp streams Q, K and V tiles with the tensor-copy engine
//   (TMA) into shared memory, signalling full/empty barriers; two consumer warpgroups (64 query
//   rows each) only compute, with the producer's registers handed to them (setmaxnreg);
// - both products on the warpgroup MMA: S = Q·Kᵀ with Q and K from shared memory (m64n128k16,
//   K-major), O += P·V with P from registers (the softmax output converted to bf16 in place) and
//   V from shared memory read transposed (m64nDk16);
// - tiles sit in the 128-byte swizzle both TMA and wgmma use (rows of 64 elements, 8-row groups
//   of 1024 bytes), D/64 column halves one after the other; a key tile is two list entries
//   (128 keys), kStages slots each for K and V;
// - with lists per 64 query rows (kPerHalf, VSA's cubes) each consumer follows its own list: a key
//   tile is two entries of it (128 keys, the same m64n128 products), each consumer has one key
//   slot and two value slots of its own and its own producer thread, so neither computes the
//   other's blocks;
// - while the tensor cores run O += P·V for one tile, the consumer computes the next tile's softmax
//   (its Q·Kᵀ was issued just before), and the two consumers take turns issuing their products,
//   so the exponentials hide behind the matrix work;
// - with INT8 scores (kInt8, SageAttention) Q and K arrive as int8 rows of 128 bytes: one swizzle
//   row, so their tiles have the byte layout of a bf16 D = 64 tile and the same descriptors step
//   along K (32 bytes per step: k32 for s8, k16 for bf16). S = Q·Kᵀ runs as wgmma s8 into exact
//   int32 accumulators (|q·k| <= 128 · 127² < 2^24, so the float conversion is exact too), each
//   score then takes its row's and its key group's scale; P·V is the bf16 product as before;
// - with FP8 values as well (kFp8V, SageAttention2; dense only) V arrives as e4m3 channel rows of
//   128 keys (fp8_values.h: transposed, since FP8 wgmma reads B K-major only, and permuted within
//   runs of 32 keys), one swizzle row per channel; the probabilities, scaled by 448, are packed
//   into e4m3 A fragments straight from the score layout (the permutation makes that a local
//   repack), each tile's P·V runs as wgmma e4m3 k32 into fresh accumulators and is added to the
//   float32 output in float32 (FP8 wgmma accumulates in fewer bits), and the channel scales
//   multiply the output at the end.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

#include "attention/cuda/async_copy.cuh"
#include "attention/cuda/device_helpers.cuh"
#include "attention/cuda/flash_kernels.h"
#include "attention/cuda/wgmma.cuh"
#include "core/cuda/cuda_check.h"

namespace mmgen::cuda {
namespace {

using bf16 = __nv_bfloat16;
using namespace device;

constexpr int kThreads = 384;  // warpgroup 0: producer; 1 and 2: consumers
constexpr int kConsumerWarps = 8;
constexpr int kProducerRegisters = 24, kConsumerRegisters = 240;
// Key tiles: two list entries (128 keys, one wgmma m64n128 per step), shared by both consumers or,
// with lists per 64 query rows, two entries of the consumer's own list.
constexpr int kTileKeys = 2 * kFlashBlockN;
// K and V slots in shared memory. Two keep the copy engine a tile ahead; three (224 KB at head
// size 128) measured 11% slower dense on an H100 (515 vs 580 TFLOP/s), and with lists per 64 rows
// (VSA at sparsity 0.9, Wan2.1-1.3B's shape, H200, 2026-11-28) 2.54 ms against 2.55: two it is.
constexpr int kStages = 2;
// With lists per 64 rows every consumer has its own slots, and shared memory holds two value
// slots but one key slot each: a key slot is free again as soon as its scores are computed, early
// in the step before, so one is enough to keep the copies ahead (64-key tiles with two slots each
// ran at half the dense rate: 201 TFLOP/s for VSA on an H200).
template <int kMode>
constexpr bool kPerHalfOf = kMode == kFlashPerHalf || kMode == kFlashCubes;
template <int kMode>
constexpr int kKeyStagesOf = kPerHalfOf<kMode> ? 1 : kStages;
template <int kMode>
constexpr int kSlotSetsOf = kPerHalfOf<kMode> ? 2 : 1;

// A video's cubes when the kernel reads them in place (FlashAttentionArgs::video_grid): cube c of
// the (t, h, w) cube grid, w fastest, starts at token (4·ct, 4·ch, 4·cw), and its 64 rows are the
// box's tokens in (t, h, w) order, the order a 5-D tensor copy lays them out in.
struct CubeGrid {
  int frames, height, width, along_h, along_w, count;
  __device__ explicit CubeGrid(const int64_t (&grid)[3])
      : frames(int(grid[0])),
        height(int(grid[1])),
        width(int(grid[2])),
        along_h((height + 3) / 4),
        along_w((width + 3) / 4),
        count(((frames + 3) / 4) * along_h * along_w) {}
  // (first frame, first row, first column) of cube c.
  __device__ int3 origin(int c) const {
    const int plane = along_h * along_w;
    return make_int3(4 * (c / plane), 4 * ((c % plane) / along_w), 4 * (c % along_w));
  }
  // Bit j set when row j of the cube at `o` is a token of the video (not past an edge).
  __device__ uint64_t valid_rows(int3 o) const {
    const int in_t = min(4, frames - o.x), in_h = min(4, height - o.y), in_w = min(4, width - o.z);
    // A run of in_w bits, repeated for in_h rows of 4, repeated for in_t frames of 16.
    const uint32_t plane = ((1u << in_w) - 1) * 0x1111u & ((1u << (4 * in_h)) - 1);
    const uint64_t frames_mask = in_t == 4 ? ~uint64_t(0) : (uint64_t(1) << (16 * in_t)) - 1;
    return uint64_t(plane) * 0x0001000100010001ull & frames_mask;
  }
};

// The first n of a block's 64 rows: bits 0 .. n - 1.
__device__ __forceinline__ uint64_t first_rows(int64_t n) {
  return n >= 64 ? ~uint64_t(0) : n <= 0 ? uint64_t(0) : (uint64_t(1) << n) - 1;
}

// Barriers in shared memory, after the tiles; per consumer with lists per 64 query rows (index 0
// serves both otherwise).
// Beside them, which rows of each key slot's two blocks are keys (bit j: row j), written by the
// producer before it arms the slot's copies: a consumer reads them once the keys have arrived, so
// the block geometry (cube origins, block lengths) stays off its softmax.
struct Barriers {
  uint64_t q_full, k_full[2][kStages], v_full[2][kStages], k_empty[2][kStages], v_empty[2][kStages];
  uint64_t key_rows[2][kStages][kTileKeys / kFlashBlockN];
};

// Named barriers 1 and 2 (0 is __syncthreads) take turns between the two consumer warpgroups:
// one issues its matrix products while the other computes its softmax ("ping-pong"), so the tensor
// cores are never left waiting for both at once.
__device__ __forceinline__ void wait_for_turn(int consumer) {
  asm volatile("bar.sync %0, 256;\n" ::"r"(1 + consumer) : "memory");
}
__device__ __forceinline__ void pass_turn(int consumer) {
  asm volatile("bar.arrive %0, 256;\n" ::"r"(1 + (consumer ^ 1)) : "memory");
}

// Per-thread online-softmax state for its two rows (lane/4 and lane/4 + 8 of its warp's 16).
struct SoftmaxRows {
  float max[2] = {-INFINITY, -INFINITY};  // scaled, log2 domain
  float sum[2] = {0.0f, 0.0f};            // this thread's share; reduced over the quad at the end
};

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

// Turns raw scores into unnormalised probabilities in place, masking keys that are not there
// (entry a's keys whose bit in valid_a is clear, entry b's in valid_b); returns the factors the
// accumulated output must be scaled by.
// A score s of this thread's row half h and entry e (a: i < 8, b: the rest) stands for
// s · scale[h][e] in the log2 domain: one factor for bf16 scores (kBlockScales false: scale[0][0]),
// and for INT8 ones the row's and the key group's scales folded in (positive), so the integer
// scores need no multiply of their own: the row maximum is taken per entry on the raw scores and
// scaled after (max(s·f) = f·max(s) for f > 0).
// The probabilities come out multiplied by 2^log2_gain (the FP8 product's 448); the row sums with
// them, so the output's normalisation cancels the gain.
template <int Keys, bool kBlockScales>
__device__ __forceinline__ void softmax_tile(float (&scores)[Keys / 2], SoftmaxRows& rows,
                                             const float (&scale)[2][2], float log2_gain, bool mask,
                                             uint64_t valid_a, uint64_t valid_b, int lane,
                                             float (&correction)[2]) {
  if (mask) {
    // This thread's columns are (i mod 8)·8 + 2·(lane mod 4) + (c mod 2): one shift by the lane's
    // part, then every test is a constant shift.
    const uint64_t mine_a = valid_a >> (2 * (lane & 3)), mine_b = valid_b >> (2 * (lane & 3));
#pragma unroll
    for (int i = 0; i < Keys / 8; ++i)
#pragma unroll
      for (int c = 0; c < 4; ++c)
        if ((((i < 8 ? mine_a : mine_b) >> ((i % 8) * 8 + (c & 1))) & 1) == 0)
          scores[4 * i + c] = -INFINITY;
  }
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    float max_a = -INFINITY, max_b = -INFINITY;
#pragma unroll
    for (int i = 0; i < Keys / 8; ++i) {
      const float m = fmaxf(scores[4 * i + 2 * half], scores[4 * i + 2 * half + 1]);
      if (kBlockScales && i >= 8)
        max_b = fmaxf(max_b, m);
      else
        max_a = fmaxf(max_a, m);
    }
    // Scaled before the quad's reduction: its lanes' key groups may have scales of their own.
    float tile_max = max_a * scale[half][0];
    if constexpr (kBlockScales) tile_max = fmaxf(tile_max, max_b * scale[half][1]);
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 2));
    const float new_max = fmaxf(rows.max[half], tile_max);
    // A row that has seen only masked keys keeps -inf; 0 as offset avoids inf - inf.
    const float offset = new_max == -INFINITY ? 0.0f : new_max;
    correction[half] = exp2_ftz(rows.max[half] - offset);
    rows.max[half] = new_max;
    float sum = rows.sum[half] * correction[half];
    const float shift = log2_gain - offset;
#pragma unroll
    for (int i = 0; i < Keys / 8; ++i)
#pragma unroll
      for (int c = 2 * half; c < 2 * half + 2; ++c) {
        const float p =
            exp2_ftz(fmaf(scores[4 * i + c], scale[half][kBlockScales && i >= 8], shift));
        scores[4 * i + c] = p;
        sum += p;
      }
    rows.sum[half] = sum;
  }
}

// P as the A operand of the output product: 16 keys per step, the m16n8k16 A-fragment layout.
template <int Keys>
__device__ __forceinline__ void pack_probabilities(const float (&p)[Keys / 2],
                                                   uint32_t (&fragments)[Keys / 16][4]) {
#pragma unroll
  for (int ks = 0; ks < Keys / 16; ++ks) {
    fragments[ks][0] = pack_bf16x2(p[8 * ks + 0], p[8 * ks + 1]);
    fragments[ks][1] = pack_bf16x2(p[8 * ks + 2], p[8 * ks + 3]);
    fragments[ks][2] = pack_bf16x2(p[8 * ks + 4], p[8 * ks + 5]);
    fragments[ks][3] = pack_bf16x2(p[8 * ks + 6], p[8 * ks + 7]);
  }
}

// P as e4m3 A fragments of the FP8 output product: 32 keys per step. Step ks takes score columns
// 32ks .. 32ks + 31, of which this thread holds 8i + 2(lane mod 4) + {0, 1} for i = 4ks .. 4ks + 3
// (fp8_values.h orders V's keys to match): bytes (i = 4ks, 4ks + 1) of its row, then of the row 8
// below, then the same for i = 4ks + 2, 4ks + 3. Rounded to nearest, saturating (p <= 448).
__device__ __forceinline__ uint32_t pack_e4m3x4(float a, float b, float c, float d) {
  uint16_t low, high;  // cvt puts its first operand in the upper byte
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(low) : "f"(b), "f"(a));
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(high) : "f"(d), "f"(c));
  return uint32_t(low) | (uint32_t(high) << 16);
}
template <int Keys>
__device__ __forceinline__ void pack_probabilities_e4m3(const float (&p)[Keys / 2],
                                                        uint32_t (&fragments)[Keys / 32][4]) {
#pragma unroll
  for (int ks = 0; ks < Keys / 32; ++ks) {
    const int b = 16 * ks;
    fragments[ks][0] = pack_e4m3x4(p[b + 0], p[b + 1], p[b + 4], p[b + 5]);
    fragments[ks][1] = pack_e4m3x4(p[b + 2], p[b + 3], p[b + 6], p[b + 7]);
    fragments[ks][2] = pack_e4m3x4(p[b + 8], p[b + 9], p[b + 12], p[b + 13]);
    fragments[ks][3] = pack_e4m3x4(p[b + 10], p[b + 11], p[b + 14], p[b + 15]);
  }
}

template <int D>
__device__ __forceinline__ void output_product_e4m3(float (&o)[D / 2], const uint32_t (&a)[4],
                                                    uint64_t b, int accumulate) {
  if constexpr (D == 64)
    wgmma_m64n64k32_e4m3_rs(o, a, b, accumulate);
  else
    wgmma_m64n128k32_e4m3_rs(o, a, b, accumulate);
}

// log2(448): the FP8 probabilities' gain.
constexpr float kLog2Fp8Gain = 8.807354922057604f;

// Bytes of one tile row of Q or K in shared memory: an int8 row is one 128-byte swizzle row.
template <int D, bool kInt8>
constexpr int kQkRowBytes = kInt8 ? kInt8Width : D * 2;
// Bytes of one V slot: a tile's keys by D in bf16, or (FP8 values) D channel rows of 128 keys.
template <int D, bool kFp8V>
constexpr int kVSlotBytes = (kFp8V ? 1 : 2) * kTileKeys* D;

template <int D, int kMode, bool kInt8, bool kFp8V>
__global__ void __launch_bounds__(kThreads, 1)
    flash_forward_hopper_kernel(const FlashAttentionArgs args,
                                const __grid_constant__ CUtensorMap q_map,
                                const __grid_constant__ CUtensorMap k_map,
                                const __grid_constant__ CUtensorMap v_map) {
  extern __shared__ unsigned char shared_raw[];
  // TMA's and wgmma's swizzle is on absolute shared addresses: tiles start on 1024-byte boundaries.
  const uint32_t raw_address = shared_address(shared_raw);
  unsigned char* shared_aligned = shared_raw + (((raw_address + 1023) & ~1023u) - raw_address);
  constexpr bool kSparse = kMode != kFlashDense, kPerHalf = kPerHalfOf<kMode>;
  constexpr bool kCubes = kMode == kFlashCubes;
  // The cube grid (kCubes), rebuilt from the arguments where it is used, so no register holds
  // it across the consumers' loop.
  auto cube_grid = [&] { return CubeGrid(args.video_grid); };
  constexpr int kKeyStages = kKeyStagesOf<kMode>, kSets = kSlotSetsOf<kMode>;
  constexpr int kTileRegs = kTileKeys / 2;            // m64nKeys fp32 accumulators per thread
  constexpr int kEntries = kTileKeys / kFlashBlockN;  // list entries per tile
  constexpr int kQkRow = kQkRowBytes<D, kInt8>;
  // 128-byte column halves of a Q or K row (bf16: D / 64; int8: one) and of a V row.
  constexpr int kQkHalves = kQkRow / 128, kVHalves = D / 64;
  unsigned char* shared_q = shared_aligned;
  // kSets x kKeyStages [128, row] key tiles, then kSets x kStages [128, D] value tiles.
  unsigned char* shared_k = shared_q + kFlashBlockM * kQkRow;
  static_assert(!kFp8V || (kInt8 && kMode == kFlashDense), "FP8 values are dense INT8 only");
  constexpr int kVSlot = kVSlotBytes<D, kFp8V>;
  unsigned char* shared_v = shared_k + kSets * kKeyStages * kTileKeys * kQkRow;
  Barriers* barriers = reinterpret_cast<Barriers*>(shared_v + kSets * kStages * kVSlot);
  auto address_of = [](uint64_t& barrier) { return shared_address(&barrier); };

  const int query_block = blockIdx.x, head = blockIdx.y, batch = blockIdx.z;
  const int thread = threadIdx.x, warpgroup = thread / 128;
  const int warp_in_group = (thread % 128) / 32, lane = thread % 32;
  const int64_t first_query = int64_t(query_block) * kFlashBlockM;

  // The list of this thread's half of the query block: a consumer's own rows, or the half a
  // producer warp streams (both halves share one list unless lists are per 64 rows). Scalars, not
  // arrays indexed by the half: those would live in local memory.
  const int half_of_thread = warpgroup == 0 ? min(warp_in_group, 1) : warpgroup - 1;
  int list_begin = 0, list_size = 0;
  bool any_tiles = false;  // in either half
  if constexpr (kPerHalf) {
    const int64_t halves =
        kCubes ? cube_grid().count : (args.seq_q + kFlashBlockM / 2 - 1) / (kFlashBlockM / 2);
    const int64_t first = 2 * int64_t(query_block);
    const int64_t base = (int64_t(batch) * args.heads + head) * halves + first;
    const int size_0 = args.block_offsets[base + 1] - args.block_offsets[base];
    const int size_1 =
        first + 1 < halves ? args.block_offsets[base + 2] - args.block_offsets[base + 1] : 0;
    list_begin = args.block_offsets[base + half_of_thread];
    list_size = half_of_thread == 0 ? size_0 : size_1;
    any_tiles = size_0 + size_1 > 0;
  } else if constexpr (kSparse) {
    const int64_t entry = (int64_t(batch) * args.heads + head) * gridDim.x + query_block;
    list_begin = args.block_offsets[entry];
    list_size = args.block_offsets[entry + 1] - list_begin;
    any_tiles = list_size > 0;
  } else {
    list_size = int((args.seq_k + kFlashBlockN - 1) / kFlashBlockN);
    any_tiles = list_size > 0;
  }
  const int tiles = (list_size + kEntries - 1) / kEntries;
  // First key of list entry `e` (entries kEntries·t .. make tile t).
  auto first_key_of = [&](int e) {
    return int64_t(kSparse ? args.block_indices[list_begin + e] : e) * kFlashBlockN;
  };

  // Where entry e's keys end: the sequence's end or the block's valid length.
  auto key_limit = [&](int e, int64_t first_key) {
    int64_t limit = args.seq_k;
    if constexpr (kSparse)
      if (args.key_block_lengths)
        limit = min(limit, first_key + args.key_block_lengths[args.block_indices[list_begin + e]]);
    return limit;
  };
  if (thread == 0) {
    barrier_init(address_of(barriers->q_full), 1);
    for (int c = 0; c < kSets; ++c)
      for (int s = 0; s < kStages; ++s) {
        barrier_init(address_of(barriers->k_full[c][s]), 1);
        barrier_init(address_of(barriers->v_full[c][s]), 1);
        barrier_init(address_of(barriers->k_empty[c][s]), kConsumerWarps / kSets);
        barrier_init(address_of(barriers->v_empty[c][s]), kConsumerWarps / kSets);
      }
    barrier_init_fence();
  }
  __syncthreads();
  // Slot s of set c.
  auto k_slot = [&](int c, int s) { return shared_k + (c * kKeyStages + s) * kTileKeys * kQkRow; };
  auto v_slot = [&](int c, int s) { return shared_v + (c * kStages + s) * kVSlot; };

  if (warpgroup == 0) {  // producers: warp 0 (and with lists per 64 rows warp 1), one lane each
    release_registers<kProducerRegisters>();
    if (lane != 0 || warp_in_group >= kSets) return;
    const int set = kPerHalf ? warp_in_group : 0;
    // No tiles: no copies either (a CTA must not exit with copies into its shared memory pending;
    // a consumer that has tiles waits for Q).
    if (set == 0 && any_tiles) {
      if constexpr (kCubes) {  // the block's one or two query cubes
        const CubeGrid grid = cube_grid();
        const int cubes_here = min(2, grid.count - 2 * query_block);
        barrier_expect_bytes(address_of(barriers->q_full), cubes_here * 64 * kQkRow);
        for (int c = 0; c < cubes_here; ++c) {
          const int3 o = grid.origin(2 * query_block + c);
          for (int half = 0; half < kQkHalves; ++half)
            tensor_copy_5d(shared_address(shared_q + half * kFlashBlockM * 128 + c * 64 * 128),
                           &q_map, half * 64, head, o.z, o.y, batch * grid.frames + o.x,
                           address_of(barriers->q_full));
        }
      } else {
        barrier_expect_bytes(address_of(barriers->q_full), kFlashBlockM * kQkRow);
        for (int half = 0; half < kQkHalves; ++half)
          tensor_copy_4d(shared_address(shared_q + half * kFlashBlockM * 128), &q_map, half * 64,
                         int(first_query), head, batch, address_of(barriers->q_full));
      }
    }
    // A 128-key tile's rows 0-63 are entry 2t, rows 64-127 entry 2t + 1.
    // Tile t's blocks, worked out before the producer waits for free slots (the cube origins'
    // divisions and the list reads overlap the wait): where each starts in the maps (its first
    // key, or its cube's column, row and frame of the batch's frames) and which of its rows are
    // keys. A missing second entry loads the first again, with no rows: its scores are masked and
    // its values need only be finite.
    struct TileBlocks {
      int3 at[kEntries];
      uint64_t rows[kEntries];
    };
    auto tile_blocks = [&](int t) {
      TileBlocks blocks;
#pragma unroll
      for (int i = 0; i < kEntries; ++i) {
        const int e = kEntries * t + i;
        if (e >= list_size) {
          blocks.at[i] = blocks.at[0], blocks.rows[i] = 0;
          continue;
        }
        if constexpr (kCubes) {
          const CubeGrid grid = cube_grid();
          const int3 o = grid.origin(args.block_indices[list_begin + e]);
          blocks.at[i] = make_int3(o.z, o.y, batch * grid.frames + o.x);
          blocks.rows[i] = grid.valid_rows(o);
        } else {
          const int64_t first_key = first_key_of(e);
          blocks.at[i] = make_int3(int(first_key), 0, 0);
          blocks.rows[i] = first_rows(key_limit(e, first_key) - first_key);
        }
      }
      return blocks;
    };
    // (`halves` 128-byte columns per row; the map's inner coordinate counts its own elements, and
    // only bf16 rows have a second column, 64 elements in.)
    auto copy_tile = [&](const CUtensorMap* map, unsigned char* slot, uint64_t& full,
                         const TileBlocks& blocks, int halves) {
      barrier_expect_bytes(address_of(full), kTileKeys * 128 * halves);
      for (int half = 0; half < halves; ++half)
#pragma unroll
        for (int i = 0; i < kEntries; ++i) {
          const uint32_t destination =
              shared_address(slot + half * kTileKeys * 128 + i * kFlashBlockN * 128);
          const int3 at = blocks.at[i];
          if constexpr (kCubes)
            tensor_copy_5d(destination, map, half * 64, head, at.x, at.y, at.z, address_of(full));
          else
            tensor_copy_4d(destination, map, half * 64, at.x, head, batch, address_of(full));
        }
    };
    for (int t = 0; t < tiles; ++t) {
      const TileBlocks blocks = tile_blocks(t);
      // Once the key slot is free, its masks go in before its copies are armed: the consumers
      // read them after the keys have arrived.
      const int k_slot_index = t % kKeyStages, k_round = t / kKeyStages;
      if (k_round > 0)
        barrier_wait(address_of(barriers->k_empty[set][k_slot_index]), (k_round - 1) & 1);
#pragma unroll
      for (int i = 0; i < kEntries; ++i) barriers->key_rows[set][k_slot_index][i] = blocks.rows[i];
      copy_tile(&k_map, k_slot(set, k_slot_index), barriers->k_full[set][k_slot_index], blocks,
                kQkHalves);
      const int v_slot_index = t % kStages, v_round = t / kStages;
      if (v_round > 0)
        barrier_wait(address_of(barriers->v_empty[set][v_slot_index]), (v_round - 1) & 1);
      if constexpr (kFp8V) {  // D channel rows of the tile's 128 keys, from its first key on
        uint64_t& full = barriers->v_full[set][v_slot_index];
        barrier_expect_bytes(address_of(full), kVSlot);
        tensor_copy_4d(shared_address(v_slot(set, v_slot_index)), &v_map, blocks.at[0].x, 0, head,
                       batch, address_of(full));
      } else {
        copy_tile(&v_map, v_slot(set, v_slot_index), barriers->v_full[set][v_slot_index], blocks,
                  kVHalves);
      }
    }
    return;
  }

  // Consumers: warpgroup 1 takes rows 0-63 of the query block, warpgroup 2 rows 64-127.
  claim_registers<kConsumerRegisters>();
  const int consumer = warpgroup - 1;
  const int set = kPerHalf ? consumer : 0;
  constexpr int kORegs = D / 2;  // m64nD fp32 accumulators per thread
  float acc[kORegs];
#pragma unroll
  for (int i = 0; i < kORegs; ++i) acc[i] = 0.0f;
  SoftmaxRows rows;
  const float scale_log2 = args.scale * 1.4426950408889634f;
  const uint32_t q_address = shared_address(shared_q) + consumer * 64 * 128;
  float scores[kTileRegs];
  uint32_t p_fragments[kFp8V ? kTileKeys / 32 : kTileKeys / 16][4];
  // kFp8V: each tile's P·V, before it joins acc in float32.
  float tile_out[kFp8V ? kORegs : 1];
  constexpr float kLog2Gain = kFp8V ? kLog2Fp8Gain : 0.0f;
  auto pack = [&] {
    if constexpr (kFp8V)
      pack_probabilities_e4m3<kTileKeys>(scores, p_fragments);
    else
      pack_probabilities<kTileKeys>(scores, p_fragments);
  };
  // What the in-flight score product writes (with INT8 scores, the int32 bits of its exact
  // accumulators, converted in place): pinned around it so no access moves across.
  auto pin_scores = [&] { pin_registers(scores); };
  // kInt8: this thread's two rows' scales (0 past the end: those rows are never written), and
  // where its (b, h)'s key-group scales start, at its own group (lane mod 4) of each block.
  float q_scale[2] = {0.0f, 0.0f};
  const float* k_scales = nullptr;
  if constexpr (kInt8) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int64_t row = first_query + consumer * 64 + warp_in_group * 16 + (lane >> 2) + half * 8;
      if (row < args.seq_q)
        q_scale[half] = args.q_scales[(int64_t(batch) * args.heads + head) * args.seq_q + row];
    }
    const int64_t key_blocks = (args.seq_k + kFlashBlockN - 1) / kFlashBlockN;
    k_scales = args.k_scales + (int64_t(batch) * args.heads + head) * key_blocks * 4 + (lane & 3);
  }

  auto release = [&](uint64_t& empty) {  // this warp is done reading a slot
    __syncwarp();
    if (lane == 0) barrier_arrive(address_of(empty));
  };
  auto issue_scores = [&](int t) {  // scores = Q·K_tᵀ, asynchronously
    const uint32_t k_address = shared_address(k_slot(set, t % kKeyStages));
    if constexpr (kInt8) {
#pragma unroll
      for (int kk = 0; kk < kInt8Width / 32; ++kk)
        wgmma_m64n128k32_s8_ss(scores, swizzle128_descriptor(q_address + kk * 32, 16, 1024),
                               swizzle128_descriptor(k_address + kk * 32, 16, 1024), kk > 0);
    } else {
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        const uint32_t half = kk / 4, step = (kk % 4) * 32;
        wgmma_m64n128k16_ss(
            scores, swizzle128_descriptor(q_address + half * kFlashBlockM * 128 + step, 16, 1024),
            swizzle128_descriptor(k_address + half * kTileKeys * 128 + step, 16, 1024), kk > 0);
      }
    }
  };
  // O += P_t·V_t, asynchronously; V [keys, D] is N-major for this product (transposed read):
  // 64-column halves are kTileKeys * 128 bytes apart, 8-key groups 1024 bytes apart.
  // kFp8V: tile_out = P_t·V_t; V_t is D channel rows of 128 keys (K-major, like K with INT8).
  auto issue_output = [&](int t) {
    const uint32_t v_address = shared_address(v_slot(set, t % kStages));
    if constexpr (kFp8V) {
#pragma unroll
      for (int ks = 0; ks < kTileKeys / 32; ++ks)
        output_product_e4m3<D>(tile_out, p_fragments[ks],
                               swizzle128_descriptor(v_address + ks * 32, 16, 1024), ks > 0);
    } else {
#pragma unroll
      for (int ks = 0; ks < kTileKeys / 16; ++ks)
        OutputProduct<D>::run(
            acc, p_fragments[ks],
            swizzle128_descriptor(v_address + ks * 16 * 128, kTileKeys * 128, 1024));
    }
  };
  // kFp8V: acc = acc · (tile t's correction) + tile t's product, in float32.
  auto fold = [&](const float(&correction)[2]) {
#pragma unroll
    for (int i = 0; i < D / 8; ++i) {
      acc[4 * i + 0] = fmaf(acc[4 * i + 0], correction[0], tile_out[4 * i + 0]);
      acc[4 * i + 1] = fmaf(acc[4 * i + 1], correction[0], tile_out[4 * i + 1]);
      acc[4 * i + 2] = fmaf(acc[4 * i + 2], correction[1], tile_out[4 * i + 2]);
      acc[4 * i + 3] = fmaf(acc[4 * i + 3], correction[1], tile_out[4 * i + 3]);
    }
  };
  // The row masks of tile t's key slot (read once its keys are in, before the slot is released).
  uint64_t tile_rows[2];
  auto read_key_rows = [&](int t) {
    const uint64_t* key_rows = barriers->key_rows[set][t % kKeyStages];
    tile_rows[0] = key_rows[0], tile_rows[1] = key_rows[1];
  };
  auto softmax = [&](int t, float(&correction)[2]) {
    const uint64_t valid_a = tile_rows[0], valid_b = tile_rows[1];
    const bool mask = ~valid_a != 0 || (kEntries == 2 && ~valid_b != 0);
    if constexpr (kInt8) {
      // int -> float by the exponent trick: I2F issues 16 per clock per SM, the exponentials'
      // rate, while an integer add and a float subtract run on the 64- and 128-wide pipes. Exact
      // for |x| < 2^22 (1.5·2^23 + x is then a float with x in its low mantissa bits), and
      // |q·k| <= 128 · 127² < 2^21. The scales multiply in the exponentials' fused multiply-add.
#pragma unroll
      for (int i = 0; i < kTileRegs; ++i)
        scores[i] = __int_as_float(__float_as_int(scores[i]) + 0x4b400000) - 12582912.0f;
      // Tile t's key-group scales, entries a and b.
      const int entry = kEntries * t;
      const int64_t first_key_a = first_key_of(entry);
      const int64_t first_key_b =
          kEntries == 1 || entry + 1 >= list_size ? 0 : first_key_of(entry + 1);
      const float scale_a = k_scales[(first_key_a / kFlashBlockN) * 4];
      const float scale_b = kEntries == 2 ? k_scales[(first_key_b / kFlashBlockN) * 4] : 0.0f;
      // A zero scale (a group of zeros, padding) would turn a masked -inf into NaN; 1e-30 keeps
      // -inf and leaves |q·k| <= 2^21 scores at 2e-24, which is 0 to every sum they join.
      float scale[2][2];
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        scale[half][0] = fmaxf(q_scale[half] * scale_a * scale_log2, 1e-30f);
        scale[half][1] = fmaxf(q_scale[half] * scale_b * scale_log2, 1e-30f);
      }
      softmax_tile<kTileKeys, true>(scores, rows, scale, kLog2Gain, mask, valid_a, valid_b, lane,
                                    correction);
    } else {
      const float scale[2][2] = {{scale_log2, scale_log2}, {scale_log2, scale_log2}};
      softmax_tile<kTileKeys, false>(scores, rows, scale, kLog2Gain, mask, valid_a, valid_b, lane,
                                     correction);
    }
  };

  // Turns: consumer 0 issues first. Every issue phase waits for its turn and passes it on, except
  // consumer 1's last one (nobody waits for it), so no barrier arrival is left pending at exit.
  // The factor the output owes for the latest tile's new row maxima; applied right before that
  // tile's P·V is issued, while the tensor cores already run the next Q·Kᵀ.
  float owed[2] = {1.0f, 1.0f};
  // Once the row maxima settle (after the first few tiles on most inputs) every factor is exactly
  // 1 and the multiplies change nothing: the warp skips them when none of its rows moved.
  auto settle = [&] {
    if (!__any_sync(0xffffffffu, owed[0] != 1.0f || owed[1] != 1.0f)) return;
#pragma unroll
    for (int i = 0; i < D / 8; ++i) {
      acc[4 * i + 0] *= owed[0];
      acc[4 * i + 1] *= owed[0];
      acc[4 * i + 2] *= owed[1];
      acc[4 * i + 3] *= owed[1];
    }
  };
  int phases_left = tiles + 1;  // tile 0's scores, tiles - 1 overlapped steps, the last output
  // (Measured on an H100: turns help D = 64, whose tiles carry half the matrix work, and cost
  // D = 128 a few percent, so they are used for D = 64 only.)
  // (Not with lists per 64 rows: the consumers' tile counts differ, turns need them equal.)
  // (Measured again on an H200 after the ftz exponentials, 2026-11-29: turns at D = 128 gave
  // dense 617 against 610-616 TFLOP/s without, inside the spread, and cost the block-sparse kernel
  // 6%: 571 against 606.)
  // (With FP8 values, where the products take half as long and the exponentials as long as
  // before, turns measured slower too: 664.5 against 682.5 TFLOP/s, H200, 2026-11-29.)
  constexpr bool kTurns = D == 64 && !kPerHalf;
  auto begin_issue = [&] {
    if (kTurns) wait_for_turn(consumer);
  };
  auto end_issue = [&] {
    if (kTurns && (--phases_left > 0 || consumer == 0)) pass_turn(consumer);
  };
  if (kTurns && tiles > 0 && consumer == 1) pass_turn(consumer);

  if (tiles > 0) {
    barrier_wait(address_of(barriers->q_full), 0);
    barrier_wait(address_of(barriers->k_full[set][0]), 0);
    read_key_rows(0);
    pin_scores();
    begin_issue();
    wgmma_fence();
    issue_scores(0);
    wgmma_commit();
    end_issue();
    wgmma_wait_all();
    pin_scores();
    release(barriers->k_empty[set][0]);
    softmax(0, owed);  // the output is still zero: what it owes is moot
    pack();
  }
  // Tile t: while the tensor cores run O += P_t·V_t, the threads turn tile t + 1's scores into
  // probabilities; the output is rescaled once that product is done. (The last tile is peeled
  // off so the loop body has no branch around its wgmma: ptxas then keeps them asynchronous.)
  for (int t = 0; t + 1 < tiles; ++t) {
    const int next = t + 1;
    const float owed_now[2] = {owed[0], owed[1]};  // tile t's (kFp8V folds it in after softmax)
    barrier_wait(address_of(barriers->k_full[set][next % kKeyStages]), (next / kKeyStages) & 1);
    read_key_rows(next);
    barrier_wait(address_of(barriers->v_full[set][t % kStages]), (t / kStages) & 1);
    pin_scores();
    pin_registers(acc);
    begin_issue();
    wgmma_fence();
    issue_scores(next);
    wgmma_commit();
    if constexpr (!kFp8V) {
      settle();
      pin_registers(acc);
      wgmma_fence();  // orders the rescaled accumulators before the product that adds to them
    }
    issue_output(t);
    wgmma_commit();
    end_issue();
    asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");  // scores of t + 1 done
    pin_scores();
    release(barriers->k_empty[set][next % kKeyStages]);
    softmax(next, owed);
    wgmma_wait_all();  // O += P_t·V_t done: P_t's registers and O are free again
    pin_registers(acc);
    release(barriers->v_empty[set][t % kStages]);
    if constexpr (kFp8V) {
      pin_registers(tile_out);
      fold(owed_now);
    }
    pack();
  }
  if (tiles > 0) {
    const int last = tiles - 1;
    barrier_wait(address_of(barriers->v_full[set][last % kStages]), (last / kStages) & 1);
    if constexpr (!kFp8V) settle();
    pin_registers(acc);
    begin_issue();
    wgmma_fence();
    issue_output(last);
    wgmma_commit();
    end_issue();
    wgmma_wait_all();
    pin_registers(acc);
    if constexpr (kFp8V) {
      pin_registers(tile_out);
      fold(owed);
    }
  }
  if constexpr (kFp8V) {  // the channel scales of this thread's columns
    const float* channel =
        args.v_scales + (int64_t(batch) * args.heads + head) * D + 2 * (lane & 3);
#pragma unroll
    for (int i = 0; i < D / 8; ++i) {
      const float2 s = *reinterpret_cast<const float2*>(channel + 8 * i);
      acc[4 * i + 0] *= s.x, acc[4 * i + 1] *= s.y, acc[4 * i + 2] *= s.x, acc[4 * i + 3] *= s.y;
    }
  }

  // acc[4i + c]: row lane/4 (+8 for c >= 2) of this warp's 16, column 8i + 2(lane%4) + (c&1).
  bf16* out =
      static_cast<bf16*>(args.out) + batch * args.out_strides.batch + head * args.out_strides.head;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    float sum = rows.sum[half];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    const float inverse = sum > 0.0f ? 1.0f / sum : 0.0f;
    const int64_t row = first_query + consumer * 64 + warp_in_group * 16 + (lane >> 2) + half * 8;
    int64_t target = row;
    if constexpr (kCubes) {  // row r of a cube: the token at its (t, h, w) offset, if inside
      const int cube = 2 * query_block + consumer, r = int(row % 64);
      const CubeGrid grid = cube_grid();
      if (cube >= grid.count) continue;
      const int3 o = grid.origin(cube);
      const int t = o.x + r / 16, h = o.y + (r / 4) % 4, w = o.z + r % 4;
      if (t >= grid.frames || h >= grid.height || w >= grid.width) continue;
      target = args.out_rows ? args.out_rows[row] : (int64_t(t) * grid.height + h) * grid.width + w;
    } else {
      if (row >= args.seq_q) continue;
      if (args.out_rows) target = args.out_rows[row];
    }
    bf16* out_row = out + target * args.out_strides.token;
    if (target >= 0)
#pragma unroll
      for (int i = 0; i < D / 8; ++i)
        *reinterpret_cast<uint32_t*>(out_row + i * 8 + 2 * (lane & 3)) =
            pack_bf16x2(acc[4 * i + 2 * half] * inverse, acc[4 * i + 2 * half + 1] * inverse);
    if (args.lse && (lane & 3) == 0)
      args.lse[(int64_t(batch) * args.heads + head) * args.seq_q + row] =
          sum > 0.0f ? (rows.max[half] + log2f(sum) - kLog2Gain) * 0.6931471805599453f : -INFINITY;
  }
}

// A 4-D tensor map over [batch, seq, heads, D] bf16 (D innermost) whose box is 64 elements of D
// (128 bytes, the swizzle width) by `rows` tokens.
// cuTensorMapEncodeTiled through the runtime's driver entry point (no link against libcuda).
PFN_cuTensorMapEncodeTiled_v12000 encode_tiled() {
  static const PFN_cuTensorMapEncodeTiled_v12000 function = [] {
    void* pointer = nullptr;
    cudaDriverEntryPointQueryResult found{};
    MMGEN_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &pointer, 12000,
                                                      cudaEnableDefault, &found));
    check_driver(found == cudaDriverEntryPointSuccess ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND,
                 "cudaGetDriverEntryPointByVersion(cuTensorMapEncodeTiled)", __FILE__, __LINE__);
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(pointer);
  }();
  return function;
}

// A 4-D tensor map over [batch, seq, heads, width] (width innermost; bf16, or int8 rows of
// kInt8Width) whose box is 128 bytes of the row (the swizzle width) by `rows` tokens.
CUtensorMap make_tensor_map(const void* base, const AttentionStrides& strides, int64_t batch,
                            int64_t seq, int64_t heads, int64_t width, int rows,
                            bool int8 = false) {
  CUtensorMap map;
  const int64_t element = int8 ? 1 : 2;
  const cuuint64_t sizes[4] = {cuuint64_t(width), cuuint64_t(seq), cuuint64_t(heads),
                               cuuint64_t(batch)};
  const cuuint64_t byte_strides[3] = {cuuint64_t(strides.token * element),
                                      cuuint64_t(strides.head * element),
                                      cuuint64_t(strides.batch * element)};
  const cuuint32_t box[4] = {cuuint32_t(128 / element), cuuint32_t(rows), 1, 1};
  const cuuint32_t element_strides[4] = {1, 1, 1, 1};
  check_driver(
      encode_tiled()(&map, int8 ? CU_TENSOR_MAP_DATA_TYPE_UINT8 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
                     4, const_cast<void*>(base), sizes, byte_strides, box, element_strides,
                     CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                     CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
      "cuTensorMapEncodeTiled", __FILE__, __LINE__);
  return map;
}

// A 5-D tensor map over a video's tokens [batch · frames, height, width, heads, D] bf16 (D
// innermost; the batches contiguous, so their frames are one axis) whose box is one 4x4x4 cube of
// one head, 64 elements of D (128 bytes) per token: 64 rows of the swizzled tile, in (t, h, w)
// order. Tokens past the video's edges arrive as zeros.
CUtensorMap make_cube_map(const void* base, const AttentionStrides& strides, int64_t batch,
                          const int64_t (&grid)[3], int64_t heads, int64_t head_dim) {
  CUtensorMap map;
  const cuuint64_t sizes[5] = {cuuint64_t(head_dim), cuuint64_t(heads), cuuint64_t(grid[2]),
                               cuuint64_t(grid[1]), cuuint64_t(batch * grid[0])};
  const int64_t token = strides.token * 2;
  const cuuint64_t byte_strides[4] = {cuuint64_t(strides.head * 2), cuuint64_t(token),
                                      cuuint64_t(token * grid[2]),
                                      cuuint64_t(token * grid[2] * grid[1])};
  const cuuint32_t box[5] = {64, 1, 4, 4, 4};
  const cuuint32_t element_strides[5] = {1, 1, 1, 1, 1};
  check_driver(
      encode_tiled()(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 5, const_cast<void*>(base), sizes,
                     byte_strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                     CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                     CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
      "cuTensorMapEncodeTiled (cubes)", __FILE__, __LINE__);
  return map;
}

// Q, then the key tiles of 128 rows, then the value tiles, then the barriers.
template <int D, int kMode, bool kInt8, bool kFp8V = false>
void launch(const FlashAttentionArgs& args, cudaStream_t stream) {
  constexpr int kSets = kSlotSetsOf<kMode>;
  constexpr int kSharedBytes = kFlashBlockM * kQkRowBytes<D, kInt8> +
                               kSets * (kTileKeys * kKeyStagesOf<kMode> * kQkRowBytes<D, kInt8> +
                                        kStages * kVSlotBytes<D, kFp8V>)+int(sizeof(Barriers)) +
                               1024;
  static_assert(kSharedBytes <= 227 * 1024, "the tiles exceed an sm_90 CTA's shared memory");
  auto kernel = flash_forward_hopper_kernel<D, kMode, kInt8, kFp8V>;
  static const bool configured = [&] {
    MMGEN_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSharedBytes));
    return true;
  }();
  (void)configured;
  // Sequence coordinates are 32-bit in the tensor-copy instruction (flash_attention_forward
  // checks the lengths); the heads' and batches' offsets are the maps' strides.
  const int64_t qk_width = kInt8 ? kInt8Width : D;
  CUtensorMap q_map, k_map, v_map;
  int64_t query_rows = args.seq_q;  // rows of the query blocks: 64 per cube when reading cubes
  if constexpr (kMode == kFlashCubes) {
    static_assert(!kInt8, "cubes are read as bf16");
    q_map = make_cube_map(args.q, args.q_strides, args.batch, args.video_grid, args.heads, D);
    k_map = make_cube_map(args.k, args.k_strides, args.batch, args.video_grid, args.heads, D);
    v_map = make_cube_map(args.v, args.v_strides, args.batch, args.video_grid, args.heads, D);
    query_rows = 64 * video_cubes_along(args.video_grid[0]) *
                 video_cubes_along(args.video_grid[1]) * video_cubes_along(args.video_grid[2]);
  } else {
    q_map = make_tensor_map(args.q, args.q_strides, args.batch, args.seq_q, args.heads, qk_width,
                            kFlashBlockM, kInt8);
    k_map = make_tensor_map(args.k, args.k_strides, args.batch, args.seq_k, args.heads, qk_width,
                            kFlashBlockN, kInt8);
    if constexpr (kFp8V) {
      // FP8 values [batch, heads, D, v_keys] (fp8_values.h) as such a map of bytes: v_keys per
      // "row" of D "tokens", so a box is one tile, 128 keys by the D channels.
      const int64_t keys = args.v_keys;
      v_map = make_tensor_map(args.v, {keys * D * args.heads, keys, keys * D}, args.batch, D,
                              args.heads, keys, D, /*int8=*/true);
    } else {
      v_map = make_tensor_map(args.v, args.v_strides, args.batch, args.seq_k, args.heads, D,
                              kFlashBlockN);
    }
  }
  const dim3 grid(unsigned((query_rows + kFlashBlockM - 1) / kFlashBlockM), unsigned(args.heads),
                  unsigned(args.batch));
  kernel<<<grid, kThreads, kSharedBytes, stream>>>(args, q_map, k_map, v_map);
  MMGEN_CUDA_CHECK_LAUNCH();
}

}  // namespace

template <int D, int kMode>
void launch_flash_attention_hopper(const FlashAttentionArgs& args, cudaStream_t stream) {
  launch<D, kMode, false>(args, stream);
}

template <int D, int kMode>
void launch_flash_attention_hopper_int8(const FlashAttentionArgs& args, cudaStream_t stream) {
  launch<D, kMode, true>(args, stream);
}

template <int D>
void launch_flash_attention_hopper_int8_fp8(const FlashAttentionArgs& args, cudaStream_t stream) {
  launch<D, kFlashDense, true, true>(args, stream);
}
template void launch_flash_attention_hopper_int8_fp8<64>(const FlashAttentionArgs&, cudaStream_t);
template void launch_flash_attention_hopper_int8_fp8<128>(const FlashAttentionArgs&, cudaStream_t);

#define MMGEN_INSTANTIATE(D, MODE)                                                               \
  template void launch_flash_attention_hopper<D, MODE>(const FlashAttentionArgs&, cudaStream_t); \
  template void launch_flash_attention_hopper_int8<D, MODE>(const FlashAttentionArgs&,           \
                                                            cudaStream_t);
MMGEN_INSTANTIATE(64, kFlashDense)
MMGEN_INSTANTIATE(64, kFlashSparse)
MMGEN_INSTANTIATE(64, kFlashPerHalf)
MMGEN_INSTANTIATE(128, kFlashDense)
MMGEN_INSTANTIATE(128, kFlashSparse)
MMGEN_INSTANTIATE(128, kFlashPerHalf)
#undef MMGEN_INSTANTIATE
template void launch_flash_attention_hopper<64, kFlashCubes>(const FlashAttentionArgs&,
                                                             cudaStream_t);
template void launch_flash_attention_hopper<128, kFlashCubes>(const FlashAttentionArgs&,
                                                              cudaStream_t);

}  // namespace mmgen::cuda
