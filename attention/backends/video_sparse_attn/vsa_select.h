// Video Sparse Attention's coarse branch on the GPU: cube means (read in place from the video's
// tokens, or taken while regrouping them into the padded cube order of box_layout.h, where cube c
// is slots [64c, 64c + 64), its valid tokens first), coarse scores, the top-k key cubes of every
// query cube (the attention kernel's lists per 64 query rows: a cube is one 64-row half of a
// query block and one key block) and the coarse output when a gate needs it. The same choices as
// the CPU oracle (attention/backends/video_sparse_attn/vsa_coarse.h).
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <cstdint>

namespace mmgen::cuda {

inline constexpr int kVsaCube = 64;  // tokens (slots) per 4x4x4 cube: one key block

// gather_to_slots (box_layout.h) and the cube means in one pass over x: y [batch, 64·cubes,
// heads·D] gets x's rows in slot order (zeros in padding slots); means[b, h, c, :] is the mean of
// x[b, s, h·D : (h+1)·D] over the cube's valid slots s in [64c, 64c + lengths[c]), summed in
// slot order in double, as the CPU oracle sums them. head_dim a multiple of 8.
void vsa_gather_with_means(const void* x, void* y, float* means, int64_t batch, int64_t tokens,
                           int64_t cubes, int64_t heads, int64_t head_dim,
                           const int32_t* token_of_slot, const int32_t* lengths,
                           cudaStream_t stream = nullptr);

// The cube means of up to three operands read in place (the Hopper kernel reads the cubes in
// place too: FlashAttentionArgs::video_grid): x[i] [batch, tokens, heads·D] bf16 with tokens the
// video of `grid` (frames, height, width; w fastest), means[i][b, h, c, :] the mean over cube c's
// tokens (cube c of the (t, h, w) cube grid, w fastest), summed in double in the CPU tiling's
// order, as the CPU oracle sums them. head_dim a multiple of 8.
void vsa_cube_means(const void* const* x, float* const* means, int operands, int64_t batch,
                    const std::array<int64_t, 3>& grid, int64_t heads, int64_t head_dim,
                    cudaStream_t stream = nullptr);

// Largest cube count vsa_select handles (its scores sit in shared memory).
int64_t vsa_max_cubes();

// For every (b, h) and query row i of `rows` (qc [B, H, rows, D]): scores qc_i·kc_jᵀ·scale over
// all `cubes` key rows j (kc [B, H, cubes, D]), the `topk` highest (ties to the lower index)
// written ascending to selected[((b·H + h)·rows + i)·topk ..]. VSA has rows = cubes; SLA's block
// map has query blocks and key blocks of different sizes. When vc and coarse are given, also
// coarse[b, h, i, :] = softmax_j(scores)·vc (float32).
void vsa_select(const float* qc, const float* kc, const float* vc, float scale, int64_t batch,
                int64_t heads, int64_t rows, int64_t cubes, int64_t head_dim, int64_t topk,
                int32_t* selected, float* coarse, cudaStream_t stream = nullptr);

}  // namespace mmgen::cuda
