#include "text/grapheme.h"

#include "text/unicode_data.h"
#include "text/utf8.h"

namespace mmgen::tokenizers {

using unicode::GraphemeBreak;

namespace {

bool is_control_like(GraphemeBreak b) {
  return b == GraphemeBreak::Control || b == GraphemeBreak::CR || b == GraphemeBreak::LF;
}

}  // namespace

size_t grapheme_end(std::string_view text, size_t start) {
  size_t pos = start;
  GraphemeBreak previous = unicode::grapheme_break(next_codepoint(text, pos));
  // GB11: an emoji ZWJ sequence continues when ExtPict Extend* ZWJ precedes an ExtPict.
  bool pictographic_run = previous == GraphemeBreak::ExtendedPictographic;
  bool zwj_after_pictographic = false;
  // GB12/13: regional indicators pair up.
  size_t regional_run = previous == GraphemeBreak::RegionalIndicator ? 1 : 0;
  while (pos < text.size()) {
    size_t next_pos = pos;
    GraphemeBreak next = unicode::grapheme_break(next_codepoint(text, next_pos));
    bool joined = false;
    if (previous == GraphemeBreak::CR && next == GraphemeBreak::LF) {
      joined = true;  // GB3
    } else if (is_control_like(previous) || is_control_like(next)) {
      joined = false;  // GB4, GB5
    } else if (previous == GraphemeBreak::L &&
               (next == GraphemeBreak::L || next == GraphemeBreak::V || next == GraphemeBreak::LV ||
                next == GraphemeBreak::LVT)) {
      joined = true;  // GB6
    } else if ((previous == GraphemeBreak::LV || previous == GraphemeBreak::V) &&
               (next == GraphemeBreak::V || next == GraphemeBreak::T)) {
      joined = true;  // GB7
    } else if ((previous == GraphemeBreak::LVT || previous == GraphemeBreak::T) &&
               next == GraphemeBreak::T) {
      joined = true;  // GB8
    } else if (next == GraphemeBreak::Extend || next == GraphemeBreak::ZWJ ||
               next == GraphemeBreak::SpacingMark || previous == GraphemeBreak::Prepend) {
      joined = true;  // GB9, GB9a, GB9b
    } else if (previous == GraphemeBreak::ZWJ && zwj_after_pictographic &&
               next == GraphemeBreak::ExtendedPictographic) {
      joined = true;  // GB11
    } else if (previous == GraphemeBreak::RegionalIndicator &&
               next == GraphemeBreak::RegionalIndicator && regional_run % 2 == 1) {
      joined = true;  // GB12, GB13
    }
    if (!joined) break;
    zwj_after_pictographic = next == GraphemeBreak::ZWJ && pictographic_run;
    if (next == GraphemeBreak::ExtendedPictographic)
      pictographic_run = true;
    else if (next != GraphemeBreak::Extend)
      pictographic_run = false;
    regional_run = next == GraphemeBreak::RegionalIndicator ? regional_run + 1 : 0;
    previous = next;
    pos = next_pos;
  }
  return pos;
}

}  // namespace mmgen::tokenizers
