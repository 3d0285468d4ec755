// Extended grapheme cluster boundaries (Unicode UAX #29, rules GB3-GB13), which the HF
// Precompiled normalizer uses to decide what it looks up in the sentencepiece charsmap.
#pragma once

#include <string_view>

namespace mmgen::tokenizers {

// Byte offset where the grapheme cluster that starts at `start` ends. `text` is valid UTF-8
// and start < text.size().
size_t grapheme_end(std::string_view text, size_t start);

}  // namespace mmgen::tokenizers
