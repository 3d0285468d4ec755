#include "text/precompiled_charsmap.h"

#include <cstring>

#include "core/error.h"
#include "text/grapheme.h"
#include "text/utf8.h"

namespace mmgen::tokenizers {
namespace {

// darts-clone unit layout.
bool has_leaf(uint32_t unit) {
  return (unit >> 8) & 1;
}
uint32_t value_of(uint32_t unit) {
  return unit & ((1u << 31) - 1);
}
uint32_t label_of(uint32_t unit) {
  return unit & ((1u << 31) | 0xFF);
}
uint32_t offset_of(uint32_t unit) {
  return (unit >> 10) << ((unit & (1u << 9)) >> 6);
}

}  // namespace

std::string decode_base64(std::string_view text, const std::string& where) {
  auto sextet = [&](char c) -> uint32_t {
    if (c >= 'A' && c <= 'Z') return uint32_t(c - 'A');
    if (c >= 'a' && c <= 'z') return uint32_t(c - 'a' + 26);
    if (c >= '0' && c <= '9') return uint32_t(c - '0' + 52);
    if (c == '+') return 62;
    if (c == '/') return 63;
    fail("{}: invalid base64 character '{}'; the file is damaged, re-save the tokenizer", where, c);
  };
  while (!text.empty() && text.back() == '=') text.remove_suffix(1);
  check(text.size() % 4 != 1, "{}: base64 text has an impossible length; re-save the tokenizer",
        where);
  std::string out;
  out.reserve(text.size() * 3 / 4);
  uint32_t buffer = 0;
  int bits = 0;
  for (char c : text) {
    buffer = (buffer << 6) | sextet(c);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += char((buffer >> bits) & 0xFF);
    }
  }
  return out;
}

PrecompiledCharsmap::PrecompiledCharsmap(std::string_view blob, const std::string& where)
    : where_(where) {
  check(blob.size() >= 4, "{}: precompiled_charsmap is shorter than its 4-byte header", where);
  uint32_t trie_bytes = 0;
  for (int i = 0; i < 4; ++i) trie_bytes |= uint32_t(uint8_t(blob[size_t(i)])) << (8 * i);
  check(trie_bytes % 4 == 0 && trie_bytes >= 4 && trie_bytes <= blob.size() - 4,
        "{}: precompiled_charsmap declares a trie of {} bytes in a {}-byte map; the file is "
        "damaged, re-save the tokenizer",
        where, trie_bytes, blob.size());
  units_.resize(trie_bytes / 4);
  for (size_t i = 0; i < units_.size(); ++i) {
    const auto* p = reinterpret_cast<const unsigned char*>(blob.data() + 4 + 4 * i);
    units_[i] = uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
  }
  replacements_ = std::string(blob.substr(4 + trie_bytes));
}

std::optional<std::string_view> PrecompiledCharsmap::transform(std::string_view chunk) const {
  size_t node = offset_of(units_[0]);
  for (char byte : chunk) {
    auto c = uint8_t(byte);
    if (c == 0) break;
    node ^= c;
    if (node >= units_.size()) return std::nullopt;
    uint32_t unit = units_[node];
    if (label_of(unit) != c) return std::nullopt;
    node ^= offset_of(unit);
    if (node >= units_.size()) return std::nullopt;
    if (has_leaf(unit)) {
      // The first (shortest) key found is the one HF uses.
      size_t begin = value_of(units_[node]);
      check(begin < replacements_.size(),
            "{}: precompiled_charsmap points past its replacement strings; the file is damaged",
            where_);
      size_t end = replacements_.find('\0', begin);
      if (end == std::string::npos) end = replacements_.size();
      return std::string_view(replacements_).substr(begin, end - begin);
    }
  }
  return std::nullopt;
}

std::string PrecompiledCharsmap::normalize(std::string_view text) const {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = grapheme_end(text, pos);
    std::string_view grapheme = text.substr(pos, end - pos);
    pos = end;
    if (grapheme.size() < 6) {
      if (auto replacement = transform(grapheme)) {
        out += *replacement;
        continue;
      }
    }
    for (size_t at = 0; at < grapheme.size();) {
      size_t start = at;
      next_codepoint(grapheme, at);
      std::string_view part = grapheme.substr(start, at - start);
      if (auto replacement = transform(part))
        out += *replacement;
      else
        out += part;
    }
  }
  return out;
}

}  // namespace mmgen::tokenizers
