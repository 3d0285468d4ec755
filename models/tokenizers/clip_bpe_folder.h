// CLIP tokenizers saved as the FLUX.1 / Stable Diffusion Hub repositories ship them: vocab.json +
// merges.txt + tokenizer_config.json (tokenizer_class "CLIPTokenizer"), no tokenizer.json.
// transformers' CLIPTokenizer builds its tokenizers pipeline from those files in code; this
// builds the same pipeline as the tokenizer.json it would save, which Tokenizer::load reads.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

namespace mmgen::tokenizers {

// True when `folder` has no tokenizer.json and its tokenizer_config.json names CLIPTokenizer
// (or CLIPTokenizerFast).
bool is_clip_bpe_folder(const std::filesystem::path& folder);

struct ClipBpeFolder {
  // CLIPTokenizer's pipeline as tokenizer.json text, with no normalizer: its normalizer
  // (NFC, Replace, Lowercase) is make_clip_normalizer() (clip_normalizer.h).
  std::string tokenizer_json;
  std::string source;  // names the folder's files in error messages
  std::string pad_token;
  std::optional<int64_t> model_max_length;  // tokenizer_config.json's (77 for CLIP-L)
};

// Reads vocab.json, merges.txt and the special tokens of tokenizer_config.json /
// special_tokens_map.json (CLIPTokenizer's defaults where neither names one). Throws Error
// naming the file when one is missing or malformed.
ClipBpeFolder read_clip_bpe_folder(const std::filesystem::path& folder);

}  // namespace mmgen::tokenizers
