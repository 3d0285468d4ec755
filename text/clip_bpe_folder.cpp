#include "text/clip_bpe_folder.h"

namespace mmgen::tokenizers {

namespace fs = std::filesystem;

bool is_clip_bpe_folder(const fs::path& folder) {
  const std::string name = bpe_folder_class(folder);
  return name == "CLIPTokenizer" || name == "CLIPTokenizerFast";
}

ClipBpeFolder read_clip_bpe_folder(const fs::path& folder) {
  BpeFolderFiles files = read_bpe_folder(folder, "CLIPTokenizer");

  // tokenizer_config.json first, then special_tokens_map.json, then CLIPTokenizer's defaults.
  auto special = [&](const char* key, const char* fallback) {
    if (auto content = token_content(files.config, key)) return *content;
    if (auto content = token_content(files.special_map, key)) return *content;
    return std::string(fallback);
  };
  const std::string bos = special("bos_token", "<|startoftext|>");
  const std::string eos = special("eos_token", "<|endoftext|>");
  const std::string unk = special("unk_token", "<|endoftext|>");
  const std::string pad = special("pad_token", "<|endoftext|>");

  // transformers adds every special token (and tokenizer_config.json's added_tokens_decoder)
  // as an added token; special tokens are matched in the raw text (normalized: false).
  std::map<int64_t, Json> added = added_tokens_decoder(files);
  for (const std::string* token : {&pad, &bos, &eos, &unk})
    add_special_token(added, files, *token, "special");
  const int64_t bos_id = vocab_id(files, bos, "bos");
  const int64_t eos_id = vocab_id(files, eos, "eos");

  Json split = {{"type", "Split"},
                {"pattern",
                 {{"Regex",
                   "<\\|startoftext\\|>|<\\|endoftext\\|>|'s|'t|'re|'ve|'m|'ll|'d|[\\p{L}]+|"
                   "[\\p{N}]|[^\\s\\p{L}\\p{N}]+"}}},
                {"behavior", "Removed"},
                {"invert", true}};
  Json byte_level = {{"type", "ByteLevel"},
                     {"add_prefix_space", false},
                     {"trim_offsets", true},
                     {"use_regex", true}};
  Json tokenizer = {
      {"version", "1.0"},
      {"added_tokens", added_tokens_array(std::move(added))},
      // transformers' CLIPTokenizer: NFC, runs of whitespace to one space, lowercase.
      {"normalizer",
       {{"type", "Sequence"},
        {"normalizers",
         Json::array({{{"type", "NFC"}},
                      {{"type", "Replace"}, {"pattern", {{"Regex", "\\s+"}}}, {"content", " "}},
                      {{"type", "Lowercase"}}})}}},
      {"pre_tokenizer",
       {{"type", "Sequence"}, {"pretokenizers", Json::array({split, byte_level})}}},
      {"post_processor",
       {{"type", "RobertaProcessing"},
        {"sep", Json::array({eos, eos_id})},
        {"cls", Json::array({bos, bos_id})},
        {"trim_offsets", false},
        {"add_prefix_space", false}}},
      {"decoder",
       {{"type", "ByteLevel"},
        {"add_prefix_space", true},
        {"trim_offsets", true},
        {"use_regex", true}}},
      {"model", bpe_model(files, unk, "</w>")}};
  return bpe_folder_result(files, tokenizer, pad);
}

}  // namespace mmgen::tokenizers
