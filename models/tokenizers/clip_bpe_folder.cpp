#include "models/tokenizers/clip_bpe_folder.h"

#include <map>
#include <sstream>
#include <vector>

#include "core/error.h"
#include "core/file.h"
#include "core/json.h"
#include "models/tokenizers/json_fields.h"

namespace mmgen::tokenizers {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kFix = "re-download the tokenizer folder";

Json read_json_or_empty(const fs::path& path) {
  if (!fs::exists(path)) return Json::object();
  Json json = parse_json(read_text_file(path), path.string(), kFix);
  check(json.is_object(), "{} is not a JSON object; {}", path.string(), kFix);
  return json;
}

// A special token's content: "text" or {"content": "text", ...}.
std::optional<std::string> token_content(const Json& config, const char* key) {
  auto it = config.find(key);
  if (it == config.end()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
    return (*it)["content"].get<std::string>();
  return std::nullopt;
}

Json read_vocab(const fs::path& path) {
  check(fs::exists(path),
        "no vocab.json in {}: a CLIPTokenizer folder needs vocab.json and "
        "merges.txt (or a tokenizer.json)",
        path.parent_path().string());
  Json vocab = parse_json(read_text_file(path), path.string(), kFix);
  check(vocab.is_object() && !vocab.empty(), "{} should be a non-empty object of token: id; {}",
        path.string(), kFix);
  for (auto it = vocab.begin(); it != vocab.end(); ++it)
    check(it.value().is_number_integer(), "{}: the id of '{}' is not an integer; {}", path.string(),
          it.key(), kFix);
  return vocab;
}

// merges.txt as HF tokenizers reads it: "#version" lines skipped, every other line two tokens
// separated by one space, in rank order.
Json read_merges(const fs::path& path) {
  check(fs::exists(path),
        "no merges.txt in {}: a CLIPTokenizer folder needs vocab.json and "
        "merges.txt (or a tokenizer.json)",
        path.parent_path().string());
  std::istringstream text(read_text_file(path));
  Json merges = Json::array();
  std::string line;
  for (size_t number = 1; std::getline(text, line); ++number) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.rfind("#version", 0) == 0) continue;
    size_t space = line.find(' ');
    check(space != std::string::npos && space > 0 && space + 1 < line.size() &&
              line.find(' ', space + 1) == std::string::npos,
          "{}:{}: '{}' should be two tokens separated by one space; {}", path.string(), number,
          line, kFix);
    merges.push_back(Json::array({line.substr(0, space), line.substr(space + 1)}));
  }
  return merges;
}

int64_t id_in(const Json& vocab, const std::string& token, const char* role, const fs::path& path) {
  auto it = vocab.find(token);
  check(it != vocab.end(), "{}: the {} token '{}' is not in the vocabulary; {}", path.string(),
        role, token, kFix);
  return it->get<int64_t>();
}

}  // namespace

bool is_clip_bpe_folder(const fs::path& folder) {
  if (fs::exists(folder / "tokenizer.json")) return false;
  fs::path config_path = folder / "tokenizer_config.json";
  if (!fs::exists(config_path)) return false;
  Json config = read_json_or_empty(config_path);
  auto it = config.find("tokenizer_class");
  return it != config.end() && it->is_string() &&
         (*it == "CLIPTokenizer" || *it == "CLIPTokenizerFast");
}

ClipBpeFolder read_clip_bpe_folder(const fs::path& folder) {
  Json config = read_json_or_empty(folder / "tokenizer_config.json");
  Json special_map = read_json_or_empty(folder / "special_tokens_map.json");
  Json vocab = read_vocab(folder / "vocab.json");
  Json merges = read_merges(folder / "merges.txt");
  const fs::path vocab_path = folder / "vocab.json";

  // tokenizer_config.json first, then special_tokens_map.json, then CLIPTokenizer's defaults.
  auto special = [&](const char* key, const char* fallback) {
    if (auto content = token_content(config, key)) return *content;
    if (auto content = token_content(special_map, key)) return *content;
    return std::string(fallback);
  };
  const std::string bos = special("bos_token", "<|startoftext|>");
  const std::string eos = special("eos_token", "<|endoftext|>");
  const std::string unk = special("unk_token", "<|endoftext|>");
  const std::string pad = special("pad_token", "<|endoftext|>");

  // transformers adds every special token (and tokenizer_config.json's added_tokens_decoder)
  // as an added token; special tokens are matched in the raw text (normalized: false).
  std::map<int64_t, Json> added;
  if (auto it = config.find("added_tokens_decoder"); it != config.end() && it->is_object()) {
    for (auto entry = it->begin(); entry != it->end(); ++entry) {
      const Json& token = entry.value();
      std::optional<std::string> content = token_content(Json{{"t", token}}, "t");
      check(content.has_value(), "{}: added_tokens_decoder['{}'] has no content; {}",
            (folder / "tokenizer_config.json").string(), entry.key(), kFix);
      int64_t id = id_in(vocab, *content, "added", vocab_path);
      auto flag = [&](const char* key, bool fallback) {
        return token.is_object() && token.contains(key) && token[key].is_boolean()
                   ? token[key].get<bool>()
                   : fallback;
      };
      added[id] = Json{{"id", id},
                       {"content", *content},
                       {"single_word", flag("single_word", false)},
                       {"lstrip", flag("lstrip", false)},
                       {"rstrip", flag("rstrip", false)},
                       {"normalized", flag("normalized", false)},
                       {"special", flag("special", true)}};
    }
  }
  for (const std::string* token : {&pad, &bos, &eos, &unk}) {
    int64_t id = id_in(vocab, *token, "special", vocab_path);
    if (!added.count(id))
      added[id] =
          Json{{"id", id},        {"content", *token},   {"single_word", false}, {"lstrip", false},
               {"rstrip", false}, {"normalized", false}, {"special", true}};
  }
  const int64_t bos_id = id_in(vocab, bos, "bos", vocab_path);
  const int64_t eos_id = id_in(vocab, eos, "eos", vocab_path);
  Json added_tokens = Json::array();
  for (auto& [id, token] : added) added_tokens.push_back(std::move(token));

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
  Json tokenizer = {{"version", "1.0"},
                    {"added_tokens", std::move(added_tokens)},
                    {"normalizer", nullptr},
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
                    {"model",
                     {{"type", "BPE"},
                      {"dropout", nullptr},
                      {"unk_token", unk},
                      {"continuing_subword_prefix", ""},
                      {"end_of_word_suffix", "</w>"},
                      {"fuse_unk", false},
                      {"byte_fallback", false},
                      {"ignore_merges", false},
                      {"vocab", std::move(vocab)},
                      {"merges", std::move(merges)}}}};

  ClipBpeFolder out;
  out.tokenizer_json = tokenizer.dump();
  out.source = (folder / "vocab.json").string() + " + merges.txt";
  out.pad_token = pad;
  if (auto it = config.find("model_max_length"); it != config.end() && it->is_number_integer())
    out.model_max_length = it->get<int64_t>();
  return out;
}

}  // namespace mmgen::tokenizers
