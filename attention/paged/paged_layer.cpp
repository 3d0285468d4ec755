#include "attention/paged/paged_layer.h"

#include "core/error.h"

namespace mmgen::attention::paged {

RelativePositionBias::RelativePositionBias(Tensor values, int64_t max_len)
    : values_(values.to(DType::F32).contiguous()), max_len_(max_len) {
  check(values_.dim() == 2 && values_.size(1) == 2 * max_len - 1,
        "paged attention: a relative position bias for {} tokens is [heads, {}], got {}", max_len,
        2 * max_len - 1, shape_string(values_.shape()));
}

void RelativePositionBias::add(int64_t head, int64_t q_pos, int64_t k_pos, int64_t count,
                               float* scores) const {
  const float* row =
      values_.data<float>() + head * values_.size(1) + (k_pos - q_pos) + max_len_ - 1;
  for (int64_t j = 0; j < count; ++j) scores[j] += row[j];
}

void PagedLayer::validate() const {
  check(num_q_heads > 0 && num_kv_heads > 0 && head_dim > 0 && num_q_heads % num_kv_heads == 0,
        "paged attention layer {}: {} query heads, {} KV heads of {}: KV heads must divide query "
        "heads",
        layer_id, num_q_heads, num_kv_heads, head_dim);
}

}  // namespace mmgen::attention::paged
