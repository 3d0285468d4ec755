#include "attention/paged/paged_runner.h"

#include <algorithm>
#include <cstring>

#include "attention/catalogue.h"
#include "core/error.h"

namespace mmgen::attention::paged {

PagedRunner::PagedRunner(PagedModelSpec spec, PagedRunnerOptions options)
    : spec_(std::move(spec)), options_(std::move(options)) {
  PagedLayer probe{.num_q_heads = spec_.num_q_heads,
                   .num_kv_heads = spec_.num_kv_heads,
                   .head_dim = spec_.head_dim,
                   .type = spec_.type,
                   .dual_chunk = spec_.dual_chunk};
  probe.validate();
  if (spec_.dual_chunk.enabled())
    for (const int64_t window : spec_.sliding_window_sizes)
      check(window < 0,
            "paged attention: dual chunk attention runs layers without a sliding window (as "
            "SGLang's dual_chunk_flash_attn)");
  check(spec_.num_layers > 0, "paged attention: a model needs at least one layer");
  check(spec_.sliding_window_sizes.empty() ||
            int64_t(spec_.sliding_window_sizes.size()) == spec_.num_layers,
        "paged attention: {} sliding windows for {} layers", spec_.sliding_window_sizes.size(),
        spec_.num_layers);
  const bool gpu = options_.device != Device::CPU;
  if (options_.backend.empty() && spec_.dual_chunk.enabled())
    backend_name_ = "dual_chunk_flash_attn";  // the one design for dual chunk layers
  else if (!options_.backend.empty())
    backend_name_ = normalize_backend_name(Family::Paged, options_.backend);
  else if (gpu)
    backend_name_ = auto_backend(machine_for_device("cuda"), Family::Paged, "bf16", spec_.head_dim);
  else
    backend_name_ = auto_backend(this_machine(), Family::Paged, "fp32", spec_.head_dim);
  if (!uses_pool()) {  // encoder-only: nothing to keep between layers or forwards
    backend_ = make_paged_backend(backend_name_, options_.device, options_.backend_options);
    return;
  }
  check(options_.page_size >= 1, "--page-size must be at least 1, got {}", options_.page_size);
  req_to_token_ = std::make_unique<ReqToTokenPool>(options_.max_requests, options_.max_context_len);
  allocator_ = std::make_unique<PageAllocator>(options_.pool_tokens, options_.page_size);
  const int64_t slots = allocator_->num_pages() * options_.page_size;
  // On the GPU the K/V rows are the backend's device pool; the host pool keeps the states only.
  pool_ = std::make_unique<KVPool>(slots, options_.page_size, gpu ? 0 : spec_.num_layers,
                                   spec_.num_kv_heads, spec_.head_dim, spec_.state_width);
  backend_ = make_paged_decoder_backend(backend_name_, options_.device,
                                        {.size = slots,
                                         .page_size = options_.page_size,
                                         .num_layers = spec_.num_layers,
                                         .kv_heads = spec_.num_kv_heads,
                                         .head_dim = spec_.head_dim},
                                        options_.backend_options);
  if (options_.prefix_cache)
    cache_ = std::make_unique<RadixCache>(*allocator_, options_.cache_token_budget >= 0
                                                           ? options_.cache_token_budget
                                                           : options_.pool_tokens / 2);
}

PagedRunner::~PagedRunner() = default;

const RadixCache::Stats* PagedRunner::cache_stats() const {
  return cache_ ? &cache_->stats() : nullptr;
}

void PagedRunner::allocate_or_evict(const std::vector<int64_t>& prefix,
                                    const std::vector<int64_t>& seq,
                                    const std::vector<int64_t>& last, std::vector<int64_t>& out) {
  if (allocator_->alloc_extend(prefix, seq, last, out)) return;
  int64_t needed = 0;
  for (size_t i = 0; i < seq.size(); ++i) needed += seq[i] - prefix[i] + options_.page_size;
  if (cache_) cache_->evict(needed);
  if (allocator_->alloc_extend(prefix, seq, last, out)) return;
  // Leave nothing half-done: release what begin_* took before failing.
  for (Request& request : requests_) {
    if (cache_ && request.locked) cache_->unlock(request.locked);
    if (request.row >= 0) req_to_token_->free(request.row);
  }
  requests_.clear();
  fail(
      "paged attention: the KV pool ({} tokens, {} free) cannot hold this batch ({} new tokens); "
      "encode fewer prompts at once or give the pool more tokens",
      options_.pool_tokens, allocator_->available_tokens(), needed);
}

const ForwardBatch& PagedRunner::begin_extend(const std::vector<std::vector<int64_t>>& prompts) {
  check(!running_, "paged attention: begin_extend while a forward is running (call finish())");
  check(!prompts.empty(), "paged attention: begin_extend needs at least one prompt");
  requests_.clear();
  prefix_hits_.assign(prompts.size(), 0);
  batch_ = ForwardBatch();
  batch_.mode = ForwardMode::Extend;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::vector<int64_t>& prompt = prompts[i];
    check(!prompt.empty(), "paged attention: prompt {} has no tokens", i);
    Request request;
    request.tokens = prompt;
    request.seq_len = int64_t(prompt.size());
    if (uses_pool()) {
      check(request.seq_len <= options_.max_context_len,
            "paged attention: prompt {} has {} tokens, more than the context length {}", i,
            request.seq_len, options_.max_context_len);
      const auto row = req_to_token_->alloc();
      if (!row) {
        for (Request& r : requests_) {
          if (cache_ && r.locked) cache_->unlock(r.locked);
          req_to_token_->free(r.row);
        }
        requests_.clear();
        fail("paged attention: more than {} prompts in one batch", options_.max_requests);
      }
      request.row = *row;
      if (cache_) {
        // At least the last token is recomputed; only whole pages match.
        const int64_t cap = (request.seq_len - 1) / options_.page_size * options_.page_size;
        RadixCache::Match match =
            cache_->match_prefix(std::span<const int64_t>(prompt).first(size_t(cap)));
        cache_->lock(match.last_node);
        request.locked = match.last_node;
        request.cached_prefix = match.length();
        std::copy(match.slots.begin(), match.slots.end(), req_to_token_->row(request.row));
      }
    }
    prefix_hits_[i] = request.cached_prefix;
    batch_.req_pool_indices.push_back(request.row);
    batch_.seq_lens.push_back(request.seq_len);
    batch_.extend_prefix_lens.push_back(request.cached_prefix);
    batch_.extend_seq_lens.push_back(request.seq_len - request.cached_prefix);
    batch_.input_ids.insert(batch_.input_ids.end(), prompt.begin() + request.cached_prefix,
                            prompt.end());
    requests_.push_back(std::move(request));
  }
  if (uses_pool()) {
    std::vector<int64_t> last(requests_.size());
    for (size_t i = 0; i < requests_.size(); ++i) {
      const Request& r = requests_[i];
      last[i] = r.cached_prefix > 0 ? req_to_token_->row(r.row)[r.cached_prefix - 1] : -1;
    }
    allocate_or_evict(batch_.extend_prefix_lens, batch_.seq_lens, last, batch_.out_cache_loc);
    int64_t at = 0;
    for (const Request& r : requests_)
      for (int64_t j = r.cached_prefix; j < r.seq_len; ++j)
        req_to_token_->row(r.row)[j] = batch_.out_cache_loc[size_t(at++)];
    batch_.req_to_token = req_to_token_.get();
    batch_.kv_pool = pool_.get();
  }
  batch_.finish_metadata();
  backend_->init_forward_metadata(batch_);
  running_ = true;
  return batch_;
}

