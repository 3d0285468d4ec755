// QwenImageTransformer2DModel against diffusers on the qwenimage-tiny fixture
// (tests/fixtures/qwenimage-tiny, made by tests/fixtures/make_qwenimage_tiny.py): a batch of two
// prompts of different lengths (the shorter one padded and masked in diffusers, run over its real
// tokens here) at two timesteps, a batch of one without a mask, the config's defaults, and the
// one-line refusals of a bad config and of a checkpoint that does not match its config.
#include "models/dit/qwenimage/qwenimage_transformer.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/safetensors.h"
#include "tests/test_support.h"

namespace mmgen::dit {
namespace {

using testing::error_message;
using testing::relative_error;

fs::path fixture() {
  return testing::source_dir() / "tests" / "fixtures" / "qwenimage-tiny";
}

fs::path transformer_folder() {
  return fixture() / "model" / "transformer";
}

WeightStore reference() {
  return WeightStore::open_file(fixture() / "reference" / "reference.safetensors");
}

Tensor f32(const WeightStore& store, const std::string& name) {
  return store.get(name).to(DType::F32).contiguous();
}

// Batch row `row` of the fixture's transformer inputs, its text cut to the mask's real tokens.
QwenImageItem item(const WeightStore& ref, int64_t row, float timestep) {
  const Tensor mask = f32(ref, "transformer.encoder_hidden_states_mask").select(0, row);
  int64_t real = 0;
  for (int64_t t = 0; t < mask.numel(); ++t) real += mask.data<float>()[t] != 0.0f;
  QwenImageItem x;
  x.image = f32(ref, "transformer.hidden_states").select(0, row).contiguous();
  x.text =
      f32(ref, "transformer.encoder_hidden_states").select(0, row).slice(0, 0, real).contiguous();
  x.timestep = timestep;
  x.shape = {1, 8, 12};  // 32x48 image: latents 16x24, packed 8x12 (reference.json's img_shapes)
  return x;
}

TEST(QwenImageConfig, OmittedKeysTakeQwenImageSizes) {
  const QwenImageConfig config =
      QwenImageConfig::from_json(nlohmann::json::object(), "config.json");
  EXPECT_EQ(config.dim(), 3072);
  EXPECT_EQ(config.num_layers, 60);
  EXPECT_EQ(config.num_attention_heads, 24);
  EXPECT_EQ(config.attention_head_dim, 128);
  EXPECT_EQ(config.joint_attention_dim, 3584);
  EXPECT_EQ(config.in_channels, 64);
  EXPECT_EQ(config.out_channels, 16);
  EXPECT_EQ(config.out_values(), 64);
  EXPECT_EQ(config.axes_dims_rope, (std::array<int64_t, 3>{16, 56, 56}));
  // diffusers' `out_channels or in_channels`: null means in_channels.
  EXPECT_EQ(QwenImageConfig::from_json({{"out_channels", nullptr}}, "config.json").out_channels,
            64);
}

TEST(QwenImageConfig, RefusesBadValuesInOneLine) {
  for (const nlohmann::json& json :
       {nlohmann::json{{"attention_head_dim", 128}, {"axes_dims_rope", {16, 56, 48}}},
        nlohmann::json{{"patch_size", 1}}, nlohmann::json{{"zero_cond_t", true}},
        nlohmann::json{{"num_layers", -1}}}) {
    const std::string message =
        error_message([&] { QwenImageConfig::from_json(json, "transformer/config.json"); });
    EXPECT_NE(message.find(json.begin().key() == "attention_head_dim" ? "axes_dims_rope"
                                                                      : json.begin().key()),
              std::string::npos)
        << message;
    EXPECT_NE(message.find("transformer/config.json"), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

TEST(QwenImageTransformer, MatchesDiffusersMaskedBatchAtTwoTimesteps) {
  const QwenImageTransformer model = QwenImageTransformer::load(transformer_folder());
  const WeightStore ref = reference();
  // timestep / 1000 as QwenImagePipeline passes it; 1.0 and 0.4315 are what the fixture used. Row
  // 0's prompt has 11 real tokens of the batch's 21: diffusers masks the other 10.
  // At t = 1 the error (about 2e-6, against 3e-7 at 0.4315) comes from the timestep's sinusoid:
  // torch's vectorised float32 exp is not correctly rounded for 3 of its 128 frequencies, and at
  // 1000 rad one ulp of a frequency moves the angle by 6e-5 (with torch's frequencies the
  // sinusoids agree to 1.5e-8, against 2.7e-6 with correctly rounded ones).
  const std::vector<Tensor> out = model.forward(
      {item(ref, 0, 1.0f), item(ref, 1, 1.0f), item(ref, 0, 0.4315f), item(ref, 1, 0.4315f)});
  ASSERT_EQ(out.size(), 4u);
  const Tensor t1000 = f32(ref, "transformer.out_t1000"), t431 = f32(ref, "transformer.out_t431");
  const double errors[] = {
      relative_error(out[0], t1000.select(0, 0)), relative_error(out[1], t1000.select(0, 1)),
      relative_error(out[2], t431.select(0, 0)), relative_error(out[3], t431.select(0, 1))};
  for (double e : errors) EXPECT_LT(e, 1e-5);
  std::printf("Qwen-Image transformer vs diffusers: t1000 %.3g, %.3g; t431 %.3g, %.3g\n", errors[0],
              errors[1], errors[2], errors[3]);
}

TEST(QwenImageTransformer, MatchesDiffusersSingleItemWithoutMask) {
  const QwenImageTransformer model = QwenImageTransformer::load(transformer_folder());
  const WeightStore ref = reference();
  const std::vector<Tensor> out = model.forward({item(ref, 0, 0.4315f)});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].shape(), (Shape{96, 64}));
  const double e = relative_error(out[0], f32(ref, "transformer.out_single_t431").select(0, 0));
  EXPECT_LT(e, 1e-5);
  std::printf("Qwen-Image transformer, one item: %.3g\n", e);
}

TEST(QwenImageTransformer, RefusesACheckpointThatDoesNotMatchItsConfig) {
  QwenImageConfig config = QwenImageConfig::from_file(transformer_folder() / "config.json");
  config.num_layers = 3;
  const std::string message = error_message(
      [&] { QwenImageTransformer(config, WeightStore::open_folder(transformer_folder())); });
  EXPECT_NE(message.find("transformer_blocks.2."), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  // A tensor outside the blocks missing (here renamed away).
  config.num_layers = 2;
  const WeightStore renamed =
      WeightStore::open_folder(transformer_folder()).renamed([](const std::string& name) {
        return name == "txt_norm.weight" ? "txt_norm.scale" : name;
      });
  const std::string missing = error_message([&] { QwenImageTransformer(config, renamed); });
  EXPECT_NE(missing.find("'txt_norm.weight' is missing"), std::string::npos) << missing;
  EXPECT_NE(missing.find("not a Qwen-Image transformer"), std::string::npos) << missing;
  EXPECT_EQ(missing.find('\n'), std::string::npos) << missing;
}

TEST(QwenImageTransformer, RefusesLatentsThatDoNotFillTheGrid) {
  const QwenImageTransformer model = QwenImageTransformer::load(transformer_folder());
  QwenImageItem x = item(reference(), 0, 0.5f);
  x.shape.rows = 7;
  const std::string message = error_message([&] { model.forward({x}); });
  EXPECT_NE(message.find("packed latents"), std::string::npos) << message;
}

}  // namespace
}  // namespace mmgen::dit
