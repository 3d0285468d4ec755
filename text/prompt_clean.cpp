#include "text/prompt_clean.h"

#include <algorithm>
#include <cstring>

#include "text/html_entities.h"
#include "text/unicode_data.h"
#include "text/utf8.h"

namespace mmgen::tokenizers {
namespace {

const char* named_entity(const std::string& name) {
  using html_tables::kNamedEntities;
  const auto* end = kNamedEntities + html_tables::kNamedEntitiesCount;
  const auto* it = std::lower_bound(kNamedEntities, end, name,
                                    [](const html_tables::NamedEntity& e, const std::string& n) {
                                      return n.compare(e.name) > 0;
                                    });
  return it != end && name == it->name ? it->value : nullptr;
}

bool is_ascii_digit(char32_t c) {
  return c >= '0' && c <= '9';
}
bool is_hex_digit(char32_t c) {
  return is_ascii_digit(c) || ((c | 0x20) >= 'a' && (c | 0x20) <= 'f');
}

// What html.unescape puts for a numeric reference to `value` (saturated above 0x10FFFF).
std::string numeric_reference(uint64_t value) {
  for (size_t i = 0; i < html_tables::kInvalidCharrefsCount; ++i)
    if (html_tables::kInvalidCharrefs[i].codepoint == value)
      return html_tables::kInvalidCharrefs[i].value;
  std::string out;
  if ((value >= 0xD800 && value <= 0xDFFF) || value > 0x10FFFF) {
    append_utf8(out, 0xFFFD);
    return out;
  }
  const char32_t* invalid = html_tables::kInvalidCodepoints;
  if (std::binary_search(invalid, invalid + html_tables::kInvalidCodepointsCount, char32_t(value)))
    return out;
  append_utf8(out, char32_t(value));
  return out;
}

std::string to_utf8(const std::u32string& cps, size_t begin, size_t end) {
  std::string out;
  for (size_t i = begin; i < end; ++i) append_utf8(out, cps[i]);
  return out;
}

std::string strip_python_space(const std::u32string& cps) {
  size_t begin = 0, end = cps.size();
  while (begin < end && unicode::is_python_space(cps[begin])) ++begin;
  while (end > begin && unicode::is_python_space(cps[end - 1])) --end;
  return to_utf8(cps, begin, end);
}

}  // namespace

std::string html_unescape(std::string_view text) {
  if (text.find('&') == std::string_view::npos) return std::string(text);
  std::u32string s = to_codepoints(text);
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < s.size()) {
    if (s[i] != '&') {
      append_utf8(out, s[i++]);
      continue;
    }
    size_t j = i + 1;
    if (j < s.size() && s[j] == '#') {
      // &#[0-9]+;?  or  &#[xX][0-9a-fA-F]+;?
      bool hex = j + 1 < s.size() && (s[j + 1] == 'x' || s[j + 1] == 'X');
      size_t k = j + (hex ? 2 : 1);
      size_t digits_begin = k;
      uint64_t value = 0;
      while (k < s.size() && (hex ? is_hex_digit(s[k]) : is_ascii_digit(s[k]))) {
        uint32_t digit = is_ascii_digit(s[k]) ? s[k] - '0' : (s[k] | 0x20) - 'a' + 10;
        value = std::min<uint64_t>(value * (hex ? 16 : 10) + digit, 0x7FFFFFFF);
        ++k;
      }
      if (k == digits_begin) {  // no digits: not a reference
        append_utf8(out, s[i++]);
        continue;
      }
      if (k < s.size() && s[k] == ';') ++k;
      out += numeric_reference(value);
      i = k;
      continue;
    }
    // &[^\t\n\f <&#;]{1,32};?
    size_t k = j;
    while (k < s.size() && k - j < 32 &&
           std::u32string_view(U"\t\n\f <&#;").find(s[k]) == std::u32string_view::npos)
      ++k;
    if (k == j) {
      append_utf8(out, s[i++]);
      continue;
    }
    if (k < s.size() && s[k] == ';') ++k;
    std::string name = to_utf8(s, j, k);
    if (const char* value = named_entity(name)) {
      out += value;
    } else {
      // The longest known prefix (of at least 2 characters), the rest kept as is.
      bool found = false;
      for (size_t length = k - j - 1; length >= 2; --length) {
        if (const char* prefix_value = named_entity(to_utf8(s, j, j + length))) {
          out += prefix_value;
          out += to_utf8(s, j + length, k);
          found = true;
          break;
        }
      }
      if (!found) out += "&" + name;
    }
    i = k;
  }
  return out;
}

std::string clean_prompt(std::string_view text) {
  std::string valid = sanitize_utf8(text);
  std::string unescaped = html_unescape(html_unescape(valid));
  std::u32string stripped = to_codepoints(strip_python_space(to_codepoints(unescaped)));
  // regex's \s+ → " " (its \s is the White_Space property).
  std::u32string collapsed;
  collapsed.reserve(stripped.size());
  for (size_t i = 0; i < stripped.size();) {
    if (unicode::is_white_space(stripped[i])) {
      collapsed += U' ';
      while (i < stripped.size() && unicode::is_white_space(stripped[i])) ++i;
    } else {
      collapsed += stripped[i++];
    }
  }
  return strip_python_space(collapsed);
}

}  // namespace mmgen::tokenizers
