// GPT-2's byte ↔ character table: byte-level BPE vocabularies spell every byte as a printable
// code point (printable Latin-1 bytes as themselves, the rest shifted to U+0100 and up).
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>

namespace mmgen::tokenizers {

// UTF-8 of the code point that stands for each byte.
const std::array<std::string, 256>& byte_to_symbol();
// The byte that code point `c` stands for, if any.
std::optional<unsigned char> symbol_to_byte(char32_t c);

// Each byte of `text` replaced by its symbol.
std::string bytes_to_symbols(std::string_view text);

}  // namespace mmgen::tokenizers
