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
// products (about 1e-6). The layout, the ramps and the blend are models/vae/tiling.h's. On the GPU
// the heads and the blend stay on the host and each tile's tail runs on the device, so the device
// holds one tile's working set.
#pragma once

#include "core/communicator.h"
#include "core/tensor.h"
#include "models/vae/tiling.h"
#include "models/vae/wan_vae_decoder.h"

namespace mmgen::vae {

// z: de-normalised latents [B, z_dim, T, h, w] as WanVaeDecoder::decode takes them. Returns what
// decode returns: float32 [B, 3, frames, 8h, 8w] in [-1, 1]. Progress counts tiles x latent frames.
// `ranks` (several GPUs, pipeline/parallel_run.h): the tiles are dealt out in turn, tile t to rank
// t % size, and each round's decoded tiles go to rank 0, which blends them in tile order: rank 0
// returns the single-rank result to the bit, the others an undefined tensor.
Tensor decode_tiled(const WanVaeDecoder& decoder, const Tensor& z, const TileLayout& layout,
                    const DecodeProgress& progress = {}, dist::Communicator* ranks = nullptr);

// The decode of several GPUs without --vae-tiling: one band of whole rows per rank
// (TileBlend::bands), each decoded with a halo of the tail's radius, assembled on rank 0 with
// nothing blended. Rank 0 returns what WanVaeDecoder::decode returns (on the GPU to the byte; on
// the CPU up to the convolutions' summation order, which Eigen picks by the plane's size: about
// 1e-6), the others an undefined tensor. Every rank computes the heads; the full-resolution work
// is split.
Tensor decode_in_bands(const WanVaeDecoder& decoder, const Tensor& z, dist::Communicator& ranks,
                       const DecodeProgress& progress = {});

}  // namespace mmgen::vae
