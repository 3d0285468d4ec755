#include "models/text_encoders/qwen3_decode.h"

#include <algorithm>

#include "core/error.h"

namespace mmgen::text_encoders {
namespace {

int64_t argmax(const Tensor& logits) {
  const float* values = logits.data<float>();
  return int64_t(std::max_element(values, values + logits.numel()) - values);
}

// The final-normed logits of the last row of hidden [T, hidden].
Tensor last_row_logits(const Qwen3TextModel& model, const Tensor& hidden) {
  const Tensor last = hidden.slice(0, hidden.size(0) - 1, hidden.size(0)).contiguous();
  return model.logits(model.final_norm(last)).view({-1});
}

}  // namespace

GreedyDecodeResult greedy_decode(const Qwen3TextModel& model, const std::vector<int64_t>& prompt,
                                 int64_t max_new_tokens, const std::vector<int64_t>& stop_ids,
                                 CausalAttention* attention) {
  check(!prompt.empty(), "decode: the prompt has no tokens");
  check(max_new_tokens >= 0, "decode: max_new_tokens must not be negative");
  std::unique_ptr<DenseCausalAttention> owned;
  if (!attention) {
    owned = model.dense_attention(/*keep_kv=*/true);
    attention = owned.get();
  }
  const int64_t layers = model.config().num_hidden_layers;
  GreedyDecodeResult result;
  Tensor logits = last_row_logits(
      model, model.forward_layers(prompt, CausalBatch::fresh({int64_t(prompt.size())}), *attention,
                                  layers));
  result.first_logits = logits.clone();
  int64_t length = int64_t(prompt.size());
  for (int64_t step = 0; step < max_new_tokens; ++step) {
    const int64_t next = argmax(logits);
    result.new_ids.push_back(next);
    if (std::find(stop_ids.begin(), stop_ids.end(), next) != stop_ids.end()) break;
    if (step + 1 == max_new_tokens) break;
    const CausalBatch batch{{length}, {1}};
    logits = last_row_logits(model, model.forward_layers({next}, batch, *attention, layers));
    ++length;
  }
  return result;
}

}  // namespace mmgen::text_encoders
