// FLUX's 3-axis rotary embedding (diffusers' FluxPosEmbed): every token has three coordinates
// (text tokens (0, 0, 0); an image token (0, row, column) of the packed grid), axis a turns
// axes_dims_rope[a] / 2 channel pairs of every head by coordinate · theta^(-2j / axes_dims[a]),
// the axes' pairs concatenated in order, a head's pairs adjacent channels (2j, 2j + 1).
#pragma once

#include <array>
#include <vector>

#include "core/tensor.h"
#include "models/dit/flux_config.h"

namespace mmgen::dit {

// One coordinate triple per token, as the pipeline's txt_ids / img_ids hold them.
using FluxPositions = std::vector<std::array<float, 3>>;

// cos and sin float32 [tokens, head_dim / 2] on `device`, row t for token t (ops::rms_norm_rope_
// reads one row per token for every head).
struct FluxRopeTables {
  Tensor cos, sin;
  FluxRopeTables rows(int64_t start, int64_t end) const;  // a token range, as views
};

// diffusers computes the angles and their cosines in float64 and rounds the tables to float32.
FluxRopeTables flux_rope_tables(const FluxConfig& config, const FluxPositions& positions,
                                Device device);

// The packed latent grid's coordinates (FluxPipeline._prepare_latent_image_ids): (0, i, j) for
// row i < rows, column j < columns, row-major.
FluxPositions flux_image_positions(int64_t rows, int64_t columns);
// Text tokens: all (0, 0, 0) (FluxPipeline's txt_ids).
FluxPositions flux_text_positions(int64_t tokens);

}  // namespace mmgen::dit