const ForwardBatch& PagedRunner::begin_decode(const std::vector<int64_t>& next_tokens) {
  check(running_ && uses_pool(),
        "paged attention: begin_decode needs a running causal forward (begin_extend first)");
  check(next_tokens.size() == requests_.size(),
        "paged attention: {} next tokens for {} running requests", next_tokens.size(),
        requests_.size());
  batch_ = ForwardBatch();
  batch_.mode = ForwardMode::Decode;
  std::vector<int64_t> last;
  for (size_t i = 0; i < requests_.size(); ++i) {
    Request& r = requests_[i];
    check(r.seq_len < options_.max_context_len,
          "paged attention: request {} reached the context length {}", i, options_.max_context_len);
    last.push_back(req_to_token_->row(r.row)[r.seq_len - 1]);
    r.tokens.push_back(next_tokens[i]);
    ++r.seq_len;
    batch_.req_pool_indices.push_back(r.row);
    batch_.seq_lens.push_back(r.seq_len);
  }
  std::vector<int64_t> prefix(batch_.seq_lens);
  for (int64_t& p : prefix) --p;
  allocate_or_evict(prefix, batch_.seq_lens, last, batch_.out_cache_loc);
  for (size_t i = 0; i < requests_.size(); ++i)
    req_to_token_->row(requests_[i].row)[requests_[i].seq_len - 1] = batch_.out_cache_loc[i];
  batch_.input_ids = next_tokens;
  batch_.req_to_token = req_to_token_.get();
  batch_.kv_pool = pool_.get();
  batch_.finish_metadata();
  backend_->init_forward_metadata(batch_);
  return batch_;
}

