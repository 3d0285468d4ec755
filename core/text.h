// Checks on text from untrusted files and flags, written as plain loops: std::regex's matcher
// recurses once per character and overflows the stack on long input (a 60 KB number in a config
// file crashed it), and nlohmann::json throws on strings that are not UTF-8 when it dumps them.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace mmgen {

// The offset of the first byte that does not belong to valid UTF-8 (overlong forms, surrogates
// and code points past U+10FFFF are invalid), or std::string_view::npos when all of it is valid.
size_t invalid_utf8_offset(std::string_view text);

// Untrusted text as an error message quotes it: control characters (C0, DEL and C1, so no
// terminal escape gets through), NUL and bytes that are not UTF-8 become \xNN, and past
// `max_chars` characters it is cut with "... (N bytes)". A tensor name, a key, a value from a file.
std::string text_for_message(std::string_view text, size_t max_chars = 120);

// A whole error message as the CLI prints it: escaped as text_for_message escapes, every quoted
// value in it ('...' or "...", opening after a space or bracket, closing before one or the end)
// cut at 120 characters, and the whole cut to `max_bytes` bytes. Applied where messages are
// printed, so the rule holds for a value a thrower quoted without cutting it.
std::string message_line(std::string_view message, size_t max_bytes);

// [-+]?[0-9]+
bool is_integer_text(std::string_view text);

// [-+]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)? : a decimal number as YAML and key=value
// settings write it (integers included).
bool is_decimal_text(std::string_view text);

// The closest of `candidates` to `name` (edit distance), for "did you mean" hints; empty if none
// is reasonably close.
std::string nearest_name(std::string_view name, const std::vector<std::string>& candidates);

}  // namespace mmgen
