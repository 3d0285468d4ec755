#include "attention/kernels/sta_tiling.h"

#include <algorithm>

#include "core/error.h"

namespace mmgen::attention {

int64_t text_tokens_in_sequence(const char* backend, int64_t q_len, int64_t kv_len,
                                const Grid3& grid, int64_t text_length) {
  const int64_t video = grid[0] * grid[1] * grid[2];
  check(q_len == kv_len && (q_len == video || q_len == video + text_length),
        "{}: {} query and {} key tokens, but a {}x{}x{} grid has {} video tokens ({} with the {} "
        "text tokens); self-attention needs the same sequence for both",
        backend, q_len, kv_len, grid[0], grid[1], grid[2], video, video + text_length, text_length);
  return q_len - video;
}

BoxTiling tile_video(const Grid3& grid, const Grid3& box, int64_t text_length) {
  for (int a = 0; a < 3; ++a) {
    check(grid[size_t(a)] > 0, "video tiling: latent grid {}x{}x{} has an empty axis", grid[0],
          grid[1], grid[2]);
    check(box[size_t(a)] > 0, "video tiling: box {}x{}x{} has an empty axis", box[0], box[1],
          box[2]);
  }
  check(text_length >= 0, "video tiling: negative text length {}", text_length);
  BoxTiling tiling;
  tiling.grid = grid;
  tiling.box = box;
  for (size_t a = 0; a < 3; ++a) tiling.boxes[a] = (grid[a] + box[a] - 1) / box[a];
  tiling.video_tokens = grid[0] * grid[1] * grid[2];
  tiling.text_length = text_length;
  tiling.order.reserve(size_t(tiling.video_tokens + text_length));
  const int64_t count = tiling.box_count();
  tiling.video_blocks.start.reserve(size_t(count));
  tiling.video_blocks.length.reserve(size_t(count));
  for (int64_t bt = 0; bt < tiling.boxes[0]; ++bt)
    for (int64_t bh = 0; bh < tiling.boxes[1]; ++bh)
      for (int64_t bw = 0; bw < tiling.boxes[2]; ++bw) {
        const int64_t t0 = bt * box[0], t1 = std::min(grid[0], t0 + box[0]);
        const int64_t h0 = bh * box[1], h1 = std::min(grid[1], h0 + box[1]);
        const int64_t w0 = bw * box[2], w1 = std::min(grid[2], w0 + box[2]);
        tiling.video_blocks.start.push_back(int64_t(tiling.order.size()));
        tiling.video_blocks.length.push_back((t1 - t0) * (h1 - h0) * (w1 - w0));
        for (int64_t t = t0; t < t1; ++t)
          for (int64_t h = h0; h < h1; ++h)
            for (int64_t w = w0; w < w1; ++w)
              tiling.order.push_back((t * grid[1] + h) * grid[2] + w);
      }
  for (int64_t i = 0; i < text_length; ++i) tiling.order.push_back(tiling.video_tokens + i);
  return tiling;
}

BlockLayout tiling_blocks(const BoxTiling& tiling, int64_t text_block) {
  check(text_block > 0, "video tiling: text block size must be positive");
  BlockLayout layout = tiling.video_blocks;
  for (int64_t s = 0; s < tiling.text_length; s += text_block) {
    layout.start.push_back(tiling.video_tokens + s);
    layout.length.push_back(std::min(text_block, tiling.text_length - s));
  }
  return layout;
}

AxisSpan window_span(int64_t query, int64_t window, int64_t tiles) {
  const int64_t count = std::clamp<int64_t>(window, 1, tiles);
  const int64_t first = std::clamp<int64_t>(query - window / 2, 0, tiles - count);
  return {first, count};
}

}  // namespace mmgen::attention
