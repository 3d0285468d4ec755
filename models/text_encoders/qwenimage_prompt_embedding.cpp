#include "models/text_encoders/qwenimage_prompt_embedding.h"

#include <algorithm>
#include <cstring>
#include <memory>

#include "core/error.h"

namespace mmgen::text_encoders {
namespace {

// The template's tokens that must be in the vocabulary as single added tokens: without them the
// template's system part is not 34 tokens and the drop would cut into the prompt.
void check_template_tokens(const tokenizers::Tokenizer& tokenizer) {
  for (const char* token : {"<|im_start|>", "<|im_end|>"})
    check(tokenizer.token_to_id(token).has_value(),
          "Qwen-Image prompt encoding: the tokenizer has no {} token; the pipeline's template "
          "needs Qwen2's tokenizer (the model's tokenizer/ folder)",
          token);
}

}  // namespace

std::string qwen_image_templated_prompt(std::string_view prompt) {
  const size_t slot = kQwenImagePromptTemplate.find("{}");
  std::string text(kQwenImagePromptTemplate.substr(0, slot));
  text += prompt;
  text += kQwenImagePromptTemplate.substr(slot + 2);
  return text;
}

std::vector<std::vector<int64_t>> qwen_image_prompt_ids(const tokenizers::Tokenizer& tokenizer,
                                                        const std::vector<std::string>& prompts) {
  check_template_tokens(tokenizer);
  // The pipeline's tokenizer call: truncation at tokenizer_max_length + drop_idx, from the right;
  // Qwen2's post-processor adds no special tokens.
  const size_t limit = size_t(kQwenImageMaxSequenceLength + kQwenImageDropTokens);
  std::vector<std::vector<int64_t>> result;
  for (const std::string& prompt : prompts) {
    std::vector<int64_t> ids = tokenizer.encode(qwen_image_templated_prompt(prompt));
    if (ids.size() > limit) ids.resize(limit);
    result.push_back(std::move(ids));
  }
  return result;
}

std::vector<Tensor> encode_qwen_image_hidden_states(const Qwen3TextModel& model,
                                                    const std::vector<std::vector<int64_t>>& ids,
                                                    int64_t max_sequence_length,
                                                    CausalAttention* attention) {
  check(max_sequence_length >= 1 && max_sequence_length <= kQwenImageMaxSequenceLength,
        "--max-sequence-length {} is outside Qwen-Image's 1 to {} (QwenImagePipeline refuses "
        "more too)",
        max_sequence_length, kQwenImageMaxSequenceLength);
  std::vector<int64_t> packed, lengths;
  for (const auto& sequence : ids) {
    check(int64_t(sequence.size()) > kQwenImageDropTokens,
          "Qwen-Image prompt encoding: a templated prompt has {} tokens, not more than the {} "
          "the template's system part takes; the tokenizer does not match Qwen-Image's",
          sequence.size(), kQwenImageDropTokens);
    packed.insert(packed.end(), sequence.begin(), sequence.end());
    lengths.push_back(int64_t(sequence.size()));
  }
  std::vector<Tensor> result;
  if (ids.empty()) return result;
  std::unique_ptr<DenseCausalAttention> owned;
  if (!attention) {
    owned = model.dense_attention(/*keep_kv=*/false);
    attention = owned.get();
  }
  // hidden_states[-1]: every layer, then the final norm (row-wise, so the packed rows take it).
  const Tensor last = model.forward_layers(packed, CausalBatch::fresh(lengths), *attention,
                                           model.config().num_hidden_layers);
  const Tensor hidden = model.final_norm(last).to(Device::CPU);
  int64_t start = 0;
  for (int64_t length : lengths) {
    const int64_t kept = std::min(length - kQwenImageDropTokens, max_sequence_length);
    const int64_t first = start + kQwenImageDropTokens;
    result.push_back(hidden.slice(0, first, first + kept).clone());
    start += length;
  }
  return result;
}

std::vector<Tensor> encode_qwen_image_prompts(const tokenizers::Tokenizer& tokenizer,
                                              const Qwen3TextModel& model,
                                              const std::vector<std::string>& prompts,
                                              int64_t max_sequence_length) {
  return encode_qwen_image_hidden_states(model, qwen_image_prompt_ids(tokenizer, prompts),
                                         max_sequence_length);
}

PaddedPromptEmbeddings pad_prompt_embeddings(const std::vector<Tensor>& rows) {
  check(!rows.empty(), "Qwen-Image prompt embeddings: no prompts to pad");
  const int64_t hidden = rows.front().size(1);
  int64_t longest = 0;
  for (const Tensor& row : rows) {
    check(row.dim() == 2 && row.size(1) == hidden && row.dtype() == DType::F32 && row.is_cpu(),
          "Qwen-Image prompt embeddings: rows must be float32 [tokens, {}] on the host, got {}",
          hidden, shape_string(row.shape()));
    longest = std::max(longest, row.size(0));
  }
  const int64_t batch = int64_t(rows.size());
  PaddedPromptEmbeddings result{Tensor::zeros({batch, longest, hidden}),
                                Tensor::zeros({batch, longest})};
  bool full = true;
  for (int64_t b = 0; b < batch; ++b) {
    const Tensor row = rows[size_t(b)].contiguous();
    const int64_t tokens = row.size(0);
    std::memcpy(result.embeds.data<float>() + b * longest * hidden, row.data<float>(),
                size_t(tokens * hidden) * sizeof(float));
    std::fill_n(result.mask.data<float>() + b * longest, tokens, 1.0f);
    full = full && tokens == longest;
  }
  if (full) result.mask = Tensor();
  return result;
}

}  // namespace mmgen::text_encoders
