#include "models/text_encoders/qwen3_prompt_embedding.h"

#include "core/error.h"

namespace mmgen::text_encoders {

std::vector<std::vector<int64_t>> z_image_prompt_ids(const tokenizers::Tokenizer& tokenizer,
                                                     const tokenizers::ChatTemplate& chat_template,
                                                     const std::vector<std::string>& prompts,
                                                     int64_t max_sequence_length) {
  check(max_sequence_length > 0, "--max-sequence-length {} must be positive", max_sequence_length);
  std::vector<std::vector<int64_t>> result;
  for (const std::string& prompt : prompts) {
    const tokenizers::Encoding encoding = tokenizer.encode_padded(
        chat_template.render_prompt(prompt, /*enable_thinking=*/true), size_t(max_sequence_length));
    std::vector<int64_t> ids;
    for (size_t i = 0; i < encoding.ids.size(); ++i)
      if (encoding.attention_mask[i] != 0) ids.push_back(encoding.ids[i]);
    result.push_back(std::move(ids));
  }
  return result;
}

std::vector<Tensor> encode_hidden_states_minus2(const Qwen3TextModel& model,
                                                const std::vector<std::vector<int64_t>>& ids,
                                                CausalAttention* attention) {
  std::vector<int64_t> packed, lengths;
  for (const auto& sequence : ids) {
    check(!sequence.empty(), "text encoder: a prompt has no tokens");
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
  const Tensor hidden = model.forward_layers(packed, CausalBatch::fresh(lengths), *attention,
                                             model.config().num_hidden_layers - 1);
  int64_t start = 0;
  for (int64_t length : lengths) {
    result.push_back(hidden.slice(0, start, start + length).clone());
    start += length;
  }
  return result;
}

}  // namespace mmgen::text_encoders
