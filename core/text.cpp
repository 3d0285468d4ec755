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

namespace {

constexpr size_t kMaxQuotedChars = 120;

bool opens_quote(std::string_view text, size_t at) {
  if (at == 0) return true;
  const char before = text[at - 1];
  return before == ' ' || before == '(' || before == '[' || before == '{' || before == '=' ||
         before == ':' || before == ',';
}

bool closes_quote(std::string_view text, size_t at) {
  if (at + 1 == text.size()) return true;
  const char after = text[at + 1];
  return after == ' ' || after == ')' || after == ']' || after == '}' || after == ',' ||
         after == ';' || after == ':' || after == '.';
}

// Whether `text` already ends as text_for_message cuts: "... (N bytes)".
bool already_cut(std::string_view text) {
  const size_t mark = text.rfind("... (");
  if (mark == std::string_view::npos || !text.ends_with(" bytes)")) return false;
  size_t pos = mark + 5;
  return skip_digits(text, pos) > 0 && text.substr(pos) == " bytes)";
}

// The byte length of the first `chars` UTF-8 characters of `text` (escaped text: valid UTF-8).
size_t prefix_bytes(std::string_view text, size_t chars) {
  size_t pos = 0;
  for (size_t shown = 0; pos < text.size() && shown < chars; ++shown) {
    ++pos;
    while (pos < text.size() && (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80) ++pos;
  }
  return pos;
}

size_t utf8_chars(std::string_view text) {
  size_t chars = 0;
  for (char c : text) chars += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return chars;
}

}  // namespace

std::string message_line(std::string_view message, size_t max_bytes) {
  const std::string escaped = text_for_message(message, std::string_view::npos);
  std::string out;
  out.reserve(escaped.size());
  size_t pos = 0;
  while (pos < escaped.size()) {
    const char c = escaped[pos];
    size_t close = std::string_view::npos;
    if ((c == '\'' || c == '"') && opens_quote(escaped, pos)) {
      for (size_t at = escaped.find(c, pos + 1); at != std::string::npos;
           at = escaped.find(c, at + 1))
        if (closes_quote(escaped, at)) {
          close = at;
          break;
        }
    }
    if (close == std::string_view::npos) {
      out += c;
      ++pos;
      continue;
    }
    const std::string_view value = std::string_view(escaped).substr(pos + 1, close - pos - 1);
    out += c;
    if (utf8_chars(value) > kMaxQuotedChars && !already_cut(value))
      out += fmt::format("{}... ({} bytes)", value.substr(0, prefix_bytes(value, kMaxQuotedChars)),
                         value.size());
    else
      out += value;
    out += c;
    pos = close + 1;
  }
  if (out.size() <= max_bytes) return out;
  std::string tail = fmt::format("... ({} bytes)", out.size());
  if (tail.size() >= max_bytes) tail.clear();  // a cap too small for the note: cut bare
  size_t keep = max_bytes - tail.size();
  while (keep > 0 && (static_cast<unsigned char>(out[keep]) & 0xC0) == 0x80) --keep;
  out.resize(keep);
  return out + tail;
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
