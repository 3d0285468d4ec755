// Video Sparse Attention's coarse branch and cube selection: attention over cube means (mean of
// q, k and v over the valid tokens of each cube), and for each query cube the top-k key cubes by
// coarse score, which become the block lists of the fine (block-sparse) branch.
#pragma once

#include <cstdint>
#include <vector>

#include "attention/kernels/block_sparse.h"
#include "attention/kernels/sta_tiling.h"
#include "core/tensor.h"

namespace mmgen::attention {

// k = clamp(ceil((1 − sparsity) · cubes), 1, cubes), as upstream computes it (in double).
int64_t vsa_topk(double sparsity, int64_t cubes);

struct VsaCoarse {
  Tensor
      output;  // [B, H, cubes, D]: softmax(qc·kcᵀ·scale)·vc per query cube; undefined unless asked
  // B·H patterns (index b·H + h) over tiling_blocks(tiling, text_block): video query cube i visits
  // its top-k key cubes and every text block; text query blocks visit every block.
  std::vector<BlockSparsePattern> patterns;
};

// q, k, v: [B, S, H, D] float32 already in the tiling's order (gather_tokens(x, tiling.order)).
// Ties in the score go to the lower cube index.
VsaCoarse vsa_coarse(const Tensor& q, const Tensor& k, const Tensor& v, float scale,
                     const BoxTiling& tiling, int64_t topk, int64_t text_block, bool want_output);

}  // namespace mmgen::attention
