// CLIP tokenizers saved as the FLUX.1 / Stable Diffusion Hub repositories ship them: vocab.json +
// merges.txt + tokenizer_config.json (tokenizer_class "CLIPTokenizer"), no tokenizer.json.
// transformers' CLIPTokenizer builds its tokenizers pipeline from those files in code; this
// builds the same pipeline as the tokenizer.json it would save (see bpe_folder.h).
#pragma once

#include <filesystem>

#include "text/bpe_folder.h"

namespace mmgen::tokenizers {

// True when `folder` has no tokenizer.json and its tokenizer_config.json names CLIPTokenizer
// (or CLIPTokenizerFast).
bool is_clip_bpe_folder(const std::filesystem::path& folder);

// tokenizer_json is CLIPTokenizer's pipeline, its normalizer (NFC, Replace, Lowercase; see
// nfc_lowercase.h) included. model_max_length is 77 for CLIP-L.
using ClipBpeFolder = BpeFolder;

// Reads vocab.json, merges.txt and the special tokens of tokenizer_config.json /
// special_tokens_map.json (CLIPTokenizer's defaults where neither names one). Throws Error
// naming the file when one is missing or malformed.
ClipBpeFolder read_clip_bpe_folder(const std::filesystem::path& folder);

}  // namespace mmgen::tokenizers
