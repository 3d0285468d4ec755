#include "text/pre_tokenizers.h"

#include <functional>

#include "text/byte_level.h"
#include "text/regex.h"
#include "text/unicode_data.h"
#include "text/utf8.h"

namespace mmgen::tokenizers {
namespace {

// What happens to the matched delimiters when a piece is split (HF SplitDelimiterBehavior).
enum class Behavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

struct Span {
  size_t begin, end;
  bool is_match;
};

using MatchFinder = std::function<std::vector<Regex::Match>(std::string_view)>;

// The piece cut into matched and unmatched spans that cover it.
std::vector<Span> spans_of(std::string_view text, const std::vector<Regex::Match>& matches,
                           bool invert) {
  std::vector<Span> spans;
  size_t at = 0;
  for (const Regex::Match& m : matches) {
    if (m.begin > at) spans.push_back({at, m.begin, invert});
    spans.push_back({m.begin, m.end, !invert});
    at = m.end;
  }
  if (at < text.size()) spans.push_back({at, text.size(), invert});
  return spans;
}

std::vector<Span> apply_behavior(std::vector<Span> spans, Behavior behavior) {
  std::vector<Span> out;
  bool previous_match = false;
  switch (behavior) {
    case Behavior::Isolated:
      return spans;
    case Behavior::Removed:
      for (const Span& s : spans)
        if (!s.is_match) out.push_back(s);
      return out;
    case Behavior::MergedWithPrevious:
      for (const Span& s : spans) {
        if (s.is_match && !previous_match && !out.empty())
          out.back().end = s.end;
        else
          out.push_back(s);
        previous_match = s.is_match;
      }
      return out;
    case Behavior::MergedWithNext:
      for (size_t i = spans.size(); i-- > 0;) {
        const Span& s = spans[i];
        if (s.is_match && !previous_match && !out.empty())
          out.back().begin = s.begin;
        else
          out.push_back(s);
        previous_match = s.is_match;
      }
      return {out.rbegin(), out.rend()};
    case Behavior::Contiguous:
      for (const Span& s : spans) {
        if (s.is_match && previous_match && !out.empty())
          out.back().end = s.end;
        else
          out.push_back(s);
        previous_match = s.is_match;
      }
      return out;
  }
  return out;
}

void split_tokens(std::vector<PreToken>& tokens, const MatchFinder& find, Behavior behavior,
                  bool invert) {
  std::vector<PreToken> out;
  out.reserve(tokens.size());
  for (PreToken& token : tokens) {
    std::vector<Span> spans =
        apply_behavior(spans_of(token.text, find(token.text), invert), behavior);
    for (const Span& s : spans)
      if (s.end > s.begin)
        out.push_back(
            {token.text.substr(s.begin, s.end - s.begin), token.at_input_start && s.begin == 0});
  }
  tokens = std::move(out);
}

// Each occurrence of any code point for which `is_delimiter` holds, as its own match.
MatchFinder codepoint_finder(std::function<bool(char32_t)> is_delimiter) {
  return [is_delimiter = std::move(is_delimiter)](std::string_view text) {
    std::vector<Regex::Match> matches;
    for (size_t pos = 0; pos < text.size();) {
      size_t start = pos;
      if (is_delimiter(next_codepoint(text, pos))) matches.push_back({start, pos});
    }
    return matches;
  };
}

MatchFinder literal_finder(std::string literal) {
  return [literal = std::move(literal)](std::string_view text) {
    std::vector<Regex::Match> matches;
    if (literal.empty()) return matches;
    for (size_t at = text.find(literal); at != std::string_view::npos;
         at = text.find(literal, at + literal.size()))
      matches.push_back({at, at + literal.size()});
    return matches;
  };
}

MatchFinder regex_finder(std::shared_ptr<Regex> regex) {
  return [regex = std::move(regex)](std::string_view text) { return regex->find_all(text); };
}

class SequencePreTokenizer final : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> steps)
      : steps_(std::move(steps)) {}
  void pre_tokenize(std::vector<PreToken>& tokens) const override {
    for (const auto& step : steps_) step->pre_tokenize(tokens);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

class SplitPreTokenizer final : public PreTokenizer {
 public:
  SplitPreTokenizer(MatchFinder find, Behavior behavior, bool invert)
      : find_(std::move(find)), behavior_(behavior), invert_(invert) {}
  void pre_tokenize(std::vector<PreToken>& tokens) const override {
    split_tokens(tokens, find_, behavior_, invert_);
  }

 private:
  MatchFinder find_;
  Behavior behavior_;
  bool invert_;
};

enum class PrependScheme { Always, First, Never };

class MetaspacePreTokenizer final : public PreTokenizer {
 public:
  MetaspacePreTokenizer(char32_t replacement, PrependScheme scheme, bool split)
      : scheme_(scheme), split_(split) {
    append_utf8(replacement_, replacement);
    find_ = codepoint_finder([replacement](char32_t c) { return c == replacement; });
  }
  void pre_tokenize(std::vector<PreToken>& tokens) const override {
    for (PreToken& token : tokens) {
      std::string replaced;
      replaced.reserve(token.text.size() + replacement_.size());
      for (char c : token.text) {
        if (c == ' ')
          replaced += replacement_;
        else
          replaced += c;
      }
      bool prepend = scheme_ == PrependScheme::Always ||
                     (scheme_ == PrependScheme::First && token.at_input_start);
      if (prepend && replaced.compare(0, replacement_.size(), replacement_) != 0)
        replaced = replacement_ + replaced;
      token.text = std::move(replaced);
    }
    if (split_) {
      split_tokens(tokens, find_, Behavior::MergedWithNext, false);
    } else {
      std::erase_if(tokens, [](const PreToken& t) { return t.text.empty(); });
    }
  }

 private:
  std::string replacement_;
  PrependScheme scheme_;
  bool split_;
  MatchFinder find_;
};

// GPT-2's word pattern, used by ByteLevel with use_regex.
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

class ByteLevelPreTokenizer final : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, bool use_regex)
      : add_prefix_space_(add_prefix_space) {
    if (use_regex) find_ = regex_finder(std::make_shared<Regex>(kGpt2Pattern));
  }
  void pre_tokenize(std::vector<PreToken>& tokens) const override {
    if (add_prefix_space_)
      for (PreToken& token : tokens)
        if (token.text.empty() || token.text[0] != ' ') token.text = " " + token.text;
    if (find_) split_tokens(tokens, find_, Behavior::Isolated, false);
    std::erase_if(tokens, [](const PreToken& t) { return t.text.empty(); });
    for (PreToken& token : tokens) token.text = bytes_to_symbols(token.text);
  }

