#include "text/bpe_folder.h"

#include <charconv>
#include <sstream>

#include "core/error.h"
#include "core/file.h"
#include "core/json.h"

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

void require_file(const fs::path& path, std::string_view class_name) {
  check(fs::exists(path),
        "no {} in {}: a {} folder needs vocab.json and merges.txt (or a tokenizer.json)",
        path.filename().string(), path.parent_path().string(), class_name);
}

Json read_vocab(const fs::path& path, std::string_view class_name) {
  require_file(path, class_name);
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
Json read_merges(const fs::path& path, std::string_view class_name) {
  require_file(path, class_name);
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

Json added_token(int64_t id, const std::string& content, const Json& flags) {
  auto flag = [&](const char* key, bool fallback) {
    return flags.is_object() && flags.contains(key) && flags[key].is_boolean()
               ? flags[key].get<bool>()
               : fallback;
  };
  return Json{{"id", id},
              {"content", content},
              {"single_word", flag("single_word", false)},
              {"lstrip", flag("lstrip", false)},
              {"rstrip", flag("rstrip", false)},
              {"normalized", flag("normalized", false)},
              {"special", flag("special", true)}};
}

}  // namespace

std::string bpe_folder_class(const fs::path& folder) {
  if (fs::exists(folder / "tokenizer.json")) return "";
  const fs::path config_path = folder / "tokenizer_config.json";
  if (!fs::exists(config_path)) return "";
  Json config = read_json_or_empty(config_path);
  auto it = config.find("tokenizer_class");
  return it != config.end() && it->is_string() ? it->get<std::string>() : "";
}

BpeFolderFiles read_bpe_folder(const fs::path& folder, std::string_view class_name) {
  BpeFolderFiles files;
  files.folder = folder;
  files.config = read_json_or_empty(folder / "tokenizer_config.json");
  files.special_map = read_json_or_empty(folder / "special_tokens_map.json");
  files.vocab = read_vocab(folder / "vocab.json", class_name);
  files.merges = read_merges(folder / "merges.txt", class_name);
  return files;
}

std::optional<std::string> token_content(const Json& object, const char* key) {
  auto it = object.find(key);
  if (it == object.end()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
    return (*it)["content"].get<std::string>();
  return std::nullopt;
}

int64_t vocab_id(const BpeFolderFiles& files, const std::string& token, const char* role) {
  auto it = files.vocab.find(token);
  check(it != files.vocab.end(), "{}: the {} token '{}' is not in the vocabulary; {}",
        (files.folder / "vocab.json").string(), role, token, kFix);
  return it->get<int64_t>();
}

std::map<int64_t, Json> added_tokens_decoder(const BpeFolderFiles& files) {
  std::map<int64_t, Json> added;
  auto it = files.config.find("added_tokens_decoder");
  if (it == files.config.end() || !it->is_object()) return added;
  const std::string where = (files.folder / "tokenizer_config.json").string();
  for (auto entry = it->begin(); entry != it->end(); ++entry) {
    const Json& token = entry.value();
    std::optional<std::string> content = token_content(Json{{"t", token}}, "t");
    check(content.has_value(), "{}: added_tokens_decoder['{}'] has no content; {}", where,
          entry.key(), kFix);
    int64_t id = -1;
    if (auto in_vocab = files.vocab.find(*content); in_vocab != files.vocab.end()) {
      id = in_vocab->get<int64_t>();
    } else {
      const std::string& key = entry.key();
      const auto [end, error] = std::from_chars(key.data(), key.data() + key.size(), id);
      check(error == std::errc() && end == key.data() + key.size() && id >= 0,
            "{}: added_tokens_decoder key '{}' is not a token id; {}", where, key, kFix);
    }
    added[id] = added_token(id, *content, token);
  }
  return added;
}

void add_special_token(std::map<int64_t, Json>& added, const BpeFolderFiles& files,
                       const std::string& content, const char* role) {
  for (const auto& [id, token] : added)
    if (token["content"] == content) return;
  const int64_t id = vocab_id(files, content, role);
  added[id] = added_token(id, content, Json::object());
}

Json added_tokens_array(std::map<int64_t, Json> added) {
  Json array = Json::array();
  for (auto& [id, token] : added) array.push_back(std::move(token));
  return array;
}

Json bpe_model(BpeFolderFiles& files, const Json& unk_token,
               const std::string& end_of_word_suffix) {
  return Json{{"type", "BPE"},
              {"dropout", nullptr},
              {"unk_token", unk_token},
              {"continuing_subword_prefix", ""},
              {"end_of_word_suffix", end_of_word_suffix},
              {"fuse_unk", false},
              {"byte_fallback", false},
              {"ignore_merges", false},
              {"vocab", std::move(files.vocab)},
              {"merges", std::move(files.merges)}};
}

BpeFolder bpe_folder_result(const BpeFolderFiles& files, const Json& tokenizer,
                            std::string pad_token) {
  BpeFolder out;
  out.tokenizer_json = tokenizer.dump();
  out.source = (files.folder / "vocab.json").string() + " + merges.txt";
  out.pad_token = std::move(pad_token);
  if (auto it = files.config.find("model_max_length");
      it != files.config.end() && it->is_number_integer())
    out.model_max_length = it->get<int64_t>();
  return out;
}

}  // namespace mmgen::tokenizers
