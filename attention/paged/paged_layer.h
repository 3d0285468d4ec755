// One attention layer as the paged backends see it (SGLang's RadixAttention fields): head
// counts (grouped-query attention when num_kv_heads < num_q_heads), head size, the score scale,
// causal or encoder-only, a sliding window, and an optional additive per-head score bias.
#pragma once

#include <cstdint>

#include "attention/model_attention.h"
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

// Dual chunk attention (DCA: Qwen2.5-1M's long-context attention; SGLang's dual_chunk_flash_attn).
// Positions are cut into chunks of chunk_len = chunk_size − local_size. The model's rotary
// embedding rotates every key at position % chunk_len and every query three ways, one per region
// of the keys it sees (query_positions()):
//   intra: its own chunk, causal — the query at position % chunk_len;
//   succ:  the chunk before — at position % chunk_len + chunk_len, capped at chunk_size;
//   inter: every chunk before that — at min(2·chunk_len − 1, chunk_size) for every query.
// So relative distances stay below chunk_size however long the sequence. A dual-chunk layer's q is
// [tokens, 3·num_q_heads, head_dim]: heads [0, Hq) the intra rotation, [Hq, 2·Hq) the succ one,
// [2·Hq, 3·Hq) the inter one (SGLang concatenates the same three, plus two for its sparse mode).
// With original_max_position_embeddings > 0 the logits of a request of L tokens are multiplied by
// max(1, 0.1·ln(L / original_max_position_embeddings) + 1).
struct DualChunk {
  int64_t chunk_size = 0;  // 0: no dual chunk attention
  int64_t local_size = 0;
  int64_t original_max_position_embeddings = 0;

  bool enabled() const { return chunk_size > 0; }
  int64_t chunk_len() const { return chunk_size - local_size; }
  int64_t key_position(int64_t position) const { return position % chunk_len(); }
  struct QueryPositions {
    int64_t intra, succ, inter;
  };
  QueryPositions query_positions(int64_t position) const;
  // The logit multiplier of a request of `length` tokens.
  float logit_scale(int64_t length) const;
};

// Multi-head latent attention (DeepSeek-V2/V3's MLA) in its absorbed form, as SGLang's MLA
// backends take it: one KV head whose row is the token's compressed latent (kv_lora_rank values)
// followed by its rotary part (qk_rope_head_dim), head_dim = their sum (576 for DeepSeek); each
// query head is already multiplied into the latent space (W_UK absorbed); V is the first
// kv_lora_rank columns of the same row, so the pool keeps one row per token and the output is
// [tokens, num_q_heads, kv_lora_rank] (W_UV is applied by the model afterwards).
struct LatentAttention {
  int64_t kv_lora_rank = 0;  // 0: not MLA
  int64_t qk_rope_head_dim = 0;

  bool enabled() const { return kv_lora_rank > 0; }
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
  DualChunk dual_chunk;             // disabled by default
  LatentAttention latent;           // disabled by default

  int64_t group() const { return num_q_heads / num_kv_heads; }
  // Heads of the q a backend takes: num_q_heads, three times that for dual chunk attention.
  int64_t query_rows() const { return dual_chunk.enabled() ? 3 * num_q_heads : num_q_heads; }
  // Width of V and of the output rows: head_dim, the latent rank for MLA.
  int64_t value_dim() const { return latent.enabled() ? latent.kv_lora_rank : head_dim; }
  ModelAttention kind() const {
    return dual_chunk.enabled() ? ModelAttention::DualChunk
           : latent.enabled()   ? ModelAttention::LatentMla
                                : ModelAttention::Plain;
  }
  bool causal() const { return type == AttentionType::Decoder; }
  // Throws Error when the heads do not divide, sizes are not positive, or dual chunk or latent
  // attention is set on a layer it cannot run (not causal, a window or a bias; sizes that do not
  // fit).
  void validate() const;
};

}  // namespace mmgen::attention::paged
