// The one error type mmgen throws for anything a user can cause: bad files, bad flags, bad
// requests. Its message is a single line saying what went wrong, where, and how to fix it; the CLI
// prints it as is and exits non-zero.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace mmgen {

class Error : public std::runtime_error {
 public:
  // A NUL from an untrusted name (a JSON key "vae\u0000x") would end what() there and cut the
  // rest of the line: it is kept as the text \x00 (core/text.h's rule for control bytes).
  explicit Error(const std::string& message) : std::runtime_error(without_nul(message)) {}

 private:
  static std::string without_nul(std::string message) {
    for (size_t at = message.find('\0'); at != std::string::npos; at = message.find('\0', at))
      message.replace(at, 1, "\\x00");
    return message;
  }
};

// Throws Error with a fmt-formatted message.
template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

// Checks a condition that user input can violate.
template <typename... Args>
void check(bool condition, fmt::format_string<Args...> format, Args&&... args) {
  if (!condition) throw Error(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace mmgen
