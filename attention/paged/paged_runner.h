// PagedRunner: what a text-encoder model needs to run its attention layers on a paged backend,
// with the pools, the allocator, the request table and (for causal models) the prefix cache
// managed for it. The model keeps its own weights and math; per forward it does:
//
//   PagedRunner runner(spec, options);              // once per model (pools are reused)
//   const ForwardBatch& batch = runner.begin_extend(prompt_ids);
//   // embed batch.input_ids (the new tokens only: a cache hit removed the matched prefix),
//   // RoPE at batch.positions, then for every layer l:
//   Tensor o = runner.attention(l, q, k, v);         // q [tokens, Hq, D], k/v [tokens, Hkv, D]
//   runner.store_token_states(rows);                 // optional: per-token rows cached with
//                                                    // the KV (e.g. hidden_states[-2])
//   Tensor all = runner.request_token_states(i);     // [seq_len, width]: cached prefix rows +
//                                                    // this forward's rows, for request i
//   // greedy decoding, optional: feed one token per request, as many times as wanted
//   runner.begin_decode(next_ids); ... runner.attention(l, q, k, v) ...
//   runner.finish();                                 // caches the prompts, frees the requests
//
// A prefix-cache hit shortens the extend to the unmatched tokens. The prefix is capped at
// len − 1 (page-aligned down) so every request computes at least its last token. A model whose
// outputs include the prefix rows (Z-Image keeps every hidden_states[-2] row) stores them with
// store_token_states in every forward and reads them back with request_token_states.
// Requests of one begin_extend do not see each other's prefixes (as in SGLang, a prefix is
// cached when its request finishes); encode a shared template's first prompt on its own to warm
// the cache for a batch.
// Encoder-only models (bidirectional) get no pool and no cache: attention() runs the packed
// batch through the backend directly.
//
// On the GPU (options.device) the same runner drives a GPU paged backend: the allocator, the
// request table and the radix cache stay on the host and a slot means the same row in the device
// KV pool (bf16, owned by the backend, make_paged_decoder_backend), so the prefix cache works
// unchanged. attention() then takes and returns bf16 GPU tensors. The per-token states stay on
// the host (see store_token_states).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "attention/paged/forward_batch.h"
#include "attention/paged/kv_memory.h"
#include "attention/paged/paged_backend.h"
#include "attention/paged/paged_layer.h"
#include "attention/paged/radix_cache.h"

namespace mmgen::attention::paged {

struct PagedModelSpec {
  int64_t num_layers = 1;
  int64_t num_q_heads = 1;
  int64_t num_kv_heads = 1;
  int64_t head_dim = 1;
  float scaling = 1.0f;  // 1/√head_dim for Qwen3
  AttentionType type = AttentionType::Decoder;
  // Per layer, SGLang's exclusive convention (HF sliding_window − 1); empty or −1: none.
  std::vector<int64_t> sliding_window_sizes;
  int64_t state_width = 0;  // floats of per-token state cached with the KV (0: none)
  // Dual chunk attention on every layer (disabled by default): q comes as [T, 3·Hq, D] (the three
  // rotations, paged_layer.h) and only dual_chunk_flash_attn runs it, the runner's default then.
  DualChunk dual_chunk;
};

struct PagedRunnerOptions {
  std::string backend;          // a paged backend name; empty: the best one the device runs
  Device device = Device::CPU;  // where the pool and the attention live
  int64_t page_size = 1;
  bool prefix_cache = true;  // causal models only (ignored for encoder-only)
  // KV-pool capacity in tokens. Allocated whole, on the GPU too (bf16, layers × 2 × kv_heads ×
  // head_dim per token): a GPU caller sizes it to its prompts.
  int64_t pool_tokens = 1 << 15;
  int64_t max_requests = 256;       // rows of the request table
  int64_t max_context_len = 8192;   // longest request
  int64_t cache_token_budget = -1;  // most tokens the prefix cache keeps; −1: half the pool
  PagedBackendOptions backend_options;
};

class PagedRunner {
 public:
  PagedRunner(PagedModelSpec spec, PagedRunnerOptions options);
  ~PagedRunner();

  // Starts a prefill of these prompts (token ids): matches cached prefixes, allocates the new
  // tokens' slots (evicting cached prefixes if the pool is short), plans the backend. Throws
  // Error when a forward is already running or the pool cannot hold the batch.
  const ForwardBatch& begin_extend(const std::vector<std::vector<int64_t>>& prompts);
  // One more token per running request (after begin_extend or begin_decode).
  const ForwardBatch& begin_decode(const std::vector<int64_t>& next_tokens);

  // Layer `layer`'s attention for the current forward: q [tokens, Hq, D] or [tokens, Hq·D],
  // k and v [tokens, Hkv, D] or [tokens, Hkv·D]. Returns [tokens, Hq, D]. `bias`: an additive
  // score bias for this call (T5-style), or null.
  Tensor attention(int64_t layer, const Tensor& q, const Tensor& k, const Tensor& v,
                   const ScoreBias* bias = nullptr);

  // Per-token state rows [tokens, state_width] of the current forward (on either device),
  // stored at its slots. The states live on the host on every device: their one reader (Z-Image's
  // prompt embeddings) wants host float32 rows, a forward downloads only its new rows, and a
  // cached prefix's rows then cost no GPU memory (hidden-size floats per token, next to the
  // pool's bf16 K/V).
  void store_token_states(const Tensor& rows);
  // Request i's state rows for all its tokens [seq_len, state_width], float32 on the host.
  Tensor request_token_states(int64_t request) const;

  // Caches the running requests' tokens (causal + cache on) and frees them.
  void finish();

  const ForwardBatch& batch() const { return batch_; }
  // Tokens each running request took from the cache in its begin_extend.
  const std::vector<int64_t>& prefix_hits() const { return prefix_hits_; }
  const RadixCache::Stats* cache_stats() const;  // null when there is no cache
  RadixCache* cache() { return cache_.get(); }
  PageAllocator* allocator() { return allocator_.get(); }
  const std::string& backend_name() const { return backend_name_; }
  const PagedModelSpec& spec() const { return spec_; }

 private:
  struct Request {
    int64_t row = -1;
    std::vector<int64_t> tokens;  // whose K/V are in the pool (plus the next one in a decode)
    int64_t seq_len = 0;
    int64_t cached_prefix = 0;
    RadixCache::Node* locked = nullptr;
  };
  bool uses_pool() const { return spec_.type == AttentionType::Decoder; }
  void allocate_or_evict(const std::vector<int64_t>& prefix, const std::vector<int64_t>& seq,
                         const std::vector<int64_t>& last, std::vector<int64_t>& out);

  PagedModelSpec spec_;
  PagedRunnerOptions options_;
  std::string backend_name_;
  std::unique_ptr<PagedAttentionBackend> backend_;
  std::unique_ptr<ReqToTokenPool> req_to_token_;
  std::unique_ptr<PageAllocator> allocator_;
  std::unique_ptr<KVPool> pool_;  // on the GPU: the states only (the K/V are the backend's)
  std::unique_ptr<RadixCache> cache_;
  std::vector<Request> requests_;
  std::vector<int64_t> prefix_hits_;
  ForwardBatch batch_;
  bool running_ = false;
};

}  // namespace mmgen::attention::paged
