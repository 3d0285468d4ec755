#include "text/normalizers.h"

#include <vector>

#include "text/nfc_lowercase.h"
#include "text/precompiled_charsmap.h"
#include "text/regex.h"
#include "text/unicode_data.h"
#include "text/utf8.h"

namespace mmgen::tokenizers {
namespace {

class SequenceNormalizer final : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> steps)
      : steps_(std::move(steps)) {}
  std::string normalize(std::string text, bool* start_kept) const override {
    for (const auto& step : steps_) text = step->normalize(std::move(text), start_kept);
    return text;
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

class PrecompiledNormalizer final : public Normalizer {
 public:
  explicit PrecompiledNormalizer(PrecompiledCharsmap map) : map_(std::move(map)) {}
  // HF aligns the output of this normalizer character by character from the start, so a
  // first character that maps to nothing does not move the start (start_kept is untouched).
  std::string normalize(std::string text, bool*) const override { return map_.normalize(text); }

 private:
  PrecompiledCharsmap map_;
};

// Replace: every non-overlapping match of a literal string or a regex becomes `content`.
class ReplaceNormalizer final : public Normalizer {
 public:
  ReplaceNormalizer(std::string literal, std::unique_ptr<Regex> regex, std::string content)
      : literal_(std::move(literal)), regex_(std::move(regex)), content_(std::move(content)) {}
  std::string normalize(std::string text, bool* start_kept) const override {
    std::string out;
    size_t copied = 0;
    if (regex_) {
      for (const Regex::Match& m : regex_->find_all(text)) {
        if (m.begin == 0 && content_.empty() && start_kept) *start_kept = false;
        out.append(text, copied, m.begin - copied);
        out += content_;
        copied = m.end;
      }
    } else if (!literal_.empty()) {
      for (size_t at = text.find(literal_); at != std::string::npos;
           at = text.find(literal_, copied)) {
        if (at == 0 && content_.empty() && start_kept) *start_kept = false;
        out.append(text, copied, at - copied);
        out += content_;
        copied = at + literal_.size();
      }
    }
    out.append(text, copied, std::string::npos);
    return out;
  }

 private:
  std::string literal_;
  std::unique_ptr<Regex> regex_;
  std::string content_;
};

class StripNormalizer final : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  std::string normalize(std::string text, bool* start_kept) const override {
    std::u32string cps = to_codepoints(text);
    size_t begin = 0, end = cps.size();
    if (left_)
      while (begin < end && unicode::is_white_space(cps[begin])) ++begin;
    if (begin > 0 && start_kept) *start_kept = false;
    if (right_)
      while (end > begin && unicode::is_white_space(cps[end - 1])) --end;
    std::string out;
    for (size_t i = begin; i < end; ++i) append_utf8(out, cps[i]);
    return out;
  }

 private:
  bool left_, right_;
};

class PrependNormalizer final : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  // The prefix is aligned with the first character, so the start stays where it was.
  std::string normalize(std::string text, bool*) const override {
    return text.empty() ? text : prefix_ + text;
  }

 private:
  std::string prefix_;
};

}  // namespace

std::unique_ptr<Normalizer> make_normalizer(const Json& spec, const std::string& where) {
  if (spec.is_null()) return nullptr;
  std::string type = string_field(spec, "type", where);
  if (type == "Sequence") {
    const Json& items = array_field(spec, "normalizers", where);
    std::vector<std::unique_ptr<Normalizer>> steps;
    for (size_t i = 0; i < items.size(); ++i)
      if (auto step = make_normalizer(items[i], fmt::format("{}.normalizers[{}]", where, i)))
        steps.push_back(std::move(step));
    return std::make_unique<SequenceNormalizer>(std::move(steps));
  }
  if (type == "Precompiled") {
    const Json& map = field(spec, "precompiled_charsmap", where);
    if (map.is_null()) return nullptr;  // sentencepiece models without a normalization rule
    check(map.is_string(), "{}.precompiled_charsmap should be a base64 string", where);
    std::string blob = decode_base64(map.get<std::string>(), where + ".precompiled_charsmap");
    return std::make_unique<PrecompiledNormalizer>(
        PrecompiledCharsmap(blob, where + ".precompiled_charsmap"));
  }
  if (type == "Replace") {
    const Json& pattern = field(spec, "pattern", where);
    std::string content = string_field(spec, "content", where);
    if (pattern.is_object() && pattern.contains("Regex"))
      return std::make_unique<ReplaceNormalizer>(
          "", std::make_unique<Regex>(string_field(pattern, "Regex", where + ".pattern")), content);
    return std::make_unique<ReplaceNormalizer>(string_field(pattern, "String", where + ".pattern"),
                                               nullptr, content);
  }
  if (type == "Strip")
    return std::make_unique<StripNormalizer>(bool_field_or(spec, "strip_left", true, where),
                                             bool_field_or(spec, "strip_right", true, where));
  if (type == "Prepend")
    return std::make_unique<PrependNormalizer>(string_field(spec, "prepend", where));
  // CLIP's (text/nfc_lowercase.h).
  if (type == "NFC") return make_nfc_normalizer();
  if (type == "Lowercase") return make_lowercase_normalizer();
  fail(
      "{}: normalizer type '{}' is not supported by mmgen (supported: Sequence, Precompiled, "
      "Replace, Strip, Prepend, NFC, Lowercase)",
      where, type);
}

}  // namespace mmgen::tokenizers
