// Z-Image's prompt embedding (`ZImagePipeline._encode_prompt`): each prompt rendered with the
// tokenizer's own chat template (one user message, enable_thinking=True), tokenized with padding to
// max_sequence_length and truncation, run through the Qwen3 text encoder, and hidden_states[-2]
// (the second-to-last layer's output, before the final norm) kept at the real tokens only — one
// [tokens, hidden] tensor per prompt.
//
// The padded batch is not needed: with causal attention a real token never sees the right
// padding, so each prompt runs unpadded, packed with the others into one ragged forward, and the
// last decoder layer is skipped (hidden_states[-2] does not depend on it).
#pragma once

#include <string>
#include <vector>

#include "core/tensor.h"
#include "models/text_encoders/qwen3_attention.h"
#include "models/text_encoders/qwen3_model.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace mmgen::text_encoders {

// The real token ids of each prompt rendered through `chat_template`, cut to max_sequence_length as
// the tokenizer's truncation does (transformers' tokenizer(..., padding="max_length",
// truncation=True)).
std::vector<std::vector<int64_t>> z_image_prompt_ids(const tokenizers::Tokenizer& tokenizer,
                                                     const tokenizers::ChatTemplate& chat_template,
                                                     const std::vector<std::string>& prompts,
                                                     int64_t max_sequence_length);

// hidden_states[-2] of each sequence, [its tokens, hidden], from one packed forward through
// `attention` (a fresh dense one when null; a CausalAttention that caches must start empty).
std::vector<Tensor> encode_hidden_states_minus2(const Qwen3TextModel& model,
                                                const std::vector<std::vector<int64_t>>& ids,
                                                CausalAttention* attention = nullptr);

}  // namespace mmgen::text_encoders
