// Z-Image's AutoencoderKL decode in spatial tiles (--vae-tiling), as Wan's
// (models/vae/tiled_decode.h): only the output image and the head's latent-resolution output are
// full size; the full-resolution work runs one tile at a time.
//
// The head (post_quant_conv, conv_in, the mid block; its attention spans the plane) runs on the
// whole latent plane, on the decoder's device, and comes to the host once. The tail (up blocks,
// norm_out, conv_out) runs per tile, on the decoder's device, over the tile's core plus a halo of
// the tail's receptive radius (AutoencoderKLDecoder::tail_radius(): 14 latent pixels for the FLUX
// VAE's 4 levels of 3 resnets, 8 for zimage-tiny's 2 levels of 2), so every convolution of the
// core sees the context it sees untiled; the halo is cropped away and neighbouring cores are
// blended with linear ramps across their overlap, on the host (models/vae/tiling.h).
//
// Exactness. With one tile covering the plane the result is the untiled decode bit for bit. With
// several it is close to it but not equal, and cannot be without full-resolution activations:
// unlike Wan's per-pixel RMS norms, the tail's GroupNorms (two per resnet, and norm_out) take
// their mean and variance over the whole plane untiled but over the tile's region (core plus
// halo) here, so each tile is normalised by its own statistics. diffusers' AutoencoderKL
// tiled_decode has the same property (with no halo beyond its overlap, so its tiles also lose the
// convolutions' context at the cuts). The difference shrinks as tiles grow and grows where the
// picture's statistics vary across it. Measured on the zimage-tiny VAE
// (tests/autoencoder_kl_tiling_test.cpp, outputs of order 1): relative error 5.6%, 3.6%, 1.6% (max
// abs 0.15, 0.096, 0.036) with 8-, 16- and 32-latent-pixel cores on 48x48 random latents; 4.7%
// (0.083) with 6-pixel cores on the fixture's denoised 16x24 latents. Not measured on the full FLUX
// VAE (Z-Image's defaults, 256-pixel tiles with 64 overlap, are 32-latent-pixel cores with a
// 14-pixel halo there).
#pragma once

#include <functional>

#include "core/tensor.h"
#include "models/vae/autoencoder_kl_decoder.h"
#include "models/vae/tiling.h"

namespace mmgen::vae {

// z: de-normalised latents [B, latent_channels, h, w] as AutoencoderKLDecoder::decode takes them,
// on either device. Returns what decode returns: float32 [B, out_channels, f·h, f·w] on the host,
// not clamped. Progress counts tiles.
Tensor decode_tiled(const AutoencoderKLDecoder& decoder, const Tensor& z, const TileLayout& layout,
                    const std::function<void(int done, int total)>& progress = {});

}  // namespace mmgen::vae
