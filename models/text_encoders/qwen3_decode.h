// Greedy decoding through the LM head: the prompt is one extend, then one decode step per new
// token, each extending the KV the attention keeps. It proves the causal path end to end (the
// paged backends' decode mode plugs in through the same CausalAttention).
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "models/text_encoders/qwen3_model.h"

namespace mmgen::text_encoders {

struct GreedyDecodeResult {
  std::vector<int64_t> new_ids;  // the generated tokens (a stop token, when hit, included)
  Tensor first_logits;           // [vocab]: the logits at the prompt's last position
};

// transformers' generate(do_sample=False, max_new_tokens=...): each step takes the argmax (the
// first index on ties), stopping after max_new_tokens or after emitting one of stop_ids.
// `attention` must keep KV; a fresh dense one is used when null.
GreedyDecodeResult greedy_decode(const Qwen3TextModel& model, const std::vector<int64_t>& prompt,
                                 int64_t max_new_tokens, const std::vector<int64_t>& stop_ids = {},
                                 CausalAttention* attention = nullptr);

}  // namespace mmgen::text_encoders
