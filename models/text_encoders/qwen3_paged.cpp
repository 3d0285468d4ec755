#include "models/text_encoders/qwen3_paged.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace mmgen::text_encoders {

namespace paged = attention::paged;

paged::PagedModelSpec qwen3_paged_spec(const Qwen3Config& config, int64_t layers,
                                       int64_t state_width) {
  paged::PagedModelSpec spec;
  spec.num_layers = layers;
  spec.num_q_heads = config.num_attention_heads;
  spec.num_kv_heads = config.num_key_value_heads;
  spec.head_dim = config.head_dim;
  spec.scaling = float(1.0 / std::sqrt(double(config.head_dim)));
  spec.type = paged::AttentionType::Decoder;
  // transformers' window w (keys q − w < k ≤ q) is SGLang's exclusive w − 1.
  for (int64_t i = 0; i < layers; ++i) {
    const int64_t window = config.layer_windows[size_t(i)];
    spec.sliding_window_sizes.push_back(window > 0 ? window - 1 : -1);
  }
  spec.state_width = state_width;
  spec.dual_chunk = config.dual_chunk;
  return spec;
}

CausalBatch causal_batch_of(const paged::ForwardBatch& batch) {
  CausalBatch result;
  for (int64_t i = 0; i < batch.batch_size(); ++i) {
    const int64_t new_tokens =
        batch.mode == paged::ForwardMode::Decode ? 1 : batch.extend_seq_lens[size_t(i)];
    result.cached.push_back(batch.seq_lens[size_t(i)] - new_tokens);
    result.extend.push_back(new_tokens);
  }
  return result;
}

void PagedCausalAttention::begin_forward(const CausalBatch& batch) {
  const CausalBatch expected = causal_batch_of(runner_.batch());
  check(batch.cached == expected.cached && batch.extend == expected.extend,
        "paged attention: the model's batch does not match the runner's forward");
}

Tensor PagedCausalAttention::attend(int64_t layer, const Tensor& q, const Tensor& k,
                                    const Tensor& v, float scale, int64_t window) {
  const paged::PagedModelSpec& spec = runner_.spec();
  const int64_t expected_window =
      spec.sliding_window_sizes.empty() ? -1 : spec.sliding_window_sizes[size_t(layer)];
  check(scale == spec.scaling && (window > 0 ? window - 1 : -1) == expected_window,
        "paged attention: layer {} asks for scale {} window {}, the runner was built for {} / {}",
        layer, scale, window, spec.scaling, expected_window);
  return runner_.attention(layer, q, k, v);
}

Qwen3PagedEncoder::Qwen3PagedEncoder(const Qwen3TextModel& model, paged::PagedRunnerOptions options,
                                     bool last_hidden_state)
    : model_(model), options_(std::move(options)), last_hidden_state_(last_hidden_state) {
  options_.device = model.device();
  layers_ = model.config().num_hidden_layers - (last_hidden_state ? 0 : 1);
  if (layers_ > 0)
    runner_ = std::make_unique<paged::PagedRunner>(
        qwen3_paged_spec(model.config(), layers_, model.config().hidden_size), options_);
}

void Qwen3PagedEncoder::encode_batch(const std::vector<std::vector<int64_t>>& ids, size_t first,
                                     size_t count, std::vector<Tensor>& out) {
  const std::vector<std::vector<int64_t>> prompts(ids.begin() + std::ptrdiff_t(first),
                                                  ids.begin() + std::ptrdiff_t(first + count));
  const paged::ForwardBatch& batch = runner_->begin_extend(prompts);
  try {
    PagedCausalAttention attention(*runner_);
    const Tensor hidden =
        model_.forward_layers(batch.input_ids, causal_batch_of(batch), attention, layers_);
    // The cached per-token state is the row the caller keeps (after the final norm for [-1]).
    runner_->store_token_states(last_hidden_state_ ? model_.final_norm(hidden) : hidden);
    for (size_t i = 0; i < count; ++i) {
      out[first + i] = runner_->request_token_states(int64_t(i));
      const int64_t hit = runner_->prefix_hits()[i];
      report_.prompt_tokens += int64_t(prompts[i].size());
      report_.hit_tokens += hit;
      report_.prompts_hit += hit > 0 ? 1 : 0;
    }
  } catch (...) {
    runner_->finish();
    throw;
  }
  runner_->finish();
}

std::vector<Tensor> Qwen3PagedEncoder::encode(const std::vector<std::vector<int64_t>>& ids) {
  std::vector<Tensor> out(ids.size());
  if (!runner_) {  // one layer: hidden_states[-2] is the embedding, no attention runs
    check(!last_hidden_state_, "Qwen3 paged encoder: a model without layers");
    for (size_t i = 0; i < ids.size(); ++i) out[i] = model_.hidden_state(ids[i], -2);
    return out;
  }
  // Batches that fit the part of the pool the prefix cache leaves free.
  const int64_t budget = std::max<int64_t>(1, options_.pool_tokens / 2);
  size_t next = 0;
  if (options_.prefix_cache && ids.size() > 1) {
    encode_batch(ids, 0, 1, out);  // leaves the template prefix in the cache for the others
    next = 1;
  }
  while (next < ids.size()) {
    size_t count = 0;
    int64_t tokens = 0;
    while (next + count < ids.size() && int64_t(count) < options_.max_requests &&
           (count == 0 || tokens + int64_t(ids[next + count].size()) <= budget))
      tokens += int64_t(ids[next + count++].size());
    encode_batch(ids, next, count, out);
    next += count;
  }
  return out;
}

Qwen3PagedDecoder::Qwen3PagedDecoder(const Qwen3TextModel& model, paged::PagedRunnerOptions options)
    : model_(model) {
  options.device = model.device();
  runner_ = std::make_unique<paged::PagedRunner>(
      qwen3_paged_spec(model.config(), model.config().num_hidden_layers, 0), std::move(options));
}

GreedyDecodeResult Qwen3PagedDecoder::greedy_decode(const std::vector<int64_t>& prompt,
                                                    int64_t max_new_tokens,
                                                    const std::vector<int64_t>& stop_ids) {
  check(!prompt.empty(), "decode: the prompt has no tokens");
  const int64_t layers = model_.config().num_hidden_layers;
  PagedCausalAttention attention(*runner_);
  auto next_logits = [&](const paged::ForwardBatch& batch) {
    const Tensor hidden =
        model_.forward_layers(batch.input_ids, causal_batch_of(batch), attention, layers);
    const Tensor last = hidden.slice(0, hidden.size(0) - 1, hidden.size(0)).contiguous();
    return model_.logits(model_.final_norm(last)).view({-1});
  };
  GreedyDecodeResult result;
  try {
    Tensor logits = next_logits(runner_->begin_extend({prompt}));
    result.first_logits = logits.clone();
    for (int64_t step = 0; step < max_new_tokens; ++step) {
      const float* values = logits.data<float>();
      const int64_t next = int64_t(std::max_element(values, values + logits.numel()) - values);
      result.new_ids.push_back(next);
      if (std::find(stop_ids.begin(), stop_ids.end(), next) != stop_ids.end()) break;
      if (step + 1 == max_new_tokens) break;
      logits = next_logits(runner_->begin_decode({next}));
    }
  } catch (...) {
    runner_->finish();
    throw;
  }
  runner_->finish();
  return result;
}

}  // namespace mmgen::text_encoders
