#include "text/decoders.h"

#include "text/byte_level.h"
#include "text/utf8.h"

namespace mmgen::tokenizers {
namespace {

class SequenceDecoder final : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> steps)
      : steps_(std::move(steps)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (const auto& step : steps_) step->decode_chain(tokens);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> steps_;
};

void replace_all(std::string& text, const std::string& from, const std::string& to) {
  if (from.empty()) return;
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size()))
    text.replace(at, from.size(), to);
}

class MetaspaceDecoder final : public Decoder {
 public:
  MetaspaceDecoder(std::string replacement, bool strip_first)
      : replacement_(std::move(replacement)), strip_first_(strip_first) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string& token = tokens[i];
      if (i == 0 && strip_first_ && token.compare(0, replacement_.size(), replacement_) == 0)
        token.erase(0, replacement_.size());
      replace_all(token, replacement_, " ");
    }
  }

 private:
  std::string replacement_;
  bool strip_first_;
};

class ByteLevelDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string bytes;
    for (const std::string& token : tokens) {
      for (size_t pos = 0; pos < token.size();) {
        size_t start = pos;
        char32_t c = next_codepoint(token, pos);
        if (auto byte = symbol_to_byte(c))
          bytes += char(*byte);
        else
          bytes.append(token, start, pos - start);
      }
    }
    tokens = {sanitize_utf8(bytes)};
  }
};

class ReplaceDecoder final : public Decoder {
 public:
  ReplaceDecoder(std::string from, std::string to) : from_(std::move(from)), to_(std::move(to)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& token : tokens) replace_all(token, from_, to_);
  }

 private:
  std::string from_, to_;
};

// <0xAB> tokens become the bytes they name; a run that is not valid UTF-8 becomes U+FFFD each.
class ByteFallbackDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    std::string pending;
    size_t pending_count = 0;
    auto flush = [&]() {
      if (pending_count == 0) return;
      std::string clean = sanitize_utf8(pending);
      if (clean == pending) {
        out.push_back(pending);
      } else {
        for (size_t i = 0; i < pending_count; ++i) out.push_back("\xEF\xBF\xBD");
      }
      pending.clear();
      pending_count = 0;
    };
    for (std::string& token : tokens) {
      if (token.size() == 6 && token.compare(0, 3, "<0x") == 0 && token[5] == '>') {
        char* end = nullptr;
        long value = std::strtol(token.substr(3, 2).c_str(), &end, 16);
        if (end && *end == '\0') {
          pending += char(value);
          ++pending_count;
          continue;
        }
      }
      flush();
      out.push_back(std::move(token));
    }
    flush();
    tokens = std::move(out);
  }
};

class FuseDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const std::string& token : tokens) all += token;
    tokens = {all};
  }
};

class StripDecoder final : public Decoder {
 public:
  StripDecoder(std::string content, size_t start, size_t stop)
      : content_(std::move(content)), start_(start), stop_(stop) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& token : tokens) {
      for (size_t i = 0; i < start_ && token.compare(0, content_.size(), content_) == 0; ++i)
        token.erase(0, content_.size());
      for (size_t i = 0;
           i < stop_ && token.size() >= content_.size() &&
           token.compare(token.size() - content_.size(), content_.size(), content_) == 0;
           ++i)
        token.erase(token.size() - content_.size());
    }
  }

 private:
  std::string content_;
  size_t start_, stop_;
};

}  // namespace

std::unique_ptr<Decoder> make_decoder(const Json& spec, const std::string& where) {
  if (spec.is_null()) return nullptr;
  std::string type = string_field(spec, "type", where);
  if (type == "Sequence") {
    const Json& items = array_field(spec, "decoders", where);
    std::vector<std::unique_ptr<Decoder>> steps;
    for (size_t i = 0; i < items.size(); ++i)
      if (auto step = make_decoder(items[i], fmt::format("{}.decoders[{}]", where, i)))
        steps.push_back(std::move(step));
    return std::make_unique<SequenceDecoder>(std::move(steps));
  }
  if (type == "Metaspace") {
    std::string scheme = string_field_or(spec, "prepend_scheme", "", where);
    bool strip_first =
        scheme.empty() ? bool_field_or(spec, "add_prefix_space", true, where) : scheme != "never";
    return std::make_unique<MetaspaceDecoder>(string_field(spec, "replacement", where),
                                              strip_first);
  }
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "Replace") {
    const Json& pattern = field(spec, "pattern", where);
    return std::make_unique<ReplaceDecoder>(string_field(pattern, "String", where + ".pattern"),
                                            string_field(spec, "content", where));
  }
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Strip")
    return std::make_unique<StripDecoder>(string_field(spec, "content", where),
                                          size_t(integer_field(spec, "start", where)),
                                          size_t(integer_field(spec, "stop", where)));
  fail(
      "{}: decoder type '{}' is not supported by mmgen (supported: Sequence, Metaspace, "
      "ByteLevel, Replace, ByteFallback, Fuse, Strip)",
      where, type);
}

}  // namespace mmgen::tokenizers
