// Hugging Face tokenizers read from tokenizer.json: the text → ids pipeline (added tokens,
// normalizer, pre-tokenizer, model, post-processor) and ids → text. Unigram (T5 / UMT5, used by
// Wan) and byte-level BPE (Qwen) models are supported; see the component headers for the rest.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mmgen::tokenizers {

struct Encoding {
  std::vector<int64_t> ids;
  std::vector<int64_t> attention_mask;  // 1 for real tokens, 0 for padding
};

class Normalizer;
class PreTokenizer;
class Model;
class PostProcessor;
class Decoder;
class AddedVocabulary;

class Tokenizer {
 public:
  // Reads `folder`/tokenizer.json (and the pad token from tokenizer_config.json when the
  // tokenizer.json does not configure padding). Throws Error when the file is absent, not
  // JSON, or uses a component mmgen does not implement.
  static std::unique_ptr<Tokenizer> load(const std::filesystem::path& folder);
  // The same from the text of a tokenizer.json; `source` names it in error messages.
  // `pad_token`: the pad token's content, as tokenizer_config.json would give it.
  static std::unique_ptr<Tokenizer> from_json(std::string_view json_text, const std::string& source,
                                              std::optional<std::string> pad_token = std::nullopt);
  ~Tokenizer();

  // The ids of `text`, with the post-processor's special tokens when add_special_tokens.
  // The truncation/padding settings stored in tokenizer.json are not applied (as transformers
  // does when called without padding/truncation arguments).
  std::vector<int64_t> encode(std::string_view text, bool add_special_tokens = true) const;

  // transformers' tokenizer(text, padding="max_length", truncation=True, max_length=...):
  // the sequence is cut (from the right) so that it and the post-processor's special tokens
  // fit in max_length, then padded on the right with pad_id(); the mask marks real tokens.
  Encoding encode_padded(std::string_view text, size_t max_length,
                         bool add_special_tokens = true) const;

  // Text of `ids`; special added tokens are left out when skip_special_tokens.
  std::string decode(const std::vector<int64_t>& ids, bool skip_special_tokens = true) const;

  // The pad token id; throws Error if the tokenizer names no pad token.
  int64_t pad_id() const;
  std::optional<int64_t> token_to_id(std::string_view token) const;
  std::optional<std::string> id_to_token(int64_t id) const;
  // Model vocabulary plus added tokens outside it.
  size_t vocab_size() const;

 private:
  Tokenizer();
  std::string source_;
  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<PostProcessor> post_processor_;
  std::unique_ptr<Decoder> decoder_;
  std::unique_ptr<AddedVocabulary> added_;
  std::optional<int64_t> pad_id_;
};

}  // namespace mmgen::tokenizers
