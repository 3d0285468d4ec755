// The single place where the Wan transformer runs attention. Every self- and cross-attention call
// of every block comes through wan_attention(), so an attention backend (sparse, tiled, GPU) can
// be put in here without touching the model; the call description carries what such a backend
// needs to choose and to lay out its work.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace mmgen::dit {

struct WanAttentionCall {
  int64_t layer = 0;      // block index, 0-based
  bool is_cross = false;  // false: latent tokens attend to themselves (with RoPE applied)
  int64_t grid_t = 0;     // latent grid after patchify: tokens are ordered (t, h, w)
  int64_t grid_h = 0;
  int64_t grid_w = 0;
  int64_t text_len = 0;  // number of text tokens (the keys of a cross-attention call)
};

// q [batch, q_len, heads, head_dim], k and v [batch, kv_len, heads, head_dim], float32, no mask.
// Returns [batch, q_len, heads, head_dim], softmax(q·kᵀ/√head_dim)·v.
Tensor wan_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                     const WanAttentionCall& call);

}  // namespace mmgen::dit
