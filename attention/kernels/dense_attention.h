// The plain dense attention every model can call until the attention-backend selector (a later
// issue) routes calls to the catalogue's backends. It is also the reference the other backends are
// checked against: scores, softmax and weighted sum, with double accumulation in the softmax sum.
#pragma once

#include <functional>

#include "core/tensor.h"

namespace mmgen::attention {

struct DenseAttentionArgs {
  Tensor q;  // [batch, q_len, heads, head_dim], float32
  Tensor k;  // [batch, kv_len, heads, head_dim]
  Tensor v;  // [batch, kv_len, heads, head_dim]
  float scale = 1.0f;  // multiplies q·k (1/√head_dim for most models, 1 for T5)
  // Optional additive score bias [heads, q_len, kv_len] (T5's relative position bias).
  Tensor bias;
  // Optional key mask [batch, kv_len]: 0 marks a padding key that no query may attend to.
  Tensor key_mask;
};

// Returns [batch, q_len, heads, head_dim].
Tensor dense_attention(const DenseAttentionArgs& args);

}  // namespace mmgen::attention