Tensor PagedRunner::attention(int64_t layer, const Tensor& q, const Tensor& k, const Tensor& v,
                              const ScoreBias* bias) {
  check(running_, "paged attention: attention() outside a forward (begin_extend first)");
  check(layer >= 0 && layer < spec_.num_layers, "paged attention: layer {} of {}", layer,
        spec_.num_layers);
  PagedLayer paged_layer;
  paged_layer.layer_id = layer;
  paged_layer.num_q_heads = spec_.num_q_heads;
  paged_layer.num_kv_heads = spec_.num_kv_heads;
  paged_layer.head_dim = spec_.head_dim;
  paged_layer.scaling = spec_.scaling;
  paged_layer.type = spec_.type;
  paged_layer.sliding_window_size =
      spec_.sliding_window_sizes.empty() ? -1 : spec_.sliding_window_sizes[size_t(layer)];
  paged_layer.bias = bias;
  paged_layer.dual_chunk = spec_.dual_chunk;
  const int64_t tokens = batch_.num_tokens;
  return backend_->forward(q.reshape({tokens, paged_layer.query_rows(), spec_.head_dim}),
                           k.reshape({tokens, spec_.num_kv_heads, spec_.head_dim}),
                           v.reshape({tokens, spec_.num_kv_heads, spec_.head_dim}), paged_layer,
                           batch_, true);
}

void PagedRunner::store_token_states(const Tensor& rows) {
  check(running_ && uses_pool() && spec_.state_width > 0,
        "paged attention: store_token_states needs a running causal forward and a state width");
  const Tensor r = rows.to(DType::F32).to(Device::CPU).contiguous();
  const int64_t width = spec_.state_width;
  check(r.numel() == batch_.num_tokens * width,
        "paged attention: {} state rows for {} tokens of width {}", shape_string(r.shape()),
        batch_.num_tokens, width);
  float* states = pool_->states().data<float>();
  const float* source = r.data<float>();
  for (int64_t t = 0; t < batch_.num_tokens; ++t)
    std::memcpy(states + batch_.out_cache_loc[size_t(t)] * width, source + t * width,
                size_t(width) * sizeof(float));
}

Tensor PagedRunner::request_token_states(int64_t request) const {
  check(running_ && uses_pool() && spec_.state_width > 0 && request >= 0 &&
            request < int64_t(requests_.size()),
        "paged attention: request_token_states({}) needs a running causal forward and a state "
        "width",
        request);
  const Request& r = requests_[size_t(request)];
  const int64_t width = spec_.state_width;
  Tensor out = Tensor::empty({r.seq_len, width});
  const float* states = pool_->states().data<float>();
  const int64_t* slots = req_to_token_->row(r.row);
  for (int64_t j = 0; j < r.seq_len; ++j)
    std::memcpy(out.data<float>() + j * width, states + slots[j] * width,
                size_t(width) * sizeof(float));
  return out;
}

void PagedRunner::finish() {
  if (!running_) return;
  if (uses_pool()) {
    const int64_t page = options_.page_size;
    for (Request& r : requests_) {
      const int64_t* row = req_to_token_->row(r.row);
      const std::span<const int64_t> slots(row, size_t(r.seq_len));
      if (cache_) {
        const std::span<const int64_t> tokens(r.tokens.data(), size_t(r.seq_len));
        const int64_t present = cache_->insert(tokens, slots);
        const int64_t aligned = r.seq_len / page * page;
        // Our copies of tokens the cache already had (another request put them there first).
        if (present > r.cached_prefix)
          allocator_->free(
              slots.subspan(size_t(r.cached_prefix), size_t(present - r.cached_prefix)));
        if (aligned < r.seq_len) allocator_->free(slots.subspan(size_t(aligned)));  // partial page
        cache_->unlock(r.locked);
      } else {
        allocator_->free(slots);
      }
      req_to_token_->free(r.row);
    }
    if (cache_) cache_->enforce_budget();
  }
  requests_.clear();
  running_ = false;
}

}  // namespace mmgen::attention::paged
