#include "models/dit/wan/wan_rope.h"

#include <cmath>

#include "core/error.h"
#include "core/ops.h"

namespace mmgen::dit {

WanRope::WanRope(int64_t head_dim, int64_t max_seq_len)
    : head_dim_(head_dim), max_seq_len_(max_seq_len) {
  check(head_dim % 2 == 0 && head_dim >= 6, "RoPE: head dim {} must be even and at least 6",
        head_dim);
  // The tables are built with parts (t, h, w) = (d − 2·2⌊d/6⌋, 2⌊d/6⌋, 2⌊d/6⌋) ...
  const int64_t hw_dim = 2 * (head_dim / 6);
  const std::array<int64_t, 3> table_dims{head_dim - 2 * hw_dim, hw_dim, hw_dim};
  cos_.assign(size_t(max_seq_len * head_dim), 0.0f);
  sin_.assign(size_t(max_seq_len * head_dim), 0.0f);
  for (int64_t pos = 0; pos < max_seq_len; ++pos) {
    int64_t column = 0;
    for (int64_t dim : table_dims) {
      for (int64_t j = 0; j < dim / 2; ++j) {
        const double frequency = 1.0 / std::pow(10000.0, double(2 * j) / double(dim));
        const double angle = double(pos) * frequency;
        for (int64_t repeat = 0; repeat < 2; ++repeat, ++column) {
          cos_[size_t(pos * head_dim + column)] = float(std::cos(angle));
          sin_[size_t(pos * head_dim + column)] = float(std::sin(angle));
        }
      }
    }
  }
  // ... but split per token with (d − 2⌊d/3⌋, ⌊d/3⌋, ⌊d/3⌋), as diffusers does. The two agree for
  // every Wan head size (128, and the test models' 24 and 32); where they do not, this keeps
  // diffusers' numbers.
  const int64_t third = head_dim / 3;
  const int64_t t_part = head_dim - 2 * third;
  axis_of_channel_.resize(size_t(head_dim));
  for (int64_t c = 0; c < head_dim; ++c)
    axis_of_channel_[size_t(c)] = c < t_part ? 0 : (c < t_part + third ? 1 : 2);
}

void WanRope::apply_(Tensor& x, int64_t grid_t, int64_t grid_h, int64_t grid_w) const {
  check(x.dim() == 4 && x.size(3) == head_dim_ && x.dtype() == DType::F32 && x.is_contiguous(),
        "RoPE: expects a contiguous float32 [batch, tokens, heads, {}] tensor, got {}", head_dim_,
        shape_string(x.shape()));
  check(x.size(1) == grid_t * grid_h * grid_w, "RoPE: {} tokens for a {}x{}x{} grid", x.size(1),
        grid_t, grid_h, grid_w);
  std::vector<float> cos, sin;
  pair_tables(grid_t, grid_h, grid_w, cos, sin);  // checks the grid against rope_max_seq_len
  const Shape shape = {x.size(1), head_dim_ / 2};
  Tensor rows = x.view({x.size(0) * x.size(1), x.size(2) * head_dim_});
  ops::rope_(rows, Tensor::from_vector(shape, cos), Tensor::from_vector(shape, sin), head_dim_);
}

void WanRope::pair_tables(int64_t grid_t, int64_t grid_h, int64_t grid_w, std::vector<float>& cos,
                          std::vector<float>& sin) const {
  check(
      grid_t <= max_seq_len_ && grid_h <= max_seq_len_ && grid_w <= max_seq_len_,
      "latent grid {}x{}x{} (after patchify) exceeds the transformer's rope_max_seq_len {}: use a "
      "smaller size",
      grid_t, grid_h, grid_w, max_seq_len_);
  const int64_t tokens = grid_t * grid_h * grid_w, half = head_dim_ / 2;
  cos.resize(size_t(tokens * half));
  sin.resize(size_t(tokens * half));
  for (int64_t token = 0; token < tokens; ++token) {
    const int64_t rows[3] = {token / (grid_h * grid_w), (token / grid_w) % grid_h, token % grid_w};
    for (int64_t j = 0; j < half; ++j) {  // the same table entries apply_ reads
      const int64_t even = 2 * j, odd = 2 * j + 1;
      cos[size_t(token * half + j)] =
          cos_[size_t(rows[axis_of_channel_[size_t(even)]] * head_dim_ + even)];
      sin[size_t(token * half + j)] =
          sin_[size_t(rows[axis_of_channel_[size_t(odd)]] * head_dim_ + odd)];
    }
  }
}

}  // namespace mmgen::dit
