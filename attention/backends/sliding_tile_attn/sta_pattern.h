// Sliding Tile Attention's block lists: which key tiles each query tile visits for one window.
#pragma once

#include <array>
#include <cstdint>

#include "attention/kernels/block_sparse.h"
#include "attention/kernels/sta_tiling.h"

namespace mmgen::attention {

using StaWindow = std::array<int32_t, 3>;  // [wt, wh, ww] in tiles

// The pattern over tiling_blocks(tiling, text_block): a video query tile visits the key tiles of
// its window box (window_span on each axis) and every text block; a text query block visits every
// block (text attends to everything, and everything attends to text).
BlockSparsePattern sta_pattern(const BoxTiling& tiling, const StaWindow& window,
                               int64_t text_block);

// True when the window covers every tile on every axis (the pattern is then dense).
bool sta_window_is_full(const BoxTiling& tiling, const StaWindow& window);

}  // namespace mmgen::attention
