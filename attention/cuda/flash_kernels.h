// The kernel launchers behind flash_attention_forward (defined in flash_attention.cu, one per head
// size and mode); callers go through flash_attention_forward, which checks the arguments first.
#pragma once

#include "attention/cuda/flash_attention.h"

namespace mmgen::cuda {

// How the key blocks are chosen: all of them, one list per 128-row query block, one list per
// 64-row half (FlashAttentionArgs::lists_per_half), or one per 64-row half with the halves and key
// blocks read in place as a video's 4x4x4 cubes (FlashAttentionArgs::video_grid; Hopper only).
inline constexpr int kFlashDense = 0, kFlashSparse = 1, kFlashPerHalf = 2, kFlashCubes = 3;

template <int D, int kMode>
void launch_flash_attention(const FlashAttentionArgs& args, cudaStream_t stream);

// The Hopper kernel (flash_attention_hopper.cu): wgmma, sm_90 only.
template <int D, int kMode>
void launch_flash_attention_hopper(const FlashAttentionArgs& args, cudaStream_t stream);

// The same kernel with INT8 Q·Kᵀ (FlashAttentionArgs::q_scales): wgmma s8, sm_90 only.
template <int D, int kMode>
void launch_flash_attention_hopper_int8(const FlashAttentionArgs& args, cudaStream_t stream);

// The INT8-score kernel with FP8 values (FlashAttentionArgs::v_scales): dense, sm_90 only.
template <int D>
void launch_flash_attention_hopper_int8_fp8(const FlashAttentionArgs& args, cudaStream_t stream);

}  // namespace mmgen::cuda
