// Tiling a video token grid into boxes (STA's 6x8x8 tiles, VSA's 4x4x4 cubes) so that every box
// is a contiguous run of tokens, plus STA's sliding-window span. Shared by sliding_tile_attn and
// video_sparse_attn. Edge boxes may be partial: a grid need not divide the box size.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "attention/kernels/block_sparse.h"

namespace mmgen::attention {

using Grid3 = std::array<int64_t, 3>;  // (T, H, W) or per-axis counts

// The video tokens of a (T, H, W) grid (row-major t, h, w) regrouped box by box: boxes in
// row-major box order, the tokens inside a box in t, h, w order. Text tokens (`text_length` of
// them, after the video tokens) keep their place at the end.
struct BoxTiling {
  Grid3 grid{};   // tokens per axis
  Grid3 box{};    // box size per axis
  Grid3 boxes{};  // boxes per axis: ceil(grid / box)
  int64_t video_tokens = 0;
  int64_t text_length = 0;
  // order[i] = the original position of the i-th token in box order (video then text); a
  // permutation of [0, video_tokens + text_length). gather_tokens(x, order) tiles,
  // scatter_tokens(y, order, n) untiles.
  std::vector<int64_t> order;
  // One block per box (its valid length: partial at the far edges), in box order.
  BlockLayout video_blocks;

  int64_t box_count() const { return boxes[0] * boxes[1] * boxes[2]; }
  int64_t box_index(int64_t t, int64_t h, int64_t w) const {
    return (t * boxes[1] + h) * boxes[2] + w;
  }
  Grid3 box_coordinates(int64_t index) const {
    return {index / (boxes[1] * boxes[2]), (index / boxes[2]) % boxes[1], index % boxes[2]};
  }
};

// How many text tokens follow the video tokens in a self-attention sequence of `q_len` queries
// and `kv_len` keys: `text_length` when the sequence holds them, 0 when it is the video tokens
// alone (a model such as Wan reports its prompt length although its text only enters through
// cross-attention). Throws Error, naming `backend`, when the lengths fit neither.
int64_t text_tokens_in_sequence(const char* backend, int64_t q_len, int64_t kv_len,
                                const Grid3& grid, int64_t text_length);

// Throws Error when the grid or box has a non-positive entry.
BoxTiling tile_video(const Grid3& grid, const Grid3& box, int64_t text_length);

// The box tokens of `tiling` followed by the text tokens cut into blocks of at most `text_block`.
BlockLayout tiling_blocks(const BoxTiling& tiling, int64_t text_block);

// The key tiles a query tile at coordinate `query` sees along one axis of `tiles` tiles with a
// window of `window` tiles: [first, first + count). The window covers exactly min(window, tiles)
// tiles, starts `window / 2` tiles before the query (integer division) and is slid back inside
// the canvas at the edges.
//
// Why not the reference's rule: upstream STA (FastVideo's generate_sta_mask and its Triton
// kernel) takes centre = clamp(query, w/2, tiles - 1 - w/2) and keeps |centre - key| <= w/2, so an
// even window w < tiles spans w + 1 tiles, not w, and the sparsity its tuner reports is wrong for
// it. For odd windows and full windows both rules agree tile for tile (every published mask file
// uses only those). For an even window we keep the w tiles the file asks for: the span starts
// w/2 tiles before the query like the reference's, one tile shorter, slid back inside the canvas.
struct AxisSpan {
  int64_t first = 0;
  int64_t count = 0;
};
AxisSpan window_span(int64_t query, int64_t window, int64_t tiles);

}  // namespace mmgen::attention