 private:
  bool add_prefix_space_;
  MatchFinder find_;
};

Behavior parse_behavior(const std::string& name, const std::string& where) {
  if (name == "Removed") return Behavior::Removed;
  if (name == "Isolated") return Behavior::Isolated;
  if (name == "MergedWithPrevious") return Behavior::MergedWithPrevious;
  if (name == "MergedWithNext") return Behavior::MergedWithNext;
  if (name == "Contiguous") return Behavior::Contiguous;
  fail("{}.behavior '{}' is not a known split behavior", where, name);
}

}  // namespace

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const Json& spec, const std::string& where) {
  if (spec.is_null()) return nullptr;
  std::string type = string_field(spec, "type", where);
  if (type == "Sequence") {
    const Json& items = array_field(spec, "pretokenizers", where);
    std::vector<std::unique_ptr<PreTokenizer>> steps;
    for (size_t i = 0; i < items.size(); ++i)
      if (auto step = make_pre_tokenizer(items[i], fmt::format("{}.pretokenizers[{}]", where, i)))
        steps.push_back(std::move(step));
    return std::make_unique<SequencePreTokenizer>(std::move(steps));
  }
  if (type == "WhitespaceSplit")
    return std::make_unique<SplitPreTokenizer>(codepoint_finder(unicode::is_white_space),
                                               Behavior::Removed, false);
  // Whitespace keeps the matches of \w+|[^\w\s]+. HF runs this one through the Rust regex crate,
  // whose \w differs from Oniguruma's (used here) on rare characters: U+200C/U+200D are word
  // characters there, superscript digits and other No are not.
  if (type == "Whitespace")
    return std::make_unique<SplitPreTokenizer>(
        regex_finder(std::make_shared<Regex>(R"(\w+|[^\w\s]+)")), Behavior::Removed, true);
  if (type == "Metaspace") {
    std::u32string replacement = to_codepoints(string_field(spec, "replacement", where));
    check(replacement.size() == 1, "{}.replacement should be a single character", where);
    std::string scheme_name = string_field_or(spec, "prepend_scheme", "", where);
    PrependScheme scheme = PrependScheme::Always;
    if (scheme_name.empty())  // older files: add_prefix_space
      scheme = bool_field_or(spec, "add_prefix_space", true, where) ? PrependScheme::Always
                                                                    : PrependScheme::Never;
    else if (scheme_name == "always")
      scheme = PrependScheme::Always;
    else if (scheme_name == "first")
      scheme = PrependScheme::First;
    else if (scheme_name == "never")
      scheme = PrependScheme::Never;
    else
      fail("{}.prepend_scheme '{}' is not one of always, first, never", where, scheme_name);
    return std::make_unique<MetaspacePreTokenizer>(replacement[0], scheme,
                                                   bool_field_or(spec, "split", true, where));
  }
  if (type == "Split") {
    const Json& pattern = field(spec, "pattern", where);
    MatchFinder find;
    if (pattern.is_object() && pattern.contains("Regex"))
      find =
          regex_finder(std::make_shared<Regex>(string_field(pattern, "Regex", where + ".pattern")));
    else
      find = literal_finder(string_field(pattern, "String", where + ".pattern"));
    return std::make_unique<SplitPreTokenizer>(
        std::move(find), parse_behavior(string_field(spec, "behavior", where), where),
        bool_field_or(spec, "invert", false, where));
  }
  if (type == "ByteLevel")
    return std::make_unique<ByteLevelPreTokenizer>(
        bool_field_or(spec, "add_prefix_space", true, where),
        bool_field_or(spec, "use_regex", true, where));
  fail(
      "{}: pre-tokenizer type '{}' is not supported by mmgen (supported: Sequence, "
      "WhitespaceSplit, Whitespace, Metaspace, Split, ByteLevel)",
      where, type);
}

}  // namespace mmgen::tokenizers
