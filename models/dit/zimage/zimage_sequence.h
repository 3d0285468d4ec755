// How Z-Image lays out one item's tokens (diffusers' patchify_and_embed): the latent image cut
// into patches, the caption, each padded to a multiple of 32 tokens, and the 3-axis position ids
// RoPE reads for every token, padding included.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "models/dit/zimage/zimage_config.h"

namespace mmgen::dit {

// diffusers' SEQ_MULTI_OF: the image part and the caption part of every item are padded to it.
constexpr int64_t kZImageSequenceMultiple = 32;

// One item's token counts.
struct ZImageLayout {
  std::array<int64_t, 3> latent{0, 0, 0};  // the latent's (frames, height, width)
  std::array<int64_t, 3> grid{0, 0, 0};    // patch grid (frames, rows, columns)
  int64_t image_tokens = 0;                // grid volume
  int64_t image_padded = 0;                // rounded up to the multiple
  int64_t caption_tokens = 0;
  int64_t caption_padded = 0;
  int64_t sequence() const { return image_padded + caption_padded; }  // the main blocks' tokens
};

// Position ids (three coordinates per token) index RoPE's per-axis tables.
using ZImagePositions = std::vector<std::array<int64_t, 3>>;

// The layout of latents [C, F, H, W] with a caption of `caption_tokens` rows. Throws Error when
// the latent size is not divisible by the patch or the positions exceed the RoPE tables.
ZImageLayout zimage_layout(const ZImageConfig& config, const Shape& latent_shape,
                           int64_t caption_tokens);

// latents [C, F, H, W] -> [image_tokens, pF·pH·pW·C] float32 rows, tokens in (f, h, w) order and
// each row's values in (pf, ph, pw, c) order, as x_embedder's weight reads them. No padding rows:
// diffusers embeds copies of the last patch there and then overwrites them with x_pad_token, so
// the model appends x_pad_token after the embedding instead.
Tensor zimage_patchify(const Tensor& latents, const ZImageConfig& config,
                       const ZImageLayout& layout);
// rows [>= image_tokens, pF·pH·pW·C] float32 on the host -> [C, F, H, W], padding dropped.
Tensor zimage_unpatchify(const Tensor& rows, const ZImageConfig& config,
                         const ZImageLayout& layout);

// Caption token i sits at (1 + i, 0, 0), its padding included (the padding continues the count).
ZImagePositions zimage_caption_positions(const ZImageLayout& layout);
// Image token (f, h, w) sits at (caption_padded + 1 + f, h, w), after every caption position;
// image padding tokens at (0, 0, 0).
ZImagePositions zimage_image_positions(const ZImageLayout& layout);

}  // namespace mmgen::dit
