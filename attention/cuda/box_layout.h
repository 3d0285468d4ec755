// Video tokens regrouped box by box on the GPU, for the block-sparse backends (STA's tiles, VSA's
// cubes): every box gets a run of "slots" padded to whole kernel blocks, its tokens first (in the
// CPU tiling's order) and zero rows after them, so a box is whole key blocks (with a valid length
// per block) and whole query blocks of the attention kernel. The maps come from the host tiling.
// The way back needs no pass of its own: the attention kernel writes through token_of_slot
// (FlashAttentionArgs::out_rows); only VSA's gated output is scattered here.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace mmgen::cuda {

// x [batch, tokens, width] bf16 → y [batch, slots, width]: y[b, s] = x[b, token_of_slot[s]], or
// zeros where token_of_slot[s] < 0 (padding). width is a multiple of 8; rows are contiguous.
void gather_to_slots(const void* x, void* y, int64_t batch, int64_t tokens, int64_t slots,
                     int64_t width, const int32_t* token_of_slot, cudaStream_t stream = nullptr);

// The inverse for the tokens, adding VSA's gated coarse output on the way (bf16 result):
// x[b, t, h·D + d] = y[b, s, h·D + d] + coarse[b, h, s / 64, d] · gate[b, t, h·D + d] with
// s = slot_of_token[t] (a cube is 64 slots); coarse [batch, heads, cubes, D] and gate
// [batch, tokens, heads·D] float32.
void scatter_from_slots_gated(const void* y, void* x, int64_t batch, int64_t tokens, int64_t slots,
                              int64_t heads, int64_t head_dim, const int32_t* slot_of_token,
                              const float* coarse, const float* gate,
                              cudaStream_t stream = nullptr);

}  // namespace mmgen::cuda
