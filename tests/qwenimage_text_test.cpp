// Qwen-Image's text side against diffusers / transformers (qwenimage-tiny fixture, written by
// tests/fixtures/make_qwenimage_tiny.py): the Qwen2.5-VL config read into Qwen3Config, the
// templated prompts' ids, each prompt's hidden_states[-1] past the template's 34 tokens (alone and
// packed with the others), encode_prompt's padded batch and mask, and the refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/file.h"
#include "core/safetensors.h"
#include "models/text_encoders/qwen3_config.h"
#include "models/text_encoders/qwen3_model.h"
#include "models/text_encoders/qwenimage_prompt_embedding.h"
#include "tests/test_support.h"
#include "text/tokenizer.h"

namespace mmgen::text_encoders {
namespace {

using json = nlohmann::json;

fs::path fixture() {
  return testing::source_dir() / "tests/fixtures/qwenimage-tiny";
}
fs::path encoder_folder() {
  return fixture() / "model" / "text_encoder";
}
SafetensorsFile reference() {
  return SafetensorsFile::open(fixture() / "reference" / "reference.safetensors");
}
json reference_json() {
  return json::parse(read_text_file(fixture() / "reference" / "reference.json"));
}
std::vector<std::string> prompts() {
  return reference_json()["prompts"].get<std::vector<std::string>>();
}

TEST(QwenImageText, ReadsTheQwen25VLConfig) {
  const Qwen3Config config = Qwen3Config::from_file(encoder_folder() / "config.json");
  EXPECT_EQ(config.model_type, "qwen2_5_vl");
  EXPECT_EQ(config.vocab_size, 576);
  EXPECT_EQ(config.hidden_size, 64);
  EXPECT_EQ(config.intermediate_size, 128);
  EXPECT_EQ(config.num_hidden_layers, 3);
  EXPECT_EQ(config.num_attention_heads, 4);
  EXPECT_EQ(config.num_key_value_heads, 2);
  EXPECT_EQ(config.head_dim, 16);
  EXPECT_DOUBLE_EQ(config.rope_theta, 1e6);
  EXPECT_FLOAT_EQ(config.rms_norm_eps, 1e-6f);
  EXPECT_TRUE(config.qkv_bias);
  EXPECT_FALSE(config.attention_bias);
  EXPECT_FALSE(config.qk_norm);
  EXPECT_FALSE(config.tie_word_embeddings);
  EXPECT_EQ(config.layer_windows, std::vector<int64_t>(3, 0));

  // A v4 config (the Hub's Qwen-Image text_encoder): the text keys at the top, RoPE type "mrope".
  const Qwen3Config v4 = Qwen3Config::from_json(json::parse(R"({
      "model_type": "qwen2_5_vl", "hidden_size": 3584, "num_attention_heads": 28,
      "num_key_value_heads": 4, "num_hidden_layers": 28, "rope_theta": 1000000.0,
      "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]}})"));
  EXPECT_EQ(v4.head_dim, 128);
  EXPECT_EQ(v4.rope_type, "default");
  EXPECT_DOUBLE_EQ(v4.rope_theta, 1e6);
}

TEST(QwenImageText, TemplatedIdsMatchTransformers) {
  const auto tokenizer = tokenizers::Tokenizer::load(fixture() / "model" / "tokenizer");
  const json ref = reference_json();
  const auto ids = qwen_image_prompt_ids(*tokenizer, prompts());
  const auto expected = ref["templated_ids"].get<std::vector<std::vector<int64_t>>>();
  ASSERT_EQ(ids.size(), expected.size());
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(ids[i], expected[i]) << "prompt " << i;
  EXPECT_EQ(qwen_image_templated_prompt("a {} b"),
            std::string(ref["template"].get<std::string>())
                .replace(ref["template"].get<std::string>().find("{}"), 2, "a {} b"));
  EXPECT_EQ(ref["drop_idx"].get<int64_t>(), kQwenImageDropTokens);
}

TEST(QwenImageText, EachPromptMatchesTransformers) {
  const auto tokenizer = tokenizers::Tokenizer::load(fixture() / "model" / "tokenizer");
  const Qwen3TextModel model = Qwen3TextModel::from_folder(encoder_folder());
  const SafetensorsFile ref = reference();
  const auto ids = qwen_image_prompt_ids(*tokenizer, prompts());

  // The whole sequence's hidden_states[-1], before the drop.
  EXPECT_LT(testing::relative_error(model.hidden_state(ids[0], -1),
                                    ref.tensor("text_encoder.prompt0_full")),
            1e-5);
  // Every prompt in one packed ragged forward, and each alone: the same rows.
  const auto packed = encode_qwen_image_hidden_states(model, ids, kQwenImageMaxSequenceLength);
  ASSERT_EQ(packed.size(), ids.size());
  for (size_t k = 0; k < ids.size(); ++k) {
    const Tensor expected = ref.tensor("text_encoder.prompt" + std::to_string(k));
    const auto alone =
        encode_qwen_image_hidden_states(model, {ids[k]}, kQwenImageMaxSequenceLength);
    ASSERT_EQ(packed[k].shape(), expected.shape()) << "prompt " << k;
    const double error = testing::relative_error(packed[k], expected);
    EXPECT_LT(error, 1e-5) << "prompt " << k;
    EXPECT_LT(testing::relative_error(alone[0], expected), 1e-5) << "prompt " << k;
    std::printf("prompt %zu: %lld tokens, relative error %.3g\n", k,
                static_cast<long long>(expected.size(0)), error);
  }

  // max_sequence_length cuts each row after the drop.
  const auto cut = encode_qwen_image_hidden_states(model, ids, 8);
  for (size_t k = 0; k < ids.size(); ++k) {
    const Tensor expected = ref.tensor("text_encoder.prompt" + std::to_string(k));
    const int64_t rows = std::min<int64_t>(8, expected.size(0));
    ASSERT_EQ(cut[k].size(0), rows) << "prompt " << k;
    EXPECT_LT(testing::relative_error(cut[k], expected.slice(0, 0, rows).contiguous()), 1e-5);
  }
}

TEST(QwenImageText, EncodePromptBatchMatchesDiffusers) {
  const auto tokenizer = tokenizers::Tokenizer::load(fixture() / "model" / "tokenizer");
  const Qwen3TextModel model = Qwen3TextModel::from_folder(encoder_folder());
  const SafetensorsFile ref = reference();
  const json pair = reference_json()["encode"]["prompts"];
  const PaddedPromptEmbeddings batch = pad_prompt_embeddings(
      encode_qwen_image_prompts(*tokenizer, model, pair.get<std::vector<std::string>>()));
  const Tensor expected = ref.tensor("encode.prompt_embeds");
  ASSERT_EQ(batch.embeds.shape(), expected.shape());
  EXPECT_LT(testing::relative_error(batch.embeds, expected), 1e-5);
  ASSERT_TRUE(batch.mask.defined());
  EXPECT_EQ(testing::max_abs_diff(batch.mask, ref.tensor("encode.prompt_embeds_mask")), 0.0);

  // One prompt: every row full, so no mask (encode_prompt's None).
  const PaddedPromptEmbeddings one =
      pad_prompt_embeddings(encode_qwen_image_prompts(*tokenizer, model, {"a red fox"}));
  EXPECT_FALSE(one.mask.defined());
}

TEST(QwenImageText, RefusesBadInput) {
  const auto tokenizer = tokenizers::Tokenizer::load(fixture() / "model" / "tokenizer");
  const Qwen3TextModel model = Qwen3TextModel::from_folder(encoder_folder());
  const std::string too_long = testing::error_message(
      [&] { encode_qwen_image_prompts(*tokenizer, model, {"a red fox"}, 2000); });
  EXPECT_NE(too_long.find("--max-sequence-length 2000"), std::string::npos) << too_long;
  EXPECT_NE(too_long.find("1024"), std::string::npos) << too_long;
  EXPECT_EQ(too_long.find('\n'), std::string::npos) << too_long;

  // mrope_section must fit head_dim (transformers' split would fail on it).
  const std::string sections = testing::error_message([] {
    Qwen3Config::from_json(json::parse(R"({"model_type": "qwen2_5_vl", "text_config": {
        "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
        "rope_parameters": {"rope_type": "default", "mrope_section": [2, 3, 4]}}})"),
                           "x/config.json");
  });
  EXPECT_NE(sections.find("x/config.json: mrope_section [2, 3, 4] sums to 9"), std::string::npos)
      << sections;
}

}  // namespace
}  // namespace mmgen::text_encoders
