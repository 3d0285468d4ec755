#include "text/unicode_data.h"

#include <algorithm>

namespace mmgen::tokenizers::unicode {
namespace {

bool in_ranges(const CodepointRange* ranges, size_t count, char32_t c) {
  const CodepointRange* end = ranges + count;
  const CodepointRange* it = std::upper_bound(
      ranges, end, c, [](char32_t value, const CodepointRange& r) { return value < r.first; });
  return it != ranges && c <= (it - 1)->last;
}

}  // namespace

bool is_letter(char32_t c) {
  if (c < 0x80) return (c | 0x20) >= 'a' && (c | 0x20) <= 'z';
  return in_ranges(tables::kLetterRanges, tables::kLetterRangesCount, c);
}

bool is_number(char32_t c) {
  if (c < 0x80) return c >= '0' && c <= '9';
  return in_ranges(tables::kNumberRanges, tables::kNumberRangesCount, c);
}

bool is_decimal_digit(char32_t c) {
  if (c < 0x80) return c >= '0' && c <= '9';
  return in_ranges(tables::kDecimalDigitRanges, tables::kDecimalDigitRangesCount, c);
}

bool is_word(char32_t c) {
  if (c < 0x80) return is_letter(c) || is_decimal_digit(c) || c == '_';
  return in_ranges(tables::kWordRanges, tables::kWordRangesCount, c);
}

bool is_white_space(char32_t c) {
  // The White_Space property is small and stable; listed here rather than generated.
  switch (c) {
    case 0x09:
    case 0x0A:
    case 0x0B:
    case 0x0C:
    case 0x0D:
    case 0x20:
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
      return true;
    default:
      return c >= 0x2000 && c <= 0x200A;
  }
}

bool is_python_space(char32_t c) {
  return is_white_space(c) || (c >= 0x1C && c <= 0x1F);
}

GraphemeBreak grapheme_break(char32_t c) {
  const GraphemeBreakRange* begin = tables::kGraphemeBreakRanges;
  const GraphemeBreakRange* end = begin + tables::kGraphemeBreakRangesCount;
  const GraphemeBreakRange* it = std::upper_bound(
      begin, end, c, [](char32_t value, const GraphemeBreakRange& r) { return value < r.first; });
  if (it != begin && c <= (it - 1)->last) return (it - 1)->value;
  return GraphemeBreak::Other;
}

}  // namespace mmgen::tokenizers::unicode
