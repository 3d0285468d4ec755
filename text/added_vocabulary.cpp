#include "text/added_vocabulary.h"

#include "text/normalizers.h"
#include "text/unicode_data.h"
#include "text/utf8.h"

namespace mmgen::tokenizers {
namespace {

// The code point that ends just before byte `end` of valid UTF-8 `text`.
char32_t codepoint_before(std::string_view text, size_t end, size_t* start_out = nullptr) {
  size_t start = end - 1;
  while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
  if (start_out) *start_out = start;
  size_t pos = start;
  return next_codepoint(text, pos);
}

}  // namespace

AddedVocabulary::AddedVocabulary(std::vector<AddedToken> tokens, const Normalizer* normalizer)
    : tokens_(std::move(tokens)) {
  pattern_text_.resize(tokens_.size());
  for (size_t i = 0; i < tokens_.size(); ++i) {
    const AddedToken& token = tokens_[i];
    by_id_.emplace(token.id, i);
    by_content_.emplace(token.content, i);
    std::string text = token.content;
    if (token.normalized && normalizer) text = normalizer->normalize(text);
    if (text.empty()) continue;
    patterns_[token.normalized ? 1 : 0].add(text, i);
    pattern_text_[i] = std::move(text);
  }
  for (LongestMatch& patterns : patterns_) patterns.build();
}

std::vector<Segment> AddedVocabulary::split(std::string_view text, bool normalized_tokens,
                                            bool at_input_start) const {
  const LongestMatch& patterns = patterns_[normalized_tokens ? 1 : 0];
  // Leftmost-longest: at each position the longest token that starts there (the first added
  // among equal ones).
  const std::vector<size_t> longest = patterns.longest_at(text);
  std::vector<Segment> out;
  size_t copied = 0;  // text before this offset is already in `out`
  auto emit_text = [&](size_t begin, size_t end) {
    if (end > begin)
      out.push_back({std::string(text.substr(begin, end - begin)), std::nullopt,
                     at_input_start && begin == 0});
  };
  for (size_t pos = 0; pos < text.size();) {
    if (longest[pos] == LongestMatch::kNone) {
      ++pos;
      continue;
    }
    const AddedToken& token = tokens_[longest[pos]];
    size_t begin = pos, end = pos + pattern_text_[longest[pos]].size();
    if (token.single_word) {
      bool word_before = begin > 0 && unicode::is_word(codepoint_before(text, begin));
      size_t after = end;
      bool word_after = end < text.size() && unicode::is_word(next_codepoint(text, after));
      if (word_before || word_after) {
        ++pos;
        continue;
      }
    }
    if (token.lstrip) {
      size_t start = begin;
      while (begin > copied && unicode::is_white_space(codepoint_before(text, begin, &start)))
        begin = start;
    }
    if (token.rstrip) {
      size_t after = end;
      while (end < text.size() && unicode::is_white_space(next_codepoint(text, after))) end = after;
    }
    emit_text(copied, begin);
    out.push_back({token.content, token.id, false});
    copied = pos = end;
  }
  emit_text(copied, text.size());
  return out;
}

const AddedToken* AddedVocabulary::find_id(int64_t id) const {
  const auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

const AddedToken* AddedVocabulary::find_content(std::string_view content) const {
  const auto it = by_content_.find(std::string(content));
  return it == by_content_.end() ? nullptr : &tokens_[it->second];
}

std::vector<AddedToken> parse_added_tokens(const Json& list, const std::string& where) {
  std::vector<AddedToken> tokens;
  if (list.is_null()) return tokens;
  check(list.is_array(), "{} should be a list; the tokenizer.json is malformed", where);
  for (size_t i = 0; i < list.size(); ++i) {
    std::string item = fmt::format("{}[{}]", where, i);
    const Json& entry = list[i];
    AddedToken token;
    token.content = string_field(entry, "content", item);
    token.id = integer_field(entry, "id", item);
    token.special = bool_field_or(entry, "special", false, item);
    token.lstrip = bool_field_or(entry, "lstrip", false, item);
    token.rstrip = bool_field_or(entry, "rstrip", false, item);
    token.single_word = bool_field_or(entry, "single_word", false, item);
    token.normalized = bool_field_or(entry, "normalized", !token.special, item);
    tokens.push_back(std::move(token));
  }
  return tokens;
}

}  // namespace mmgen::tokenizers
