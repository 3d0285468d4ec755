#include "text/tokenizer.h"

#include "core/error.h"
#include "core/file.h"
#include "core/interrupt.h"
#include "core/json.h"
#include "text/added_vocabulary.h"
#include "text/clip_bpe_folder.h"
#include "text/decoders.h"
#include "text/json_fields.h"
#include "text/model.h"
#include "text/nfc_lowercase.h"
#include "text/normalizers.h"
#include "text/post_processor.h"
#include "text/pre_tokenizers.h"
#include "text/qwen2_bpe_folder.h"
#include "text/utf8.h"

namespace mmgen::tokenizers {
namespace {

constexpr std::string_view kReSave = "re-download the model or re-save its tokenizer";

// The pad token named in tokenizer_config.json ("pad_token": "<pad>" or {"content": ...}).
std::optional<std::string> pad_token_from_config(const std::filesystem::path& path) {
  if (!std::filesystem::exists(path)) return std::nullopt;
  Json config = parse_json(read_text_file(path), path.string(), kReSave);
  if (!config.is_object() || !config.contains("pad_token")) return std::nullopt;
  const Json& pad = config["pad_token"];
  if (pad.is_string()) return pad.get<std::string>();
  if (pad.is_object() && pad.contains("content") && pad["content"].is_string())
    return pad["content"].get<std::string>();
  return std::nullopt;
}

}  // namespace

Tokenizer::Tokenizer() = default;
Tokenizer::~Tokenizer() = default;

std::unique_ptr<Tokenizer> Tokenizer::load(const std::filesystem::path& folder) {
  std::filesystem::path file = folder / "tokenizer.json";
  if (is_clip_bpe_folder(folder)) {
    ClipBpeFolder clip = read_clip_bpe_folder(folder);
    return from_json(clip.tokenizer_json, clip.source, clip.pad_token);
  }
  if (is_qwen2_bpe_folder(folder)) {
    BpeFolder qwen2 = read_qwen2_bpe_folder(folder);
    return from_json(qwen2.tokenizer_json, qwen2.source,
                     qwen2.pad_token.empty() ? std::nullopt : std::optional(qwen2.pad_token));
  }
  // exists(), not is_regular_file(): a tokenizer.json that is a FIFO or a device is there but
  // refused by read_text_file, which says so.
  check(std::filesystem::exists(file),
        "no tokenizer.json in {}: mmgen reads Hugging Face tokenizers in that format; save one "
        "with transformers' AutoTokenizer.from_pretrained(...).save_pretrained(folder)",
        folder.string());
  return from_json(read_text_file(file), file.string(),
                   pad_token_from_config(folder / "tokenizer_config.json"));
}

std::unique_ptr<Tokenizer> Tokenizer::from_json(std::string_view json_text,
                                                const std::string& source,
                                                std::optional<std::string> pad_token) {
  Json root = parse_json(json_text, source, kReSave);
  check(root.is_object(), "{} is not a JSON object; it is not a tokenizer.json", source);
  auto where = [&](const char* path) { return fmt::format("{}: {}", source, path); };
  auto optional = [&](const char* key) -> const Json& {
    static const Json null_json;
    auto it = root.find(key);
    return it == root.end() ? null_json : *it;
  };
  std::unique_ptr<Tokenizer> t(new Tokenizer());
  t->source_ = source;
  t->model_ = make_model(field(root, "model", source), where("model"));
  t->normalizer_ = make_normalizer(optional("normalizer"), where("normalizer"));
  t->pre_tokenizer_ = make_pre_tokenizer(optional("pre_tokenizer"), where("pre_tokenizer"));
  t->post_processor_ = make_post_processor(optional("post_processor"), where("post_processor"));
  t->decoder_ = make_decoder(optional("decoder"), where("decoder"));
  t->added_ = std::make_unique<AddedVocabulary>(
      parse_added_tokens(optional("added_tokens"), where("added_tokens")), t->normalizer_.get());

  // Pad id: tokenizer.json's padding section, else the pad token of tokenizer_config.json.
  const Json& padding = optional("padding");
  if (padding.is_object() && padding.contains("pad_id") && padding["pad_id"].is_number_integer())
    t->pad_id_ = padding["pad_id"].get<int64_t>();
  else if (pad_token)
    t->pad_id_ = t->token_to_id(*pad_token);
  return t;
}

std::vector<int64_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  std::string clean = sanitize_utf8(text);
  std::vector<int64_t> ids;
  for (Segment& raw : added_->split(clean, /*normalized_tokens=*/false, true)) {
    if (raw.id) {
      ids.push_back(*raw.id);
      continue;
    }
    bool start_kept = raw.at_input_start;
    std::string normalized =
        normalizer_ ? normalizer_->normalize(std::move(raw.text), &start_kept) : raw.text;
    for (Segment& piece : added_->split(normalized, /*normalized_tokens=*/true, start_kept)) {
      if (piece.id) {
        ids.push_back(*piece.id);
        continue;
      }
      std::vector<PreToken> words{{std::move(piece.text), piece.at_input_start}};
      if (pre_tokenizer_) pre_tokenizer_->pre_tokenize(words);
      for (const PreToken& word : words) {
        // A prompt of a megabyte takes seconds: a stop need not wait for all of it.
        stop_between_blocks("words of the prompt");
        if (!word.text.empty()) model_->tokenize(word.text, ids);
      }
    }
  }
  if (add_special_tokens && post_processor_) ids = post_processor_->process(std::move(ids));
  return ids;
}

