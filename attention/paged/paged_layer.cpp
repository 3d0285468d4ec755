#include "attention/paged/paged_layer.h"

#include <algorithm>
#include <cmath>

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
  if (latent.enabled()) {
    check(!dual_chunk.enabled(),
          "paged attention layer {}: a layer has dual chunk or latent attention, not both",
          layer_id);
    check(num_kv_heads == 1 && latent.qk_rope_head_dim >= 0 &&
              head_dim == latent.kv_lora_rank + latent.qk_rope_head_dim,
          "paged attention layer {}: multi-head latent attention has one KV head of kv_lora_rank "
          "+ qk_rope_head_dim = {} + {}, got {} KV heads of {}",
          layer_id, latent.kv_lora_rank, latent.qk_rope_head_dim, num_kv_heads, head_dim);
    check(causal() && sliding_window_size < 0 && bias == nullptr,
          "paged attention layer {}: multi-head latent attention runs causal layers without a "
          "sliding window or a score bias",
          layer_id);
  }
  if (!dual_chunk.enabled()) return;
  check(dual_chunk.local_size >= 0 && dual_chunk.chunk_len() > 0 &&
            dual_chunk.original_max_position_embeddings >= 0,
        "paged attention layer {}: dual chunk attention needs 0 <= local_size < chunk_size and "
        "original_max_position_embeddings >= 0, got chunk_size {}, local_size {}, "
        "original_max_position_embeddings {}",
        layer_id, dual_chunk.chunk_size, dual_chunk.local_size,
        dual_chunk.original_max_position_embeddings);
  check(causal() && sliding_window_size < 0 && bias == nullptr,
        "paged attention layer {}: dual chunk attention runs causal layers without a sliding "
        "window or a score bias (as SGLang's dual_chunk_flash_attn)",
        layer_id);
}

DualChunk::QueryPositions DualChunk::query_positions(int64_t position) const {
  const int64_t len = chunk_len(), in_chunk = position % len;
  return {in_chunk, std::min(in_chunk + len, chunk_size), std::min(2 * len - 1, chunk_size)};
}

float DualChunk::logit_scale(int64_t length) const {
  if (original_max_position_embeddings <= 0) return 1.0f;
  const double scale =
      0.1 * std::log(double(length) / double(original_max_position_embeddings)) + 1.0;
  return float(std::max(1.0, scale));
}

}  // namespace mmgen::attention::paged
