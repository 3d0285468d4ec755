#include "text/byte_level.h"

#include "text/utf8.h"

namespace mmgen::tokenizers {
namespace {

bool printable(int byte) {
  return (byte >= '!' && byte <= '~') || (byte >= 0xA1 && byte <= 0xAC) || (byte >= 0xAE);
}

struct Tables {
  std::array<std::string, 256> symbols;
  std::array<int, 512> bytes{};  // code points below 512 → byte, or -1
  Tables() {
    bytes.fill(-1);
    int shifted = 0;
    for (int byte = 0; byte < 256; ++byte) {
      char32_t c = printable(byte) ? char32_t(byte) : char32_t(256 + shifted++);
      append_utf8(symbols[size_t(byte)], c);
      bytes[c] = byte;
    }
  }
};

const Tables& tables() {
  static const Tables instance;
  return instance;
}

}  // namespace

const std::array<std::string, 256>& byte_to_symbol() {
  return tables().symbols;
}

std::optional<unsigned char> symbol_to_byte(char32_t c) {
  if (c >= 512 || tables().bytes[c] < 0) return std::nullopt;
  return static_cast<unsigned char>(tables().bytes[c]);
}

std::string bytes_to_symbols(std::string_view text) {
  const auto& symbols = byte_to_symbol();
  std::string out;
  out.reserve(text.size() * 2);
  for (char byte : text) out += symbols[static_cast<unsigned char>(byte)];
  return out;
}

}  // namespace mmgen::tokenizers
