#include "core/text.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>

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

std::string text_for_message(std::string_view text, size_t max_chars) {
  std::string out;
  size_t pos = 0, shown = 0;
  auto escape = [&](unsigned char byte) { out += fmt::format("\\x{:02X}", byte); };
  while (pos < text.size() && shown < max_chars) {
    const unsigned char lead = static_cast<unsigned char>(text[pos]);
    size_t length = 1;
    if (lead >= 0x80) {
      // One valid UTF-8 sequence (the check stops at its first bad byte), or the byte alone.
      const size_t want = (lead & 0xE0) == 0xC0 ? 2 : (lead & 0xF0) == 0xE0 ? 3 : 4;
      length = invalid_utf8_offset(text.substr(pos, 4)) != 0 ? want : 0;
    }
    if (length == 0 || lead < 0x20 || lead == 0x7F) {
      escape(lead);
      length = 1;
    } else if (length == 2 && lead == 0xC2 && static_cast<unsigned char>(text[pos + 1]) < 0xA0) {
      escape(lead);  // U+0080..U+009F: C1 controls (0x9B starts a terminal sequence)
      escape(static_cast<unsigned char>(text[pos + 1]));
    } else {
      out.append(text.substr(pos, length));
    }
    pos += length;
    ++shown;
  }
  if (pos < text.size()) out += fmt::format("... ({} bytes)", text.size());
  return out;
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

std::string nearest_name(std::string_view name, const std::vector<std::string>& candidates) {
  auto distance = [](std::string_view a, std::string_view b) {
    std::vector<size_t> row(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
      size_t diagonal = row[0];
      row[0] = i;
      for (size_t j = 1; j <= b.size(); ++j) {
        size_t up = row[j];
        row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
        diagonal = up;
      }
    }
    return row[b.size()];
  };
  std::string best;
  size_t best_distance = SIZE_MAX;
  for (const auto& candidate : candidates) {
    size_t d = distance(name, candidate);
    if (d < best_distance) best_distance = d, best = candidate;
  }
  // Beyond about a third of the name, a suggestion is noise.
  return best_distance <= std::max<size_t>(2, name.size() / 3) ? best : "";
}

}  // namespace mmgen
