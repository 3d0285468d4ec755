// Qwen2Tokenizer read from vocab.json + merges.txt (the Hub's Qwen/Qwen-Image `tokenizer/` ships no
// tokenizer.json) against transformers' ids for the qwenimage-tiny fixture's templated prompts,
// and against the same folder's tokenizer.json.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/file.h"
#include "tests/test_support.h"
#include "text/qwen2_bpe_folder.h"
#include "text/tokenizer.h"

namespace mmgen {
namespace {

using nlohmann::json;

fs::path hub_folder() {
  return testing::source_dir() / "tests/fixtures/qwenimage-tiny/model/tokenizer";
}

json reference_json() {
  return json::parse(read_text_file(testing::source_dir() /
                                    "tests/fixtures/qwenimage-tiny/reference/reference.json"));
}

// The fixture's tokenizer folder as the Hub has it: everything but tokenizer.json.
fs::path without_tokenizer_json(const std::string& name) {
  const fs::path copy = testing::scratch_dir(name);
  fs::copy(hub_folder(), copy, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  fs::remove(copy / "tokenizer.json");
  return copy;
}

std::string templated(const json& ref, const std::string& prompt) {
  std::string text = ref["template"].get<std::string>();
  return text.replace(text.find("{}"), 2, prompt);
}

TEST(Qwen2TokenizerFolder, IdsMatchTransformersAndTokenizerJson) {
  const fs::path folder = without_tokenizer_json("qwen2_folder_ids");
  ASSERT_TRUE(tokenizers::is_qwen2_bpe_folder(folder));
  EXPECT_FALSE(tokenizers::is_qwen2_bpe_folder(hub_folder()));  // has a tokenizer.json
  const auto from_folder = tokenizers::Tokenizer::load(folder);
  const auto from_json = tokenizers::Tokenizer::load(hub_folder());

  const json ref = reference_json();
  const auto prompts = ref["prompts"].get<std::vector<std::string>>();
  const auto expected = ref["templated_ids"].get<std::vector<std::vector<int64_t>>>();
  ASSERT_EQ(prompts.size(), expected.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::string text = templated(ref, prompts[i]);
    const std::vector<int64_t> ids = from_folder->encode(text);
    EXPECT_EQ(ids, expected[i]) << "prompt " << i << ": " << prompts[i];
    EXPECT_EQ(ids, from_json->encode(text)) << "prompt " << i;
    EXPECT_EQ(from_folder->decode(ids), from_json->decode(ids)) << "prompt " << i;
  }
  for (const auto& [token, id] : ref["special_ids"].items())
    EXPECT_EQ(from_folder->token_to_id(token), id.get<int64_t>()) << token;
  EXPECT_EQ(from_folder->pad_id(), from_json->pad_id());
  EXPECT_EQ(from_folder->vocab_size(), from_json->vocab_size());
}

TEST(Qwen2TokenizerFolder, MissingMergesIsOneClearLine) {
  const fs::path folder = without_tokenizer_json("qwen2_folder_no_merges");
  fs::remove(folder / "merges.txt");
  const std::string message = testing::error_message([&] { tokenizers::Tokenizer::load(folder); });
  EXPECT_NE(message.find("no merges.txt in"), std::string::npos) << message;
  EXPECT_NE(message.find("Qwen2Tokenizer"), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
}

}  // namespace
}  // namespace mmgen
