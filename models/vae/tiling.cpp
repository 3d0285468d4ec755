#include "models/vae/tiling.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace mmgen::vae {

std::vector<int64_t> tile_starts(int64_t size, const TileLayout& layout) {
  check(layout.tile > 0 && layout.overlap >= 0 && layout.overlap < layout.tile,
        "VAE tiling: the overlap ({}) must be smaller than the tile ({}), in latent pixels",
        layout.overlap, layout.tile);
  if (layout.tile >= size) return {0};
  std::vector<int64_t> starts;
  const int64_t stride = layout.tile - layout.overlap;
  for (int64_t start = 0; start + layout.tile < size; start += stride) starts.push_back(start);
  starts.push_back(size - layout.tile);
  return starts;
}

float blend_weight(int64_t i, int64_t length, int64_t ramp, bool before, bool after) {
  float weight = 1.0f;
  // Pixel centres: the two tiles' weights across an overlap of exactly `ramp` pixels sum to 1.
  if (before && i < ramp) weight = std::min(weight, (float(i) + 0.5f) / float(ramp));
  if (after && length - 1 - i < ramp)
    weight = std::min(weight, (float(length - 1 - i) + 0.5f) / float(ramp));
  return weight;
}

int64_t decoder_tail_radius(int64_t levels, int64_t resnets) {
  double radius = 0, pixel = 1;
  for (int64_t level = 0; level < levels; ++level) {
    radius += 2.0 * double(resnets) * pixel;
    if (level + 1 < levels) pixel /= 2, radius += pixel;
  }
  radius += pixel;
  return int64_t(std::ceil(radius)) + 1;
}

TileBlend::TileBlend(int64_t height, int64_t width, int64_t factor)
    : factor_(factor), out_w_(width * factor), plane_(height * factor * width * factor) {
  weight_sum_.assign(size_t(plane_), 0.0f);
}

TileBlend::TileBlend(int64_t height, int64_t width, int64_t factor, const TileLayout& layout,
                     int64_t halo)
    : TileBlend(height, width, factor) {
  const std::vector<int64_t> rows = tile_starts(height, layout),
                             columns = tile_starts(width, layout);
  const int64_t ramp = layout.overlap * factor;
  for (size_t r = 0; r < rows.size(); ++r)
    for (size_t c = 0; c < columns.size(); ++c) {
      Tile tile;
      tile.y0 = rows[r], tile.y1 = std::min(height, tile.y0 + layout.tile);
      tile.x0 = columns[c], tile.x1 = std::min(width, tile.x0 + layout.tile);
      add_tile(std::move(tile), height, width, halo, ramp, r > 0, r + 1 < rows.size(), c > 0,
               c + 1 < columns.size());
    }
}

TileBlend TileBlend::bands(int64_t height, int64_t width, int64_t factor, int64_t count,
                           int64_t halo) {
  check(count >= 1 && count <= height, "VAE bands: {} bands of a plane {} latent rows high", count,
        height);
  TileBlend blend(height, width, factor);
  int64_t y = 0;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t rows = height / count + (i < height % count ? 1 : 0);
    Tile tile;
    tile.y0 = y, tile.y1 = y + rows;
    tile.x0 = 0, tile.x1 = width;
    y = tile.y1;
    blend.add_tile(std::move(tile), height, width, halo, /*ramp=*/0, false, false, false, false);
  }
  return blend;
}

void TileBlend::add_tile(Tile tile, int64_t height, int64_t width, int64_t halo, int64_t ramp,
                         bool before_y, bool after_y, bool before_x, bool after_x) {
  const int64_t factor = factor_;
  tile.ry0 = std::max<int64_t>(0, tile.y0 - halo), tile.ry1 = std::min(height, tile.y1 + halo);
  tile.rx0 = std::max<int64_t>(0, tile.x0 - halo), tile.rx1 = std::min(width, tile.x1 + halo);
  const int64_t ph = (tile.y1 - tile.y0) * factor, pw = (tile.x1 - tile.x0) * factor;
  for (int64_t i = 0; i < ph; ++i) tile.wy.push_back(blend_weight(i, ph, ramp, before_y, after_y));
  for (int64_t i = 0; i < pw; ++i) tile.wx.push_back(blend_weight(i, pw, ramp, before_x, after_x));
  for (int64_t y = 0; y < ph; ++y)
    for (int64_t x = 0; x < pw; ++x)
      weight_sum_[size_t((tile.y0 * factor + y) * out_w_ + tile.x0 * factor + x)] +=
          tile.wy[size_t(y)] * tile.wx[size_t(x)];
  tiles_.push_back(std::move(tile));
}

void TileBlend::add(const Tile& tile, const float* region, int64_t planes, float* out,
                    int64_t out_stride, bool clamp) const {
  const int64_t ph = int64_t(tile.wy.size()), pw = int64_t(tile.wx.size());
  const int64_t region_w = (tile.rx1 - tile.rx0) * factor_,
                region_plane = (tile.ry1 - tile.ry0) * factor_ * region_w;
  const int64_t skip_y = (tile.y0 - tile.ry0) * factor_, skip_x = (tile.x0 - tile.rx0) * factor_;
  const float* wy = tile.wy.data();
  const float* wx = tile.wx.data();
#pragma omp parallel for collapse(2) schedule(static) if (planes * ph * pw >= (int64_t(1) << 16))
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t y = 0; y < ph; ++y) {
      const float* from = region + p * region_plane + (skip_y + y) * region_w + skip_x;
      float* to = out + p * out_stride + (tile.y0 * factor_ + y) * out_w_ + tile.x0 * factor_;
      for (int64_t x = 0; x < pw; ++x)
        to[x] += wy[y] * wx[x] * (clamp ? std::clamp(from[x], -1.0f, 1.0f) : from[x]);
    }
}

void TileBlend::normalize(float* out, int64_t planes) const {
#pragma omp parallel for schedule(static) if (planes * plane_ >= (int64_t(1) << 16))
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t i = 0; i < plane_; ++i) out[p * plane_ + i] /= weight_sum_[size_t(i)];
}

Tensor crop_region(const Tensor& h, const Tile& tile) {
  return h.slice(2, tile.ry0, tile.ry1).slice(3, tile.rx0, tile.rx1).contiguous();
}

}  // namespace mmgen::vae
