// A small backtracking regular-expression engine for the patterns found in tokenizer.json files
// (pre-tokenizer splits, Replace normalizers). std::regex knows neither Unicode classes nor
// Oniguruma's semantics; this engine follows Oniguruma (what HF tokenizers uses): leftmost match,
// alternatives tried in order, greedy quantifiers that backtrack.
//
// Supported: literals and escapes (\r \n \t \f \v \xHH \x{H..} \uHHHH, escaped punctuation),
// '.', classes [...] with ranges and negation, \s \S \d \D \w \W \p{L} \p{N} \P{..} (also
// inside classes), groups ( ) (?: ) (?i: ) (?i), look-ahead (?= ) (?! ), quantifiers * + ? {n}
// {n,} {n,m} and their lazy forms, anchors ^ $. Case-insensitive matching folds ASCII letters
// (and U+017F, U+212A onto s, k). Anything else is refused with an Error naming the pattern.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace mmgen::tokenizers {

class Regex {
 public:
  explicit Regex(std::string_view pattern);
  ~Regex();
  Regex(Regex&&) noexcept;
  Regex& operator=(Regex&&) noexcept;

  struct Match {
    size_t begin;  // byte offsets into the searched text
    size_t end;
  };
  // Successive non-overlapping, non-empty leftmost matches in valid UTF-8 `text`.
  std::vector<Match> find_all(std::string_view text) const;

  const std::string& pattern() const { return pattern_; }

 private:
  struct Program;
  std::string pattern_;
  std::unique_ptr<Program> program_;
};

}  // namespace mmgen::tokenizers
