// Qwen-Image's 3-axis rotary embedding (diffusers' QwenEmbedRope with scale_rope, the
// "video-style" positions). Every token has a (frame, row, column) position; axis a turns
// axes_dims_rope[a] / 2 channel pairs of every head by position · theta^(-2j / axes_dims[a]), the
// axes' pairs concatenated in order, a head's pairs adjacent channels (2j, 2j + 1) (torch's
// complex view of the head).
//
// Image token (f, i, j) of a frames x rows x columns grid sits at (f, i - ⌈rows/2⌉,
// j - ⌈columns/2⌉): rows and columns centred on 0 (scale_rope). Text token t sits at (p, p, p)
// with p = max(rows / 2, columns / 2) + t, past the image's largest positive index.
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "models/dit/flux/flux_rope.h"
#include "models/dit/qwenimage/qwenimage_config.h"

namespace mmgen::dit {

// The latent grid the image tokens fill, in token units (packed rows and columns), row-major
// within each frame: the pipeline's img_shapes entry.
struct QwenImageShape {
  int64_t frames = 1, rows = 0, columns = 0;
  int64_t tokens() const { return frames * rows * columns; }
};

// cos and sin float32 [text_tokens + image tokens, head_dim / 2] on `device` for the joint
// sequence [text, image] (text rows first, as the attention concatenates them); the same layout as
// FLUX's tables, which ops::rms_norm_rope_ reads one row per token for every head.
//
// diffusers builds its tables in float32: the inverse frequencies 1 / 10000^(2j/d) (pow and
// division in float32), the angles position · frequency rounded to float32, then torch.polar's
// float32 cos and sin. The same roundings are made here (cos and sin of the float32 angle
// computed in double and rounded, within an ulp of torch's).
// Throws, in one line, when a position falls outside diffusers' 4096-row tables.
FluxRopeTables qwenimage_rope_tables(const QwenImageConfig& config, const QwenImageShape& shape,
                                     int64_t text_tokens, Device device);

}  // namespace mmgen::dit
