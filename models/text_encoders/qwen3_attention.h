// The one attention call of a causal (decoder) text model, behind an interface so that the paged
// KV backends (attention/paged/) can take over: the model hands each layer's q/k/v for the new
// tokens of a packed, ragged batch, and the attention stores k/v and attends causally over what
// each sequence holds. DenseCausalAttention is the straightforward reference, with a plain
// per-sequence KV cache that greedy decoding reuses.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace mmgen::text_encoders {

// One forward's sequences. Their new tokens are packed in order (sequence 0's, then 1's, ...);
// sequence i already holds cached[i] tokens (its prefix), so its new token j sits at position
// cached[i] + j.
struct CausalBatch {
  std::vector<int64_t> cached;
  std::vector<int64_t> extend;

  size_t sequences() const { return extend.size(); }
  int64_t new_tokens() const;
  std::vector<int64_t> positions() const;  // per packed token
  // A batch of fresh sequences (nothing cached) of these lengths.
  static CausalBatch fresh(const std::vector<int64_t>& lengths);
};

class CausalAttention {
 public:
  virtual ~CausalAttention() = default;
  // Called once per forward, before layer 0's attend(): the batch the coming calls refer to.
  virtual void begin_forward(const CausalBatch& batch) = 0;
  // q [T, q_heads, head_dim], k / v [T, kv_heads, head_dim] for the batch's T new tokens (RoPE
  // applied), float32 contiguous. Stores k / v as the sequences' next tokens and returns
  // softmax(scale · q·kᵀ) · v over each query's visible keys, [T, q_heads, head_dim]. Query heads
  // share key heads in groups (GQA: query head h reads key head h / (q_heads / kv_heads)).
  // window > 0: a query at position p sees keys p - window < k <= p (transformers' sliding
  // window); window == 0: every key k <= p.
  virtual Tensor attend(int64_t layer, const Tensor& q, const Tensor& k, const Tensor& v,
                        float scale, int64_t window) = 0;
};

// Dense causal attention over contiguous per-sequence K/V. With keep_kv, each sequence's K/V
// stays for later forwards (decode); without it nothing is cached and batches must be fresh.
class DenseCausalAttention final : public CausalAttention {
 public:
  DenseCausalAttention(int64_t layers, int64_t kv_heads, int64_t head_dim, bool keep_kv);

  void begin_forward(const CausalBatch& batch) override;
  Tensor attend(int64_t layer, const Tensor& q, const Tensor& k, const Tensor& v, float scale,
                int64_t window) override;

  // Tokens sequence `sequence` holds in layer `layer`'s cache.
  int64_t cached_tokens(size_t sequence, int64_t layer = 0) const;

 private:
  int64_t layers_, kv_heads_, head_dim_;
  bool keep_kv_;
  CausalBatch batch_;
  // [sequence][layer]: tokens × kv_heads × head_dim floats, grown as tokens arrive.
  std::vector<std::vector<std::vector<float>>> keys_, values_;
};

}  // namespace mmgen::text_encoders
