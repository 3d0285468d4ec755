// Dense and block-sparse attention on NVIDIA GPUs: one FlashAttention-style kernel (bf16 in, fp32
// accumulation and online softmax, bf16 out, optional log-sum-exp), driven either over every key
// block or over a per-query-block list of key blocks. The sparse backends (STA, VSA, V-MoBA, SLA,
// SVG2) express their patterns as such lists.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace mmgen::cuda {

// The row width of the INT8 q and k (bytes): one 128-byte swizzle row, as the Hopper kernel reads
// its tiles; head sizes below it are zero-padded (exact: zeros add nothing to the products).
inline constexpr int kInt8Width = 128;

// Blocking of the kernel: a query block is kFlashBlockM tokens, a key block kFlashBlockN tokens.
// Block lists are written in these units.
inline constexpr int kFlashBlockM = 128;
inline constexpr int kFlashBlockN = 64;

// Tensors are [batch, seq, heads, head_dim] bf16 with unit stride over head_dim; the other strides
// are in elements, so views (a head slice, q/k/v packed in one buffer) need no copy.
struct AttentionStrides {
  int64_t batch = 0, token = 0, head = 0;
};

// Which kernel runs: the Hopper one (wgmma, sm_90) where the GPU has it, else the portable one
// (mma.sync); tests and benchmarks may ask for either.
enum class FlashKernel { Auto, Hopper, Portable };

struct FlashAttentionArgs {
  const void* q = nullptr;  // bf16
  const void* k = nullptr;
  const void* v = nullptr;
  void* out = nullptr;   // bf16, same layout rules
  float* lse = nullptr;  // optional [batch, heads, seq_q] float32, natural log; -inf for a row
                         // that saw no key
  AttentionStrides q_strides, k_strides, v_strides, out_strides;
  int64_t batch = 0, heads = 0, seq_q = 0, seq_k = 0, head_dim = 0;
  float scale = 1.0f;  // multiplies q·k

  // Block-sparse mode when set: for query block qb of (b, h) the key blocks
  // block_indices[block_offsets[i] .. block_offsets[i + 1]) with i = (b * heads + h) * q_blocks +
  // qb, q_blocks = ceil(seq_q / kFlashBlockM). Device pointers (int32). A query block with an
  // empty list writes zeros (and -inf LSE).
  const int32_t* block_offsets = nullptr;
  const int32_t* block_indices = nullptr;
  // Optional, block-sparse mode only. key_block_lengths[j]: how many tokens of key block j (from
  // its first) are keys; the rest of the block is padding that takes no weight (edge tiles padded
  // to whole blocks). Shared by every batch and head; seq_k still bounds every block.
  const int32_t* key_block_lengths = nullptr;
  // Lists per kFlashBlockM / 2 = 64 query rows instead (backends that choose keys per 64 queries,
  // VSA's cubes): entry i = (b * heads + h) * ceil(seq_q / 64) + row / 64. On the Hopper kernel
  // each half of a 128-row CTA then streams its own list, so neither computes the other's blocks.
  bool lists_per_half = false;
  // Optional, any mode: query row r's output goes to row out_rows[r] of out (one map for every
  // batch and head; −1: not written), so a kernel over regrouped queries (STA's tiles, VSA's
  // cubes) writes its result in the tokens' order with no scatter pass. lse stays indexed by r.
  const int32_t* out_rows = nullptr;

  // Optional, with lists_per_half (the Hopper kernel only; bf16 scores, no lse): the sequence is
  // the tokens of a video grid (frames, height, width), w fastest, read in place in VSA's 4x4x4
  // cubes instead of 64-token runs. Query half i and key block j are then cube i and cube j of the
  // cube grid in (t, h, w) order, w fastest (tile_video's order), and a cube's 64 rows are its
  // tokens in (t, h, w) order within it, so no pass regroups q, k and v first: the tensor copies
  // read each cube as a box of the video, and a cube's rows past the grid's edge take no weight
  // and are not written. seq_q = seq_k = frames·height·width; the lists count ceil(frames / 4) ·
  // ceil(height / 4) · ceil(width / 4) halves. out is in token order, or, with out_rows, row r of
  // the cubes' slots (64 per cube) goes to out_rows[r]. Batches must be contiguous in q, k and v
  // (batch stride = seq · token stride): their frames are one axis of the copies.
  int64_t video_grid[3] = {0, 0, 0};
  bool reads_cubes() const { return video_grid[0] > 0; }

  // INT8 scores (SageAttention's Q·Kᵀ; the Hopper kernel only) when q_scales is set: q and k are
  // int8 [batch, seq, heads, kInt8Width] (head_dim zero-padded to 128, strides in elements, which
  // are bytes here; attention/cuda/int8_quantize.h writes them) and a score is
  //   (q_int · k_int) · q_scales[(b · heads + h) · seq_q + row] · k_scales[...] · scale,
  // k_scales [batch, heads, ceil(seq_k / 64), 4]: key j of 64-key block kb takes entry
  // (j mod 8) / 2 of its block's four (SageAttention's per-thread key groups follow the MMA
  // fragments; coarser groups repeat one value four times). v and out stay bf16 of head_dim.
  const float* q_scales = nullptr;
  const float* k_scales = nullptr;
  // FP8 values (SageAttention2's P·V; with INT8 scores, dense mode only) when v_scales is set: v
  // is e4m3 [batch, heads, head_dim, v_keys] as fp8_quantize_values writes it (each channel's
  // keys contiguous, permuted within runs of 32, v_keys = fp8_value_keys(seq_k), v_strides
  // unused) and v_scales [batch, heads, head_dim] its per-channel scales. The probabilities enter
  // the product as e4m3 too, scaled by 448 (their largest is then 448, e4m3's largest), and each
  // 128-key tile's product is added to the float32 output in float32 (the tensor cores' FP8
  // accumulation keeps fewer bits).
  const float* v_scales = nullptr;
  int64_t v_keys = 0;

  FlashKernel kernel = FlashKernel::Auto;
};

// Head sizes the kernel is compiled for.
bool flash_attention_supports_head_dim(int64_t head_dim);

// Whether the current GPU runs the Hopper kernel (sm_90), which alone reads cubes in place
// (FlashAttentionArgs::video_grid) and takes INT8 scores.
bool flash_attention_has_hopper();

// Cubes of VSA's 4x4x4 tiling along one axis of `extent` tokens.
inline int64_t video_cubes_along(int64_t extent) {
  return (extent + 3) / 4;
}

// Launches on `stream`; throws mmgen::Error for an unsupported head size or a failed launch.
void flash_attention_forward(const FlashAttentionArgs& args, cudaStream_t stream = nullptr);

}  // namespace mmgen::cuda
