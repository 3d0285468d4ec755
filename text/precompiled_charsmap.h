// The sentencepiece normalization map that tokenizer.json stores (base64) in a "Precompiled"
// normalizer: a darts-clone double-array trie over UTF-8 byte strings whose values are offsets
// into a block of NUL-terminated replacement strings.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mmgen::tokenizers {

class PrecompiledCharsmap {
 public:
  // `blob` is the decoded precompiled_charsmap; `where` names it in error messages.
  PrecompiledCharsmap(std::string_view blob, const std::string& where);

  // The replacement for the shortest trie key that is a prefix of `chunk`, if any.
  std::optional<std::string_view> transform(std::string_view chunk) const;

  // Normalizes valid UTF-8 text as HF tokenizers' Precompiled normalizer does: per extended
  // grapheme cluster, a cluster shorter than 6 bytes that starts with a key is replaced whole;
  // otherwise each code point is looked up on its own.
  std::string normalize(std::string_view text) const;

 private:
  std::vector<uint32_t> units_;
  std::string replacements_;
  std::string where_;
};

// Standard base64 (RFC 4648, '=' padding); throws Error naming `where` on bad input.
std::string decode_base64(std::string_view text, const std::string& where);

}  // namespace mmgen::tokenizers
