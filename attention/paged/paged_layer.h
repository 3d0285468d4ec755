// One attention layer as the paged backends see it (SGLang's RadixAttention fields): head
// counts (grouped-query attention when num_kv_heads < num_q_heads), head size, the score scale,
// causal or encoder-only, a sliding window, and an optional additive per-head score bias.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace mmgen::attention::paged {

// Decoder: causal; its K/V go to the pool and can be reused (prefix cache, decode).
// EncoderOnly: bidirectional; writes no K/V, reads no pool, never prefix-cached (a cached
// prefix's K/V at deeper layers would depend on the tokens after it).
enum class AttentionType { Decoder, EncoderOnly };

// An additive score bias computed on the fly (T5/UMT5's relative position bias): adds to
// scores[0 .. count) the bias of query position `q_pos` against keys k_pos .. k_pos + count − 1
// for query head `head`. Called from many threads at once: implementations must be read-only.
class ScoreBias {
 public:
  virtual ~ScoreBias() = default;
  virtual void add(int64_t head, int64_t q_pos, int64_t k_pos, int64_t count,
                   float* scores) const = 0;
};

// A bias that depends only on key position − query position: values [heads, 2·max_len − 1],
// entry (h, (k − q) + max_len − 1). T5's buckets give such a table, [heads, 2S − 1] floats per
// layer instead of the [heads, S, S] matrix. The values live where the layer's q, k, v live: the
// CPU backends call add(); the GPU ones hand values() to their kernels.
class RelativePositionBias final : public ScoreBias {
 public:
  RelativePositionBias(Tensor values, int64_t max_len);
  void add(int64_t head, int64_t q_pos, int64_t k_pos, int64_t count, float* scores) const override;
  int64_t max_len() const { return max_len_; }
  const Tensor& values() const { return values_; }

 private:
  Tensor values_;  // contiguous float32
  int64_t max_len_;
};

struct PagedLayer {
  int64_t layer_id = 0;  // index into the KV pool
  int64_t num_q_heads = 1;
  int64_t num_kv_heads = 1;  // divides num_q_heads; query head h reads KV head h / group
  int64_t head_dim = 1;
  float scaling = 1.0f;  // multiplies q·k: 1/√head_dim for most models, 1 for T5 (no scaling)
  AttentionType type = AttentionType::Decoder;
  // SGLang's exclusive convention: the model passes HF's `sliding_window − 1`. A causal query at
  // position q sees keys q − w .. q (w + 1 keys, HF's window of w + 1); an encoder-only query sees
  // |q − k| ≤ w. −1: no window.
  int64_t sliding_window_size = -1;
  const ScoreBias* bias = nullptr;  // not owned; null: none

  int64_t group() const { return num_q_heads / num_kv_heads; }
  bool causal() const { return type == AttentionType::Decoder; }
  // Throws Error when the heads do not divide or sizes are not positive.
  void validate() const;
};

}  // namespace mmgen::attention::paged
