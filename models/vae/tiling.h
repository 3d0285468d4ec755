// The pieces every VAE's tiled decode (--vae-tiling) shares: the tile layout along each axis, the
// linear blend ramps, the decoder tail's receptive radius, and the blend of decoded tile cores
// into the output planes. Wan's decode is models/vae/tiled_decode.h, Z-Image's AutoencoderKL's
// models/vae/autoencoder_kl_tiled_decode.h.
//
// A tile is a core of at most `tile` latent pixels a side; the tail decodes the core plus a halo
// (inside the plane), the halo is cropped away, and neighbouring cores are blended with linear
// ramps across their overlap, then divided by the summed weights.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace mmgen::vae {

struct TileLayout {
  int64_t tile = 32;    // tile core edge, latent pixels
  int64_t overlap = 4;  // overlap between neighbouring cores, latent pixels (< tile)
};

// Core starts along an axis of `size` latent pixels: 0, tile - overlap, ... with the last core
// ending exactly at `size` (so it may overlap its neighbour more); one start when tile >= size.
std::vector<int64_t> tile_starts(int64_t size, const TileLayout& layout);

// The blend weight of output pixel `i` (0-based within a core spanning `length` output pixels)
// along one axis: ramps up over the first `ramp` pixels when the core has a neighbour before it,
// down over the last `ramp` when it has one after, 1 elsewhere.
float blend_weight(int64_t i, int64_t length, int64_t ramp, bool before, bool after);

// Latent pixels of context that a decoder tail of `levels` up blocks reaches, each block holding
// `resnets` residual blocks of two 3x3 convolutions at its scale and, except the last, an
// upsampler (nearest x2, then a 3x3 convolution at twice the scale), closed by a 3x3 conv_out at
// full scale: every convolution widens the reach by a pixel at its scale. Rounded up, plus one for
// the nearest-neighbour upsampling's rounding.
int64_t decoder_tail_radius(int64_t levels, int64_t resnets);

// One tile, in latent pixels: its core [y0, y1) x [x0, x1) and the region the tail decodes, the
// core plus the halo inside the plane, [ry0, ry1) x [rx0, rx1); and the blend weights of the
// core's output rows and columns.
struct Tile {
  int64_t y0 = 0, y1 = 0, x0 = 0, x1 = 0;
  int64_t ry0 = 0, ry1 = 0, rx0 = 0, rx1 = 0;
  std::vector<float> wy, wx;
};

// The tiles of a height x width latent plane (rows of tiles, each left to right) decoded to an
// output `factor` times larger, and their blend into output planes of that size.
class TileBlend {
 public:
  TileBlend(int64_t height, int64_t width, int64_t factor, const TileLayout& layout, int64_t halo);
  // `count` bands of whole rows that share the plane out evenly (the first ones a row larger when
  // the rows do not divide), none overlapping and every weight 1: the blend copies each core
  // into place, so decoding each band with a halo of the tail's radius gives the untiled decode.
  // At most `height` bands.
  static TileBlend bands(int64_t height, int64_t width, int64_t factor, int64_t count,
                         int64_t halo);
  const std::vector<Tile>& tiles() const { return tiles_; }

  // Adds `planes` decoded planes of tile `tile`'s region (contiguous float32, one after another,
  // each (ry1 - ry0)·factor x (rx1 - rx0)·factor pixels), each pixel of the core times its blend
  // weight (clamped to [-1, 1] first with `clamp`), to `planes` output planes starting at `out`
  // and `out_stride` floats apart.
  void add(const Tile& tile, const float* region, int64_t planes, float* out, int64_t out_stride,
           bool clamp) const;
  // Divides `planes` consecutive output planes at `out` by the summed weights.
  void normalize(float* out, int64_t planes) const;

 private:
  TileBlend(int64_t height, int64_t width, int64_t factor);
  void add_tile(Tile tile, int64_t height, int64_t width, int64_t halo, int64_t ramp, bool before_y,
                bool after_y, bool before_x, bool after_x);

  int64_t factor_, out_w_, plane_;
  std::vector<Tile> tiles_;
  std::vector<float> weight_sum_;  // one output plane
};

// Rows [ry0, ry1) and columns [rx0, rx1) of h [N, C, H, W] (on the host), as a contiguous tensor.
Tensor crop_region(const Tensor& h, const Tile& tile);

}  // namespace mmgen::vae
