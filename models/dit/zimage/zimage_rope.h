// Z-Image's 3-axis rotary embedding (diffusers' RopeEmbedder): axis a turns axes_dims[a] / 2
// channel pairs of every head by position[a] · theta^(-2j / axes_dims[a]); the three axes' pairs
// are concatenated in order, and a head's pairs are adjacent channels (2j, 2j + 1).
#pragma once

#include <array>
#include <vector>

#include "core/tensor.h"
#include "models/dit/zimage/zimage_config.h"
#include "models/dit/zimage/zimage_sequence.h"

namespace mmgen::dit {

// The rotation of one token sequence, float32 [tokens, head_dim / 2] on the model's device (row t
// for token t). q and k viewed as one row per head get their per-head RMSNorm and their rotation
// from one ops::rms_norm_rope_ call with rows_per_position = heads, so a table is read once per
// token rather than stored once per head (at 4160 tokens x 30 heads the repeated tables were
// twice the bytes of q itself).
struct ZImageRopeTables {
  Tensor cos, sin;
};

class ZImageRope {
 public:
  explicit ZImageRope(const ZImageConfig& config);

  // The tables for `positions` (each coordinate below its axis's axes_lens), on `device`.
  ZImageRopeTables tables(const ZImagePositions& positions, Device device) const;

 private:
  std::array<int64_t, 3> axes_dims_;
  std::array<int64_t, 3> axes_lens_;
  int64_t half_head_ = 0;
  // Per axis: angle[position · (dims / 2) + j] as float32, as diffusers computes it: frequencies
  // and the product with the position in float64, the angle then rounded to float32 (its table is
  // complex64 from those angles).
  std::array<std::vector<float>, 3> angles_;
};

}  // namespace mmgen::dit
