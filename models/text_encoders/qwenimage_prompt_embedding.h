// Qwen-Image's prompt embedding (QwenImagePipeline._get_qwen_prompt_embeds and encode_prompt):
// each prompt put into the pipeline's fixed template (a system message describing what to
// detail, then the prompt as the user message), tokenized with truncation at 1024 + 34 tokens,
// run through Qwen2.5-VL's language model (Qwen3TextModel with a "qwen2_5_vl" config), and
// hidden_states[-1] (the last layer after the final norm) kept from token 34 on: the template's
// system part is dropped, its closing tokens stay. One [tokens, hidden] tensor per prompt,
// cut to max_sequence_length.
//
// The pipeline pads the batch on the right and runs it with the mask; with causal attention and
// positions 0.. per row (text-only Qwen2.5-VL counts positions from 0 whatever the mask) a real
// token never sees the padding, so each prompt runs unpadded, packed with the others into one
// ragged forward. pad_prompt_embeddings gives the padded batch and mask the transformer takes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor.h"
#include "models/text_encoders/qwen3_attention.h"
#include "models/text_encoders/qwen3_model.h"
#include "text/tokenizer.h"

namespace mmgen::text_encoders {

// QwenImagePipeline's prompt_template_encode; the prompt goes where "{}" is.
inline constexpr std::string_view kQwenImagePromptTemplate =
    "<|im_start|>system\nDescribe the image by detailing the color, shape, size, texture, "
    "quantity, text, spatial relationships of the objects and background:<|im_end|>\n"
    "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n";
// prompt_template_encode_start_idx: the template's system part, in Qwen2's tokens.
inline constexpr int64_t kQwenImageDropTokens = 34;
// tokenizer_max_length, and check_inputs's limit on max_sequence_length.
inline constexpr int64_t kQwenImageMaxSequenceLength = 1024;
// __call__'s default max_sequence_length.
inline constexpr int64_t kQwenImageDefaultSequenceLength = 512;

// The prompt in the template (Python's str.format: the prompt's own braces stay as they are).
std::string qwen_image_templated_prompt(std::string_view prompt);

// The templated prompts' ids, each cut to 1024 + 34 tokens (the tokenizer's truncation).
std::vector<std::vector<int64_t>> qwen_image_prompt_ids(const tokenizers::Tokenizer& tokenizer,
                                                        const std::vector<std::string>& prompts);

// hidden_states[-1] of each sequence from token 34 on, cut to max_sequence_length (1 to 1024):
// [min(tokens - 34, max_sequence_length), hidden] float32 on the host. One packed forward through
// `attention` (a fresh dense one when null; a CausalAttention that caches must start empty).
std::vector<Tensor> encode_qwen_image_hidden_states(
    const Qwen3TextModel& model, const std::vector<std::vector<int64_t>>& ids,
    int64_t max_sequence_length = kQwenImageDefaultSequenceLength,
    CausalAttention* attention = nullptr);

// Both steps: what encode_prompt returns for each prompt, before padding.
std::vector<Tensor> encode_qwen_image_prompts(
    const tokenizers::Tokenizer& tokenizer, const Qwen3TextModel& model,
    const std::vector<std::string>& prompts,
    int64_t max_sequence_length = kQwenImageDefaultSequenceLength);

// encode_prompt's batch: rows zero-padded to the longest, [B, L, hidden], and the mask [B, L]
// (float32, 1 at real tokens). The mask is left undefined when every row is full, as
// encode_prompt returns None for an all-ones mask (the transformer then masks nothing).
struct PaddedPromptEmbeddings {
  Tensor embeds;
  Tensor mask;
};
PaddedPromptEmbeddings pad_prompt_embeddings(const std::vector<Tensor>& rows);

}  // namespace mmgen::text_encoders
