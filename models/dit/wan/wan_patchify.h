// Moving between the latent video [batch, channels, frames, height, width] and the transformer's
// token rows, plus the timestep sinusoid that conditions the blocks.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace mmgen::dit {

// The token grid of a latent after patchify.
struct PatchGrid {
  int64_t t = 0, h = 0, w = 0;
  int64_t tokens() const { return t * h * w; }
};

// latents [B, C, F, H, W] -> [B, tokens, C·pt·ph·pw]: each row holds one patch's values in the
// order (c, pt, ph, pw), the layout of a Conv3d weight [D, C, pt, ph, pw], so the patch embedding
// is a linear layer. Tokens are ordered (t, h, w).
Tensor patchify(const Tensor& latents, const std::array<int64_t, 3>& patch, const PatchGrid& grid);

// rows [B, tokens, pt·ph·pw·C] (channel fastest, as proj_out writes them) -> [B, C, F, H, W].
Tensor unpatchify(const Tensor& rows, const std::array<int64_t, 3>& patch, const PatchGrid& grid,
                  int64_t channels);

// diffusers' Timesteps(dim, flip_sin_to_cos=True, downscale_freq_shift=0) for one timestep, in
// float32 as torch computes it: [cos(t·f_0) … cos(t·f_{n−1}), sin(t·f_0) … sin(t·f_{n−1})] with
// f_i = exp(−ln(10000)·i / n), n = dim / 2.
std::vector<float> timestep_sinusoid(float timestep, int64_t dim);

}  // namespace mmgen::dit
