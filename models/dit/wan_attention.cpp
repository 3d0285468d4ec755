#include "models/dit/wan_attention.h"

#include <cmath>

#include "attention/dense_attention.h"
#include "core/error.h"

namespace mmgen::dit {

Tensor wan_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                     const WanAttentionCall& call) {
  check(q.dim() == 4, "wan_attention: q must be [batch, seq, heads, head_dim], got {}",
        shape_string(q.shape()));
  const int64_t expected_q_len = call.grid_t * call.grid_h * call.grid_w;
  check(q.size(1) == expected_q_len, "wan_attention: {} query tokens for a {}x{}x{} grid",
        q.size(1), call.grid_t, call.grid_h, call.grid_w);
  check(!call.is_cross || k.size(1) == call.text_len, "wan_attention: {} keys for {} text tokens",
        k.size(1), call.text_len);
  attention::DenseAttentionArgs args;
  args.q = q;
  args.k = k;
  args.v = v;
  args.scale = float(1.0 / std::sqrt(double(q.size(3))));
  return attention::dense_attention(args);
}

}  // namespace mmgen::dit
