#include "core/text.h"

namespace mmgen {
namespace {

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

// Skips digits from `pos`; returns how many.
size_t skip_digits(std::string_view text, size_t& pos) {
  const size_t start = pos;
  while (pos < text.size() && is_digit(text[pos])) ++pos;
  return pos - start;
}

}  // namespace

size_t invalid_utf8_offset(std::string_view text) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(text.data());
  size_t pos = 0;
  while (pos < text.size()) {
    const unsigned char lead = bytes[pos];
    size_t length = 0;
    char32_t code = 0, minimum = 0;
    if (lead < 0x80) {
      ++pos;
      continue;
    } else if ((lead & 0xE0) == 0xC0) {
      length = 2, code = lead & 0x1F, minimum = 0x80;
    } else if ((lead & 0xF0) == 0xE0) {
      length = 3, code = lead & 0x0F, minimum = 0x800;
    } else if ((lead & 0xF8) == 0xF0) {
      length = 4, code = lead & 0x07, minimum = 0x10000;
    } else {
      return pos;
    }
    if (text.size() - pos < length) return pos;
    for (size_t i = 1; i < length; ++i) {
      if ((bytes[pos + i] & 0xC0) != 0x80) return pos;
      code = (code << 6) | (bytes[pos + i] & 0x3F);
    }
    if (code < minimum || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) return pos;
    pos += length;
  }
  return std::string_view::npos;
}

bool is_integer_text(std::string_view text) {
  size_t pos = 0;
  if (pos < text.size() && (text[pos] == '-' || text[pos] == '+')) ++pos;
  return skip_digits(text, pos) > 0 && pos == text.size();
}

bool is_decimal_text(std::string_view text) {
  size_t pos = 0;
  if (pos < text.size() && (text[pos] == '-' || text[pos] == '+')) ++pos;
  size_t digits = skip_digits(text, pos);
  if (pos < text.size() && text[pos] == '.') {
    ++pos;
    digits += skip_digits(text, pos);
  }
  if (digits == 0) return false;
  if (pos < text.size() && (text[pos] == 'e' || text[pos] == 'E')) {
    ++pos;
    if (pos < text.size() && (text[pos] == '-' || text[pos] == '+')) ++pos;
    if (skip_digits(text, pos) == 0) return false;
  }
  return pos == text.size();
}

}  // namespace mmgen
