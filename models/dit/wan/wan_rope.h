// Wan's 3-D rotary position embedding (diffusers' WanRotaryPosEmbed + the rotation in
// WanAttnProcessor). Each head's channels are split into a frame part, a height part and a width
// part; a token at grid position (f, h, w) rotates the pairs of each part by that coordinate times
// the part's frequencies. Pairs are interleaved: channels (2j, 2j+1).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace mmgen::dit {

class WanRope {
 public:
  WanRope() = default;
  WanRope(int64_t head_dim, int64_t max_seq_len);

  int64_t max_seq_len() const { return max_seq_len_; }

  // Rotates x [batch, grid_t·grid_h·grid_w, heads, head_dim] (contiguous float32) in place;
  // tokens are ordered frame-major, then height, then width.
  void apply_(Tensor& x, int64_t grid_t, int64_t grid_h, int64_t grid_w) const;

  // The rotation apply_ performs, as tables [tokens, head_dim / 2]: pair j of a token's head turns
  // (x1, x2) into (x1·cos − x2·sin, x1·sin + x2·cos). For kernels that rotate elsewhere (GPU).
  void pair_tables(int64_t grid_t, int64_t grid_h, int64_t grid_w, std::vector<float>& cos,
                   std::vector<float>& sin) const;

 private:
  int64_t head_dim_ = 0;
  int64_t max_seq_len_ = 0;
  // cos/sin tables [max_seq_len, head_dim]: the frame, height and width tables side by side, each
  // value repeated for both channels of its pair (computed in float64, stored as float32).
  std::vector<float> cos_, sin_;
  // Which coordinate (0 = frame, 1 = height, 2 = width) picks the table row for each channel.
  std::vector<uint8_t> axis_of_channel_;
};

}  // namespace mmgen::dit
