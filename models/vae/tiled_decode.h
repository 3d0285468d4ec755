// VAE decode in spatial tiles (--vae-tiling), so large frames decode in bounded memory: only the
// output video (and the mid block's small latent-resolution output) is full size.
//
// Each latent frame's head (post_quant_conv, conv_in, mid block; its attention spans the frame)
// runs on the whole latent plane, which is cheap at latent resolution. The tail (up blocks,
// norm_out, conv_out: all the full-resolution work) runs per tile, over all frames with its own
// causal caches, on the tile's core plus a halo of the tail's receptive radius, so the core's
// pixels see exactly the context they see untiled; the halo is cropped away and neighbouring cores
// are blended with linear ramps across their overlap. With one tile the result is the untiled
// decode bit for bit; with several it differs only by the summation order of the convolutions'
// products (about 1e-6).
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "models/vae/wan_vae_decoder.h"

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

// z: de-normalised latents [B, z_dim, T, h, w] as WanVaeDecoder::decode takes them. Returns what
// decode returns: float32 [B, 3, frames, 8h, 8w] in [-1, 1]. Progress counts tiles x latent frames.
Tensor decode_tiled(const WanVaeDecoder& decoder, const Tensor& z, const TileLayout& layout,
                    const DecodeProgress& progress = {});

}  // namespace mmgen::vae
