// The T5/UMT5 text encoder against transformers' UMT5EncoderModel (wan-tiny fixture), and Wan's
// prompt embedding (cut to the real length, zero-filled) against WanPipeline's.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/file.h"
#include "core/gguf.h"
#include "core/gguf_writer.h"
#include "core/safetensors.h"
#include "models/text_encoders/prompt_embedding.h"
#include "models/text_encoders/t5_config.h"
#include "models/text_encoders/t5_relative_position.h"
#include "models/text_encoders/umt5_encoder.h"
#include "tests/test_support.h"

namespace mmgen::text_encoders {
namespace {

fs::path wan_tiny() {
  return testing::shared_dir() / "fixtures" / "wan-tiny";
}

SafetensorsFile reference() {
  return SafetensorsFile::open(wan_tiny() / "reference" / "reference.safetensors");
}

// Whether WanPipeline's prompt_clean (html.unescape twice, strip, collapse `\s+` to one space;
// ftfy absent in the fixture environment) leaves `text` unchanged. Conservative: any '&' counts
// as a change, and so does any Unicode whitespace other than a single ASCII space.
bool cleaning_is_noop(const std::string& text) {
  if (text.find('&') != std::string::npos) return false;
  std::vector<uint32_t> code_points;
  for (size_t i = 0; i < text.size();) {
    const unsigned char lead = static_cast<unsigned char>(text[i]);
    const int extra = lead < 0x80 ? 0 : lead < 0xE0 ? 1 : lead < 0xF0 ? 2 : 3;
    uint32_t cp = extra == 0 ? lead : lead & (0x3F >> extra);
    for (int k = 1; k <= extra && i + k < text.size(); ++k)
      cp = (cp << 6) | (static_cast<unsigned char>(text[i + k]) & 0x3F);
    code_points.push_back(cp);
    i += size_t(extra) + 1;
  }
  auto is_space = [](uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
           c == 0x202F || c == 0x205F || c == 0x3000;
  };
  for (size_t i = 0; i < code_points.size(); ++i) {
    if (!is_space(code_points[i])) continue;
    if (code_points[i] != 0x20) return false;                 // would become ' '
    if (i == 0 || i + 1 == code_points.size()) return false;  // would be stripped
    if (is_space(code_points[i + 1])) return false;           // would be collapsed
  }
  return true;
}

TEST(T5Config, ReadsTheFixtureConfig) {
  MMGEN_REQUIRE_SHARED();
  T5Config config = T5Config::from_file(wan_tiny() / "model" / "text_encoder" / "config.json");
  EXPECT_EQ(config.model_type, "umt5");
  EXPECT_EQ(config.d_model, 32);
  EXPECT_EQ(config.d_kv, 8);
  EXPECT_EQ(config.d_ff, 64);
  EXPECT_EQ(config.num_heads, 4);
  EXPECT_EQ(config.num_layers, 2);
  EXPECT_EQ(config.vocab_size, 500);
  EXPECT_EQ(config.relative_attention_num_buckets, 32);
  EXPECT_EQ(config.relative_attention_max_distance, 128);
  EXPECT_FLOAT_EQ(config.layer_norm_epsilon, 1e-6f);
  EXPECT_TRUE(config.gated);
  EXPECT_EQ(config.activation, T5Activation::GeluTanh);
  EXPECT_TRUE(config.per_layer_position_bias());
}

TEST(T5Config, OmittedKeysTakeTransformersDefaults) {
  T5Config umt5 = T5Config::from_json(nlohmann::json::parse(R"({"model_type": "umt5"})"));
  EXPECT_EQ(umt5.vocab_size, 250112);
  EXPECT_EQ(umt5.d_ff, 1024);
  EXPECT_EQ(umt5.num_heads, 6);
  EXPECT_EQ(umt5.num_layers, 8);
  EXPECT_TRUE(umt5.gated);
  EXPECT_EQ(umt5.activation, T5Activation::GeluTanh);

  T5Config t5 = T5Config::from_json(nlohmann::json::parse(R"({"model_type": "t5"})"));
  EXPECT_EQ(t5.vocab_size, 32128);
  EXPECT_EQ(t5.d_ff, 2048);
  EXPECT_EQ(t5.num_heads, 8);
  EXPECT_EQ(t5.num_layers, 6);
  EXPECT_FALSE(t5.gated);
  EXPECT_EQ(t5.activation, T5Activation::Relu);
  EXPECT_FALSE(t5.per_layer_position_bias());

  T5Config silu =
      T5Config::from_json(nlohmann::json::parse(R"({"feed_forward_proj": "gated-silu"})"));
  EXPECT_TRUE(silu.gated);
  EXPECT_EQ(silu.activation, T5Activation::Silu);
  // Only "gated-gelu" means the tanh GELU; a plain "gelu" is the exact one, as in transformers.
  T5Config gelu = T5Config::from_json(nlohmann::json::parse(R"({"feed_forward_proj": "gelu"})"));
  EXPECT_FALSE(gelu.gated);
  EXPECT_EQ(gelu.activation, T5Activation::Gelu);
}

TEST(T5Config, RejectsWhatItDoesNotSupport) {
  auto error = [](const char* text) {
    return testing::error_message(
        [&] { T5Config::from_json(nlohmann::json::parse(text), "x/config.json"); });
  };
  EXPECT_NE(error(R"({"model_type": "bert"})").find("model_type \"bert\""), std::string::npos);
  EXPECT_NE(error(R"({"feed_forward_proj": "gated-tanhshrink"})").find("not supported"),
            std::string::npos);
  EXPECT_NE(error(R"({"feed_forward_proj": "fancy-gelu"})").find("gated-ACT"), std::string::npos);
  EXPECT_NE(error(R"({"d_model": -4})").find("an integer from 1 to 16777216, got -4"),
            std::string::npos);
  // Past the bound of core/limits.h, so no size computed from it can overflow.
  EXPECT_NE(error(R"({"d_model": 4294967296})").find("an integer from 1 to 16777216"),
            std::string::npos);
  EXPECT_NE(error(R"({"num_heads": "8"})").find("x/config.json"), std::string::npos);
}

TEST(T5RelativePosition, BucketsMatchTransformersAtTheBinEdges) {
  // Values from transformers' _relative_position_bucket (torch 2.15, 32 buckets, max distance
  // 128) for key − query = ±n: the float32 log lands exactly on the edges 16, 32, 64.
  struct Case {
    int64_t distance, after, before;
  };
  const Case cases[] = {{0, 0, 0},    {1, 17, 1},    {7, 23, 7},    {8, 24, 8},
                        {15, 25, 9},  {16, 26, 10},  {17, 26, 10},  {31, 27, 11},
                        {32, 28, 12}, {33, 28, 12},  {63, 29, 13},  {64, 30, 14},
                        {65, 30, 14}, {127, 31, 15}, {128, 31, 15}, {1000, 31, 15}};
  for (const Case& c : cases) {
    EXPECT_EQ(t5_relative_position_bucket(c.distance, 32, 128), c.after) << c.distance;
    EXPECT_EQ(t5_relative_position_bucket(-c.distance, 32, 128), c.before) << -c.distance;
  }
}

TEST(UMT5Encoder, MatchesTransformersLastHiddenState) {
  MMGEN_REQUIRE_SHARED();
  const SafetensorsFile ref = reference();
  const UMT5Encoder encoder = UMT5Encoder::from_folder(wan_tiny() / "model" / "text_encoder");
  const Tensor hidden = encoder.forward(ref.tensor("text_encoder.input_ids"),
                                        ref.tensor("text_encoder.attention_mask"));
  const Tensor expected = ref.tensor("text_encoder.last_hidden_state");
  ASSERT_EQ(hidden.shape(), expected.shape());
  const double error = testing::relative_error(hidden, expected);
  std::printf("last_hidden_state relative error %.3g (max abs %.3g)\n", error,
              testing::max_abs_diff(hidden, expected));
  EXPECT_LT(error, 1e-5);
}

TEST(UMT5Encoder, WanPromptEmbeddingsMatchThePipelineWhereCleaningChangesNothing) {
  MMGEN_REQUIRE_SHARED();
  const SafetensorsFile ref = reference();
  const nlohmann::json prompts =
      nlohmann::json::parse(read_text_file(wan_tiny() / "reference" / "reference.json"))["prompts"];
  const UMT5Encoder encoder = UMT5Encoder::from_folder(wan_tiny() / "model" / "text_encoder");
  // text_encoder.prompt{k} was tokenized from the *cleaned* prompt, input_ids from the raw one:
  // they share ids exactly when cleaning is a no-op (prompt 4, with its runs of whitespace, is
  // the one in 0..5 that cleaning changes; it awaits the tokenizer).
  const Tensor embeddings = encode_wan_prompt_embeddings(
      encoder, ref.tensor("text_encoder.input_ids"), ref.tensor("text_encoder.attention_mask"));
  int compared = 0;
  for (int64_t k = 0; k < 6; ++k) {
    if (!cleaning_is_noop(prompts[size_t(k)].get<std::string>())) continue;
    const Tensor expected = ref.tensor("text_encoder.prompt" + std::to_string(k));
    const Tensor ours = embeddings.slice(0, k, k + 1).contiguous();
    ASSERT_EQ(ours.shape(), expected.shape());
    const double error = testing::relative_error(ours, expected);
    std::printf("prompt%lld relative error %.3g\n", static_cast<long long>(k), error);
    EXPECT_LT(error, 1e-5) << "prompt " << k;
    ++compared;
  }
  EXPECT_EQ(compared, 5);
}

TEST(UMT5Encoder, ZeroFillKeepsTheCountedLength) {
  const Tensor hidden = Tensor::full({2, 3, 2}, 1.5f);
  // Row 1's mask has a hole: diffusers counts the ones (2) and keeps the first two positions.
  const Tensor mask = Tensor::from_vector({2, 3}, std::vector<int64_t>{1, 0, 0, 1, 0, 1});
  const Tensor filled = zero_fill_after_length(hidden, mask);
  const float expected[2][3] = {{1.5f, 0, 0}, {1.5f, 1.5f, 0}};
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t s = 0; s < 3; ++s)
      for (int64_t c = 0; c < 2; ++c) EXPECT_EQ(filled.item_f32({b, s, c}), expected[b][s]);
  EXPECT_EQ(hidden.item_f32({0, 2, 0}), 1.5f);  // the input is untouched
}

TEST(UMT5Encoder, RejectsTokenIdsOutsideTheVocabulary) {
  MMGEN_REQUIRE_SHARED();
  const UMT5Encoder encoder = UMT5Encoder::from_folder(wan_tiny() / "model" / "text_encoder");
  const Tensor ids = Tensor::from_vector({1, 3}, std::vector<int64_t>{5, 500, 1});
  EXPECT_NE(testing::error_message([&] { encoder.forward(ids); }).find("token id 500"),
            std::string::npos);
  const Tensor negative = Tensor::from_vector({1, 2}, std::vector<int64_t>{-1, 1});
  EXPECT_NE(
      testing::error_message([&] { encoder.forward(negative); }).find("outside the vocabulary"),
      std::string::npos);
}

TEST(UMT5Encoder, RejectsACheckpointThatDoesNotMatchItsConfig) {
  MMGEN_REQUIRE_SHARED();
  const fs::path folder = wan_tiny() / "model" / "text_encoder";
  T5Config config = T5Config::from_file(folder / "config.json");
  config.num_layers = 3;  // the checkpoint has two blocks
  EXPECT_NE(testing::error_message([&] {
              UMT5Encoder(config, WeightStore::open_folder(folder));
            }).find("encoder.block.2"),
            std::string::npos);
  config = T5Config::from_file(folder / "config.json");
  config.d_ff = 48;
  EXPECT_NE(testing::error_message([&] {
              UMT5Encoder(config, WeightStore::open_folder(folder));
            }).find("config.json implies"),
            std::string::npos);
}

// llama.cpp's T5 names for a transformers name ("encoder.block.0.layer.0.SelfAttention.q.weight"
// is "enc.blk.0.attn_q.weight"), as city96's UMT5 GGUF files for Wan store them.
std::string llama_cpp_name(std::string name) {
  static const std::pair<const char*, const char*> kFragments[] = {
      {"encoder.block.", "enc.blk."},
      {"encoder.final_layer_norm", "enc.output_norm"},
      {"shared", "token_embd"},
      {"layer.0.SelfAttention.relative_attention_bias", "attn_rel_b"},
      {"layer.0.SelfAttention.q", "attn_q"},
      {"layer.0.SelfAttention.k", "attn_k"},
      {"layer.0.SelfAttention.v", "attn_v"},
      {"layer.0.SelfAttention.o", "attn_o"},
      {"layer.0.layer_norm", "attn_norm"},
      {"layer.1.DenseReluDense.wi_0", "ffn_gate"},
      {"layer.1.DenseReluDense.wi_1", "ffn_up"},
      {"layer.1.DenseReluDense.wo", "ffn_down"},
      {"layer.1.layer_norm", "ffn_norm"},
  };
  for (const auto& [from, to] : kFragments)
    if (const size_t at = name.find(from); at != std::string::npos)
      name.replace(at, std::string(from).size(), to);
  return name;
}

// wan-tiny's encoder written as one GGUF file in llama.cpp's names, into a folder with its
// config.json: the 2-D tensors with rows of whole 32-blocks as `quantized` (q8_0) or f32, or each
// tensor as given by `values` (a name -> float32 map) in f32.
fs::path write_gguf_encoder(const std::string& name, gguf::GgmlType matrices,
                            const WeightStore* values = nullptr) {
  const fs::path source = wan_tiny() / "model" / "text_encoder";
  const WeightStore weights = WeightStore::open_folder(source);
  const fs::path folder = testing::scratch_dir("umt5_gguf") / name;
  fs::create_directories(folder);
  fs::copy_file(source / "config.json", folder / "config.json",
                fs::copy_options::overwrite_existing);
  std::vector<gguf::TensorToWrite> tensors;
  for (const std::string& stored : weights.names()) {
    gguf::TensorToWrite t;
    t.name = llama_cpp_name(stored);
    t.values = values ? values->get_f32(t.name) : weights.get_f32(stored);
    const bool matrix = t.values.dim() == 2 && t.values.size(1) % 32 == 0;
    t.type = matrix && !values ? matrices : gguf::GgmlType::F32;
    tensors.push_back(std::move(t));
  }
  gguf::write_gguf(folder / "model.gguf", {{"general.architecture", "t5encoder"}}, tensors);
  return folder;
}

// A GGUF text encoder in llama.cpp's names (city96's UMT5-XXL files for Wan): from f32 it is the
// safetensors encoder to the bit; from q8_0 the products read the blocks as mapped and give the
// encoder of the dequantized values to the bit, within 2% of the float32 encoder.
TEST(UMT5Encoder, ReadsAGgufFileInLlamaCppNames) {
  MMGEN_REQUIRE_SHARED();
  const SafetensorsFile ref = reference();
  const Tensor ids = ref.tensor("text_encoder.input_ids"),
               mask = ref.tensor("text_encoder.attention_mask");
  const Tensor expected =
      UMT5Encoder::from_folder(wan_tiny() / "model" / "text_encoder").forward(ids, mask);

  const fs::path f32 = write_gguf_encoder("f32", gguf::GgmlType::F32);
  EXPECT_TRUE(WeightStore::open_folder(f32).has("enc.blk.0.attn_rel_b.weight"));
  const Tensor from_f32 = UMT5Encoder::from_folder(f32).forward(ids, mask);
  ASSERT_EQ(from_f32.shape(), expected.shape());
  EXPECT_EQ(testing::max_abs_diff(from_f32, expected), 0.0);

  const fs::path q8 = write_gguf_encoder("q8_0", gguf::GgmlType::Q8_0);
  const WeightStore q8_store = WeightStore::open_folder(q8);
  EXPECT_EQ(q8_store.get_for_product("enc.blk.1.ffn_down.weight").dtype(), DType::Q8_0);
  const Tensor from_q8 = UMT5Encoder::from_folder(q8).forward(ids, mask);
  const fs::path dequantized = write_gguf_encoder("dequantized", gguf::GgmlType::F32, &q8_store);
  const Tensor from_dequantized = UMT5Encoder::from_folder(dequantized).forward(ids, mask);
  EXPECT_EQ(testing::max_abs_diff(from_q8, from_dequantized), 0.0);
  const double error = testing::relative_error(from_q8, expected);
  std::printf("UMT5 from q8_0 GGUF: relative error %.3g against float32\n", error);
  EXPECT_GT(error, 0.0);
  EXPECT_LT(error, 2e-2);
}

TEST(UMT5Encoder, RunsTheBf16WanShapesEncoder) {
  const fs::path folder =
      testing::source_dir() / "examples" / "models" / "wan-shapes" / "text_encoder";
  if (!fs::exists(folder)) GTEST_SKIP() << folder << " not found";
  const UMT5Encoder encoder = UMT5Encoder::from_folder(folder);
  EXPECT_EQ(WeightStore::open_folder(folder).get("shared.weight").dtype(), DType::BF16);
  const Tensor ids = Tensor::from_vector({2, 6}, std::vector<int64_t>{5, 17, 42, 1, 0, 0,  //
                                                                      9, 100, 175, 3, 8, 1});
  const Tensor mask = Tensor::from_vector({2, 6}, std::vector<int64_t>{1, 1, 1, 1, 0, 0,  //
                                                                       1, 1, 1, 1, 1, 1});
  const Tensor embeddings = encode_wan_prompt_embeddings(encoder, ids, mask);
  ASSERT_EQ(embeddings.shape(), (Shape{2, 6, encoder.config().d_model}));
  const float* p = embeddings.data<float>();
  double norm = 0;
  for (int64_t i = 0; i < embeddings.numel(); ++i) {
    ASSERT_TRUE(std::isfinite(p[i])) << i;
    norm += double(p[i]) * p[i];
  }
  EXPECT_GT(norm, 0.0);
  for (int64_t s = 4; s < 6; ++s) EXPECT_EQ(embeddings.item_f32({0, s, 0}), 0.0f);
}

}  // namespace
}  // namespace mmgen::text_encoders
