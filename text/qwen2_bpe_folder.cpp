#include "text/qwen2_bpe_folder.h"

#include <vector>

namespace mmgen::tokenizers {
namespace {

namespace fs = std::filesystem;

// transformers' qwen2/tokenization_qwen2.py PRETOKENIZE_REGEX.
constexpr const char* kSplitRegex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

}  // namespace

bool is_qwen2_bpe_folder(const fs::path& folder) {
  const std::string name = bpe_folder_class(folder);
  return name == "Qwen2Tokenizer" || name == "Qwen2TokenizerFast";
}

BpeFolder read_qwen2_bpe_folder(const fs::path& folder) {
  BpeFolderFiles files = read_bpe_folder(folder, "Qwen2Tokenizer");

  // A key of tokenizer_config.json wins even when null (Qwen-Image's "bos_token": null means
  // none), then special_tokens_map.json, then Qwen2Tokenizer's default.
  auto special = [&](const char* key, const char* fallback) -> std::optional<std::string> {
    for (const Json* source : {&files.config, &files.special_map})
      if (source->contains(key)) return token_content(*source, key);
    return fallback ? std::optional<std::string>(fallback) : std::nullopt;
  };
  constexpr const char* kDefault = "<|endoftext|>";
  const std::optional<std::string> pad = special("pad_token", kDefault);
  std::vector<std::string> specials;
  for (const std::optional<std::string>& token :
       {special("bos_token", nullptr), special("eos_token", kDefault),
        special("unk_token", kDefault), pad})
    if (token) specials.push_back(*token);
  const Json* extra =
      files.config.contains("additional_special_tokens") ? &files.config : &files.special_map;
  if (auto it = extra->find("additional_special_tokens"); it != extra->end() && it->is_array())
    for (const Json& token : *it)
      if (auto content = token_content(Json{{"t", token}}, "t")) specials.push_back(*content);

  // Qwen2Tokenizer adds all its special tokens (after added_tokens_decoder's) as special.
  std::map<int64_t, Json> added = added_tokens_decoder(files);
  for (const std::string& token : specials) add_special_token(added, files, token, "special");

  // Qwen2Tokenizer passes tokenizer_config.json's add_prefix_space (default false) to ByteLevel.
  bool add_prefix_space = false;
  if (auto it = files.config.find("add_prefix_space"); it != files.config.end() && it->is_boolean())
    add_prefix_space = it->get<bool>();
  Json split = {{"type", "Split"},
                {"pattern", {{"Regex", kSplitRegex}}},
                {"behavior", "Isolated"},
                {"invert", false}};
  Json byte_level = {{"type", "ByteLevel"},
                     {"add_prefix_space", add_prefix_space},
                     {"trim_offsets", true},
                     {"use_regex", false}};
  Json tokenizer = {{"version", "1.0"},
                    {"added_tokens", added_tokens_array(std::move(added))},
                    {"normalizer", {{"type", "NFC"}}},
                    {"pre_tokenizer",
                     {{"type", "Sequence"}, {"pretokenizers", Json::array({split, byte_level})}}},
                    {"post_processor", nullptr},
                    {"decoder",
                     {{"type", "ByteLevel"},
                      {"add_prefix_space", true},
                      {"trim_offsets", true},
                      {"use_regex", true}}},
                    {"model", bpe_model(files, nullptr, "")}};
  return bpe_folder_result(files, tokenizer, pad.value_or(""));
}

}  // namespace mmgen::tokenizers
