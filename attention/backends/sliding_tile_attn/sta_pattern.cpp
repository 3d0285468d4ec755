#include "attention/backends/sliding_tile_attn/sta_pattern.h"

namespace mmgen::attention {

bool sta_window_is_full(const BoxTiling& tiling, const StaWindow& window) {
  for (size_t a = 0; a < 3; ++a)
    if (window[a] < tiling.boxes[a]) return false;
  return true;
}

BlockSparsePattern sta_pattern(const BoxTiling& tiling, const StaWindow& window,
                               int64_t text_block) {
  BlockSparsePattern pattern;
  pattern.q_blocks = tiling_blocks(tiling, text_block);
  pattern.kv_blocks = pattern.q_blocks;
  const int64_t tiles = tiling.box_count(), blocks = pattern.q_blocks.size();
  pattern.indptr.reserve(size_t(blocks + 1));
  pattern.indptr.push_back(0);
  for (int64_t query = 0; query < tiles; ++query) {
    const Grid3 at = tiling.box_coordinates(query);
    AxisSpan span[3];
    for (size_t a = 0; a < 3; ++a) span[a] = window_span(at[a], window[a], tiling.boxes[a]);
    for (int64_t t = span[0].first; t < span[0].first + span[0].count; ++t)
      for (int64_t h = span[1].first; h < span[1].first + span[1].count; ++h)
        for (int64_t w = span[2].first; w < span[2].first + span[2].count; ++w)
          pattern.indices.push_back(int32_t(tiling.box_index(t, h, w)));
    for (int64_t text = tiles; text < blocks; ++text) pattern.indices.push_back(int32_t(text));
    pattern.indptr.push_back(int64_t(pattern.indices.size()));
  }
  for (int64_t query = tiles; query < blocks; ++query) {
    for (int64_t key = 0; key < blocks; ++key) pattern.indices.push_back(int32_t(key));
    pattern.indptr.push_back(int64_t(pattern.indices.size()));
  }
  return pattern;
}

}  // namespace mmgen::attention
