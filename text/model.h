// The tokenizer models of tokenizer.json ("model": Unigram or BPE): one pre-token → ids.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "text/json_fields.h"

namespace mmgen::tokenizers {

class Model {
 public:
  virtual ~Model() = default;
  // Appends the ids of one pre-token (valid UTF-8, non-empty).
  virtual void tokenize(std::string_view word, std::vector<int64_t>& ids) const = 0;
  virtual std::optional<int64_t> token_to_id(std::string_view token) const = 0;
  virtual std::optional<std::string> id_to_token(int64_t id) const = 0;
  virtual size_t vocab_size() const = 0;
};

// Unigram or BPE from the "model" object of tokenizer.json.
std::unique_ptr<Model> make_model(const Json& spec, const std::string& where);

// Hash map keyed by std::string that can be searched with a std::string_view.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TokenIds = std::unordered_map<std::string, int64_t, StringHash, std::equal_to<>>;

}  // namespace mmgen::tokenizers