Encoding Tokenizer::encode_padded(std::string_view text, size_t max_length,
                                  bool add_special_tokens) const {
  std::vector<int64_t> ids = encode(text, /*add_special_tokens=*/false);
  size_t added = add_special_tokens && post_processor_ ? post_processor_->added_count() : 0;
  check(max_length >= added,
        "max_length {} leaves no room for the {} special tokens that {} adds; use a larger "
        "max_length",
        max_length, added, source_);
  if (ids.size() > max_length - added) ids.resize(max_length - added);
  if (add_special_tokens && post_processor_) ids = post_processor_->process(std::move(ids));
  Encoding encoding;
  encoding.attention_mask.assign(ids.size(), 1);
  if (ids.size() < max_length) {
    int64_t pad = pad_id();
    encoding.attention_mask.resize(max_length, 0);
    ids.resize(max_length, pad);
  }
  encoding.ids = std::move(ids);
  return encoding;
}

std::string Tokenizer::decode(const std::vector<int64_t>& ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int64_t id : ids) {
    if (const AddedToken* added = added_->find_id(id)) {
      if (!(skip_special_tokens && added->special)) tokens.push_back(added->content);
      continue;
    }
    if (auto token = model_->id_to_token(id)) tokens.push_back(std::move(*token));
  }
  if (!decoder_) {
    std::string joined;
    for (size_t i = 0; i < tokens.size(); ++i) joined += (i ? " " : "") + tokens[i];
    return joined;
  }
  decoder_->decode_chain(tokens);
  std::string text;
  for (const std::string& token : tokens) text += token;
  return text;
}

int64_t Tokenizer::pad_id() const {
  check(pad_id_.has_value(),
        "{} names no pad token (neither tokenizer.json padding nor tokenizer_config.json "
        "pad_token); padding needs one",
        source_);
  return *pad_id_;
}

std::optional<int64_t> Tokenizer::token_to_id(std::string_view token) const {
  if (const AddedToken* added = added_->find_content(token)) return added->id;
  return model_->token_to_id(token);
}

std::optional<std::string> Tokenizer::id_to_token(int64_t id) const {
  if (const AddedToken* added = added_->find_id(id)) return added->content;
  return model_->id_to_token(id);
}

size_t Tokenizer::vocab_size() const {
  size_t extra = 0;
  for (const AddedToken& token : added_->tokens())
    if (!model_->id_to_token(token.id)) ++extra;
  return model_->vocab_size() + extra;
}

}  // namespace mmgen::tokenizers
