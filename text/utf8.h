// UTF-8 decoding and encoding for the tokenizers (which all work on valid UTF-8 text).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace mmgen::tokenizers {

// Decodes the code point starting at `pos` and advances `pos` past it. An invalid or truncated
// sequence decodes to U+FFFD and advances by one byte.
char32_t next_codepoint(std::string_view text, size_t& pos);

// Byte length of the UTF-8 sequence for `c`.
size_t utf8_length(char32_t c);

void append_utf8(std::string& out, char32_t c);

// The text with every invalid byte sequence replaced by U+FFFD (Python's errors="replace" for
// single bytes), so later stages can assume valid UTF-8.
std::string sanitize_utf8(std::string_view text);

std::u32string to_codepoints(std::string_view text);

}  // namespace mmgen::tokenizers
