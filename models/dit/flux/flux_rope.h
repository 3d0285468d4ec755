// FLUX's 3-axis rotary embedding (diffusers' FluxPosEmbed): every token has three coordinates
// (text tokens (0, 0, 0); an image token (0, row, column) of the packed grid), axis a turns
// axes_dims_rope[a] / 2 channel pairs of every head by coordinate · theta^(-2j / axes_dims[a]),
// the axes' pairs concatenated in order, a head's pairs adjacent channels (2j, 2j + 1).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <vector>

#include "core/tensor.h"
#include "models/dit/flux/flux_config.h"

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
// Built on the host and uploaded: a transformer keeps them per layout (FluxRopeCache).
FluxRopeTables flux_rope_tables(const FluxConfig& config, const FluxPositions& positions,
                                Device device);

// The RoPE tables of the item layouts a transformer has seen, on its device. They depend on the
// layout only (text tokens and the image grid), so every step of a run and both guidance items
// reuse them instead of rebuilding them on the host (tokens x head_dim / 2 cosines and sines) and
// uploading them per forward. A few layouts at most; safe to share between threads.
class FluxRopeCache {
 public:
  using Key = std::array<int64_t, 4>;  // the model's layout numbers, e.g. text tokens and grid
  // The tables of `key`, made by `build` the first time.
  FluxRopeTables tables(const Key& key, const std::function<FluxRopeTables()>& build);

 private:
  std::mutex mutex_;
  std::map<Key, FluxRopeTables> layouts_;
};

// The packed latent grid's coordinates (FluxPipeline._prepare_latent_image_ids): (0, i, j) for
// row i < rows, column j < columns, row-major.
FluxPositions flux_image_positions(int64_t rows, int64_t columns);
// Text tokens: all (0, 0, 0) (FluxPipeline's txt_ids).
FluxPositions flux_text_positions(int64_t tokens);

}  // namespace mmgen::dit
