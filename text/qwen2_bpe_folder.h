// Qwen2 tokenizers as the Qwen/Qwen-Image Hub repository ships them: vocab.json + merges.txt +
// tokenizer_config.json (tokenizer_class "Qwen2Tokenizer", the special tokens in its
// added_tokens_decoder), no tokenizer.json. transformers' Qwen2Tokenizer builds its tokenizers
// pipeline from those files in code; this builds the same pipeline as the tokenizer.json it would
// save (see bpe_folder.h).
#pragma once

#include <filesystem>

#include "text/bpe_folder.h"

namespace mmgen::tokenizers {

// True when `folder` has no tokenizer.json and its tokenizer_config.json names Qwen2Tokenizer
// (or Qwen2TokenizerFast).
bool is_qwen2_bpe_folder(const std::filesystem::path& folder);

// Qwen2Tokenizer's pipeline: NFC; Qwen2's split regex (isolated) then ByteLevel without its own
// regex; byte-level BPE without an end-of-word suffix or unknown token; the added tokens of
// added_tokens_decoder and the special tokens (special, matched in the raw text); no
// post-processor adding tokens. Throws Error naming the file when one is missing or malformed.
BpeFolder read_qwen2_bpe_folder(const std::filesystem::path& folder);

}  // namespace mmgen::tokenizers
