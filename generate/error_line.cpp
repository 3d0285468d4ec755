#include "generate/error_line.h"

#include <cstdio>
#include <string>

#include "core/text.h"

namespace mmgen::cli {

void print_error_line(std::string_view context, std::string_view message) {
  constexpr std::string_view prefix = "mmgen: error: ";
  const size_t room = kMaxErrorLine - prefix.size();
  const std::string head(context.substr(0, room / 2));
  const std::string line = std::string(prefix) + head + message_line(message, room - head.size());
  std::fprintf(stderr, "%s\n", line.c_str());
}

}  // namespace mmgen::cli
