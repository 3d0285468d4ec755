// Byte-level BPE tokenizers saved without a tokenizer.json, as several Hub repositories ship them:
// vocab.json + merges.txt + tokenizer_config.json (+ special_tokens_map.json). transformers'
// tokenizer classes (CLIPTokenizer, Qwen2Tokenizer) build their tokenizers pipeline from those
// files in code; each class's reader here (clip_bpe_folder.h, qwen2_bpe_folder.h) builds the same
// pipeline as the tokenizer.json it would save, which Tokenizer::load reads. This file holds what
// the classes share: reading the files and the added tokens.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "text/json_fields.h"

namespace mmgen::tokenizers {

// What a reader hands to Tokenizer::load.
struct BpeFolder {
  std::string tokenizer_json;               // the class's pipeline as tokenizer.json text
  std::string source;                       // names the folder's files in error messages
  std::string pad_token;                    // "" when the folder names none
  std::optional<int64_t> model_max_length;  // tokenizer_config.json's
};

// The folder's files, parsed.
struct BpeFolderFiles {
  std::filesystem::path folder;
  Json config;       // tokenizer_config.json, {} when absent
  Json special_map;  // special_tokens_map.json, {} when absent
  Json vocab;        // vocab.json: token -> id
  Json merges;       // merges.txt as [[left, right], ...] in rank order
};

// tokenizer_config.json's tokenizer_class when `folder` has no tokenizer.json, else "".
std::string bpe_folder_class(const std::filesystem::path& folder);

// Reads the four files (vocab.json and merges.txt required). `class_name` names the tokenizer
// class in error messages. Throws Error naming the file when one is missing or malformed.
BpeFolderFiles read_bpe_folder(const std::filesystem::path& folder, std::string_view class_name);

// A special token's content: "text" or {"content": "text", ...} under `key`; none when absent,
// null or malformed.
std::optional<std::string> token_content(const Json& object, const char* key);

// tokenizer_config.json's added_tokens_decoder as tokenizer.json added_tokens entries, by id. A
// token in vocab.json takes its vocab id (HF's rule for added tokens already in the model),
// others the entry's key.
std::map<int64_t, Json> added_tokens_decoder(const BpeFolderFiles& files);

// Adds `content` as a special, unnormalised added token unless an added token has that content
// already; its id is its vocab.json id (Error naming `role` when it has none).
void add_special_token(std::map<int64_t, Json>& added, const BpeFolderFiles& files,
                       const std::string& content, const char* role);

// The vocab.json id of `token` (Error naming `role` when absent).
int64_t vocab_id(const BpeFolderFiles& files, const std::string& token, const char* role);

// The added tokens in id order, as tokenizer.json's "added_tokens" array.
Json added_tokens_array(std::map<int64_t, Json> added);

// tokenizer.json's BPE model over the folder's vocabulary and merges (moved out of `files`).
Json bpe_model(BpeFolderFiles& files, const Json& unk_token, const std::string& end_of_word_suffix);

// `source` and model_max_length as the readers report them.
BpeFolder bpe_folder_result(const BpeFolderFiles& files, const Json& tokenizer,
                            std::string pad_token);

}  // namespace mmgen::tokenizers
