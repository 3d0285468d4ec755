// Qwen3 on the paged KV attention backends (attention/paged/PagedRunner): the runner owns the KV
// pool, the page allocator, the request table and the radix prefix cache; the model keeps its
// weights and math and sends each layer's attention through the runner.
//
// Z-Image keeps every real token's hidden_states[-2] row, including those of a cached prefix, so
// the encoder caches those rows with the KV (the runner's per-token state) and a prefix-cache
// hit gives them back without recomputing them. The encoder runs only the first L − 1 layers
// (hidden_states[-2] does not depend on the last), so its pool holds L − 1 layers and is never
// shared with decoding, which needs all L: Qwen3PagedDecoder has its own runner.
//
// Both run on the model's device at construction (options.device is set from it; move the model
// first): on the GPU the runner drives a GPU paged backend with a bf16 device KV pool, and the
// host allocator and radix cache work as on the CPU. encode() returns host float32 rows on
// either device.
#pragma once

#include <memory>
#include <vector>

#include "attention/paged/paged_runner.h"
#include "models/text_encoders/qwen3_attention.h"
#include "models/text_encoders/qwen3_decode.h"
#include "models/text_encoders/qwen3_model.h"

namespace mmgen::text_encoders {

// The runner's view of `layers` Qwen3 layers; state_width floats of per-token state (0: none).
attention::paged::PagedModelSpec qwen3_paged_spec(const Qwen3Config& config, int64_t layers,
                                                  int64_t state_width);

// The sequences a runner forward holds: cached prefixes and new tokens per request.
CausalBatch causal_batch_of(const attention::paged::ForwardBatch& batch);

// A CausalAttention whose calls go to the runner's current forward (begin_extend/begin_decode
// already called by the owner, which knows the token ids).
class PagedCausalAttention final : public CausalAttention {
 public:
  explicit PagedCausalAttention(attention::paged::PagedRunner& runner) : runner_(runner) {}
  // Checks that the batch is the runner's.
  void begin_forward(const CausalBatch& batch) override;
  // scale and window must be the runner spec's (1/√head_dim, the layer's window).
  Tensor attend(int64_t layer, const Tensor& q, const Tensor& k, const Tensor& v, float scale,
                int64_t window) override;

 private:
  attention::paged::PagedRunner& runner_;
};

struct PrefixCacheReport {
  int64_t prompt_tokens = 0;  // real tokens of the prompts encoded so far
  int64_t hit_tokens = 0;     // ... whose KV and hidden state came from the prefix cache
  int64_t prompts_hit = 0;    // prompts with at least one cached token
};

class Qwen3PagedEncoder {
 public:
  // The model must outlive the encoder (and stay on its device). options.prefix_cache turns the
  // cache on; options.pool_tokens is allocated whole (on the GPU: pick it for the prompts).
  // `last_hidden_state`: hidden_states[-1] (every layer, then the final norm: what Qwen-Image
  // reads) instead of Z-Image's hidden_states[-2].
  Qwen3PagedEncoder(const Qwen3TextModel& model, attention::paged::PagedRunnerOptions options,
                    bool last_hidden_state = false);

  // hidden_states[-2] (or [-1]) of each prompt's ids, [tokens, hidden] — equal to the dense path.
  // Prompts go in batches that fit the pool; with the cache on, a batch's first prompt runs on its
  // own first, so the others can hit the prefix (the chat template) it leaves in the cache.
  std::vector<Tensor> encode(const std::vector<std::vector<int64_t>>& ids);

  const PrefixCacheReport& report() const { return report_; }
  attention::paged::PagedRunner& runner() { return *runner_; }

 private:
  void encode_batch(const std::vector<std::vector<int64_t>>& ids, size_t first, size_t count,
                    std::vector<Tensor>& out);

  const Qwen3TextModel& model_;
  attention::paged::PagedRunnerOptions options_;
  int64_t layers_ = 0;  // the layers a forward runs: L − 1, or L for the last hidden state
  bool last_hidden_state_ = false;
  std::unique_ptr<attention::paged::PagedRunner> runner_;
  PrefixCacheReport report_;
};

class Qwen3PagedDecoder {
 public:
  Qwen3PagedDecoder(const Qwen3TextModel& model, attention::paged::PagedRunnerOptions options);
  // Like greedy_decode (qwen3_decode.h): one extend, then one decode forward per token.
  GreedyDecodeResult greedy_decode(const std::vector<int64_t>& prompt, int64_t max_new_tokens,
                                   const std::vector<int64_t>& stop_ids = {});
  attention::paged::PagedRunner& runner() { return *runner_; }

 private:
  const Qwen3TextModel& model_;
  std::unique_ptr<attention::paged::PagedRunner> runner_;
};

}  // namespace mmgen::text_encoders
