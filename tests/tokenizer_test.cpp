#include "text/tokenizer.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file.h"
#include "tests/test_support.h"
#include "text/prompt_clean.h"
#include "text/regex.h"

namespace mmgen {
namespace {

using testing::scratch_dir;
using tokenizers::Tokenizer;

std::vector<int64_t> ints(const nlohmann::json& list) {
  return list.get<std::vector<int64_t>>();
}

TEST(Tokenizer, WanUnigramMatchesReferenceIds) {
  MMGEN_REQUIRE_SHARED();
  fs::path fixture = testing::shared_dir() / "fixtures/wan-tiny";
  auto tokenizer = Tokenizer::load(fixture / "model/tokenizer");
  auto reference = nlohmann::json::parse(read_text_file(fixture / "reference/tokenizer.json"));
  ASSERT_EQ(reference.size(), 12u);
  for (const auto& prompt : reference) {
    std::string text = prompt["text"];
    EXPECT_EQ(tokenizer->encode(text), ints(prompt["unpadded_ids"])) << text;
    tokenizers::Encoding padded = tokenizer->encode_padded(text, 24);
    EXPECT_EQ(padded.ids, ints(prompt["input_ids"])) << text;
    EXPECT_EQ(padded.attention_mask, ints(prompt["attention_mask"])) << text;
  }
  EXPECT_EQ(tokenizer->pad_id(), 0);
}

TEST(Tokenizer, QwenByteLevelBpeMatchesReferenceIds) {
  MMGEN_REQUIRE_SHARED();
  fs::path fixture = testing::shared_dir() / "fixtures/qwen3-tiny";
  auto tokenizer = Tokenizer::load(fixture / "model/tokenizer");
  auto reference = nlohmann::json::parse(read_text_file(fixture / "reference/reference.json"));
  size_t max_length = reference["max_length"];
  ASSERT_EQ(reference["prompts"].size(), 8u);
  for (const auto& prompt : reference["prompts"]) {
    std::string text = prompt["templated"];
    std::vector<int64_t> ids = ints(prompt["ids"]);
    EXPECT_EQ(tokenizer->encode(text), ids) << text;
    tokenizers::Encoding padded = tokenizer->encode_padded(text, max_length);
    EXPECT_EQ(padded.ids, ints(prompt["padded_ids"])) << text;
    EXPECT_EQ(padded.attention_mask, ints(prompt["attention_mask"])) << text;
    // Byte-level decoding gives the text back, special tokens included on request.
    EXPECT_EQ(tokenizer->decode(ids, /*skip_special_tokens=*/false), text);
  }
  EXPECT_EQ(tokenizer->pad_id(), 0);
}

TEST(Tokenizer, WanShapesExampleEncodes) {
  auto tokenizer = Tokenizer::load(testing::source_dir() / "examples/models/wan-shapes/tokenizer");
  // Reference ids from the Python tokenizers library 0.23.3 (and transformers 5.17
  // AutoTokenizer, same ids):
  //   Tokenizer.from_file("examples/models/wan-shapes/tokenizer/tokenizer.json")
  //       .encode("a red circle on a blue background")
  // with padding/truncation off: tokens ▁a ▁red ▁circle ▁on ▁a ▁blue ▁background </s>.
  const std::vector<int64_t> expected = {3, 15, 8, 4, 3, 16, 5, 1};
  EXPECT_EQ(tokenizer->encode("a red circle on a blue background"), expected);
  tokenizers::Encoding padded = tokenizer->encode_padded("a red circle on a blue background", 16);
  EXPECT_EQ(padded.ids, (std::vector<int64_t>{3, 15, 8, 4, 3, 16, 5, 1, 0, 0, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(padded.attention_mask,
            (std::vector<int64_t>{1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(tokenizer->decode(expected), "a red circle on a blue background");
}

TEST(Tokenizer, PromptCleanOnFixturePrompts) {
  EXPECT_EQ(tokenizers::clean_prompt("html &amp; entities &lt;b&gt;"), "html & entities <b>");
  EXPECT_EQ(tokenizers::clean_prompt("  two   robots dancing\tin the rain  "),
            "two robots dancing in the rain");
  // Unescaped twice: &amp;lt; → &lt; → <.
  EXPECT_EQ(tokenizers::clean_prompt("a &amp;lt;tag&amp;gt;"), "a <tag>");
  EXPECT_EQ(tokenizers::clean_prompt("&#65;&#x42;&#X43; &#128512; &#0; &#x80;"),
            "ABC \xF0\x9F\x98\x80 \xEF\xBF\xBD \xE2\x82\xAC");
  // Names without ';' and the longest-prefix rule of html.unescape.
  EXPECT_EQ(tokenizers::clean_prompt("&copy 2024 &notit; &ampx &unknown;"),
            "\xC2\xA9 2024 \xC2\xACit; &x &unknown;");
  // Unicode white space (no-break space, ideographic space, line separator) collapses too.
  EXPECT_EQ(tokenizers::clean_prompt("\xC2\xA0"
                                     "a\xE3\x80\x80\xE3\x80\x80"
                                     "b\xE2\x80\xA8"
                                     "c "),
            "a b c");
  EXPECT_EQ(tokenizers::clean_prompt(""), "");
}

TEST(Tokenizer, PromptCleanReproducesPipelineEmbeddingInputs) {
  MMGEN_REQUIRE_SHARED();
  // The reference pipeline cleaned prompts 0-5; clean_prompt must leave the plain ones alone
  // and turn the whitespace one into single spaces.
  fs::path fixture = testing::shared_dir() / "fixtures/wan-tiny";
  auto reference = nlohmann::json::parse(read_text_file(fixture / "reference/tokenizer.json"));
  EXPECT_EQ(tokenizers::clean_prompt(reference[0]["text"].get<std::string>()),
            "a red fox running through snow");
  EXPECT_EQ(tokenizers::clean_prompt(reference[4]["text"].get<std::string>()),
            "two robots dancing in the rain");
  EXPECT_EQ(tokenizers::clean_prompt(reference[11]["text"].get<std::string>()),
            "html & entities <b>");
}

TEST(Tokenizer, RegexFollowsOnigurumaSemantics) {
  tokenizers::Regex qwen(
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)");
  std::string text = "it'S  a 12\n\n  b";
  std::vector<std::string> pieces;
  for (auto m : qwen.find_all(text)) pieces.push_back(text.substr(m.begin, m.end - m.begin));
  EXPECT_EQ(pieces,
            (std::vector<std::string>{"it", "'S", " ", " a", " ", "1", "2", "\n\n", " ", " b"}));
  tokenizers::Regex spaces(" {2,}");
  EXPECT_EQ(spaces.find_all("a  b c   d").size(), 2u);
  EXPECT_THROW(tokenizers::Regex("(?<=a)b"), Error);
  EXPECT_THROW(tokenizers::Regex("[abc"), Error);
}

// Matching is bounded (core/limits.h): a repeated group recurses once per repetition and a nested
// quantifier backtracks exponentially; both are refused with one Error naming the pattern, where
// they would overflow the stack or hang. Qwen's pattern on a long prompt stays inside the bounds.
TEST(Tokenizer, RegexMatchingIsBounded) {
  std::string error;
  try {
    tokenizers::Regex("(?:ab)+").find_all([] {
      std::string text;
      for (int i = 0; i < 20000; ++i) text += "ab";
      return text;
    }());
  } catch (const Error& e) {
    error = e.what();
  }
  EXPECT_NE(error.find("'(?:ab)+' recurses deeper than"), std::string::npos) << error;

  error.clear();
  try {
    tokenizers::Regex("(a+)+b").find_all(std::string(40, 'a'));
  } catch (const Error& e) {
    error = e.what();
  }
  EXPECT_NE(error.find("'(a+)+b' needs more than"), std::string::npos) << error;

  tokenizers::Regex qwen(
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)");
  std::string text;
  for (int i = 0; i < 20000; ++i) text += i % 7 ? "word, " : "  \n\n12 it's ";
  EXPECT_GT(qwen.find_all(text).size(), 20000u);
  EXPECT_EQ(qwen.find_all(std::string(200000, ' ') + "x").size(), 2u);
}

std::string error_of(const std::string& json) {
  try {
    Tokenizer::from_json(json, "bad/tokenizer.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Tokenizer, MalformedFilesGiveClearErrors) {
  EXPECT_NE(error_of("{\"model\": ").find("malformed JSON"), std::string::npos);
  EXPECT_NE(error_of("[1, 2]").find("not a JSON object"), std::string::npos);
  EXPECT_NE(error_of("{}").find("has no 'model' field"), std::string::npos);
  EXPECT_NE(error_of(R"({"model": {"type": "WordPiece", "vocab": {}}})")
                .find("'WordPiece' is not supported"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"model": {"type": "Unigram", "vocab": [["a"]]}})").find("model.vocab[0]"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a b"]}})")
                .find("merges[0]"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"model": {"type": "Unigram", "vocab": [["a", 0.0]]},
                        "normalizer": {"type": "NFKC"}})")
                .find("normalizer type 'NFKC' is not supported"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"model": {"type": "Unigram", "vocab": [["a", 0.0]]},
                        "normalizer": {"type": "Precompiled", "precompiled_charsmap": "AAAA!"}})")
                .find("base64"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"model": {"type": "Unigram", "vocab": [["a", 0.0]]},
                        "normalizer": {"type": "Precompiled", "precompiled_charsmap": "/////w=="}})")
                .find("precompiled_charsmap declares a trie"),
            std::string::npos);
  EXPECT_NE(error_of(R"J({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []},
                         "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(?<=x)"},
                                           "behavior": "Isolated"}})J")
                .find("tokenizer regex"),
            std::string::npos);

  fs::path dir = scratch_dir("tokenizer-missing");
  try {
    Tokenizer::load(dir);
    ADD_FAILURE() << "loading a folder without tokenizer.json should fail";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no tokenizer.json"), std::string::npos);
  }
  std::ofstream(dir / "tokenizer.json") << "{\"version\": \"1.0\", \"model\": {";
  try {
    Tokenizer::load(dir);
    ADD_FAILURE() << "a truncated tokenizer.json should fail";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer.json: malformed JSON"), std::string::npos);
  }
}

TEST(Tokenizer, UnigramWithoutPadTokenRefusesToPad) {
  auto tokenizer = Tokenizer::from_json(
      R"({"model": {"type": "Unigram", "unk_id": 0, "vocab": [["<unk>", 0.0], ["▁a", -1.0], ["a", -2.0]]},
          "pre_tokenizer": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": true}})",
      "inline");
  EXPECT_EQ(tokenizer->encode("a a b"), (std::vector<int64_t>{1, 1, 0}));
  EXPECT_THROW(tokenizer->encode_padded("a", 4), Error);
}

}  // namespace
}  // namespace mmgen
