// Added tokens (tokenizer.json "added_tokens"): special and user tokens that are cut out of the
// text before normalization / pre-tokenization and map straight to their ids.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "text/json_fields.h"
#include "text/longest_match.h"

namespace mmgen::tokenizers {

class Normalizer;

struct AddedToken {
  std::string content;
  int64_t id = 0;
  bool special = false;
  bool lstrip = false;       // also swallows the white space before it
  bool rstrip = false;       // also swallows the white space after it
  bool single_word = false;  // only matches when not inside a word
  bool normalized = false;   // matched in the normalized text rather than the raw text
};

struct Segment {
  std::string text;
  std::optional<int64_t> id;  // set for an added token
  bool at_input_start = false;
};

class AddedVocabulary {
 public:
  AddedVocabulary() = default;
  AddedVocabulary(std::vector<AddedToken> tokens, const Normalizer* normalizer);

  // Cuts the added tokens of one kind (raw: normalized == false) out of `text`; the pieces
  // between them come back as text segments (empty ones dropped).
  std::vector<Segment> split(std::string_view text, bool normalized_tokens,
                             bool at_input_start) const;

  const std::vector<AddedToken>& tokens() const { return tokens_; }
  const AddedToken* find_id(int64_t id) const;
  const AddedToken* find_content(std::string_view content) const;

 private:
  std::vector<AddedToken> tokens_;
  // What is searched for, per token (normalized content for normalized tokens).
  std::vector<std::string> pattern_text_;
  // Per kind (raw, normalized), the tokens' patterns; ids index tokens_.
  std::array<LongestMatch, 2> patterns_;
  // Lookups by id and by content (the first token wins, as in the list).
  std::unordered_map<int64_t, size_t> by_id_;
  std::unordered_map<std::string, size_t> by_content_;
};

std::vector<AddedToken> parse_added_tokens(const Json& list, const std::string& where);

}  // namespace mmgen::tokenizers
