// How the CLI prints an error: one line on stderr, "mmgen: error: " then the message, escaped and
// cut by core/text.h's message_line so the line is at most kMaxErrorLine bytes (docs/security.md).
#pragma once

#include <cstddef>
#include <string_view>

namespace mmgen::cli {

inline constexpr size_t kMaxErrorLine = 2000;  // bytes, without the newline

// `context` is mmgen's own text, already escaped (a batch's "prompt 2 of 5 (...): ").
void print_error_line(std::string_view context, std::string_view message);

}  // namespace mmgen::cli
