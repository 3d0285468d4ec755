#include "models/dit/zimage/zimage_transformer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "attention/kernels/dense_attention.h"
#include "core/error.h"
#include "core/json.h"
#include "models/dit/zimage/zimage_block.h"
#include "models/dit/zimage/zimage_random_checkpoint.h"
#include "models/dit/zimage/zimage_sequence.h"
#include "tests/test_support.h"

namespace mmgen::dit {
namespace {

using testing::error_message;
using testing::relative_error;
using testing::shared_dir;

fs::path tiny_dir() {
  return shared_dir() / "fixtures" / "zimage-tiny";
}

fs::path tiny_transformer() {
  return tiny_dir() / "model" / "transformer";
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// One line: the messages the model promises name the key or tensor and the file.
void expect_one_line(const std::string& message) {
  EXPECT_FALSE(message.empty());
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
}

TEST(ZImageConfig, OmittedKeysTakeDiffusersDefaults) {
  const ZImageConfig config = ZImageConfig::from_json(nlohmann::json::object());
  EXPECT_EQ(config.dim, 3840);
  EXPECT_EQ(config.n_layers, 30);
  EXPECT_EQ(config.n_refiner_layers, 2);
  EXPECT_EQ(config.n_heads, 30);
  EXPECT_EQ(config.cap_feat_dim, 2560);
  EXPECT_EQ(config.head_dim(), 128);
  EXPECT_EQ(config.adaln_dim(), 256);
  EXPECT_EQ(config.ffn_dim(), 10240);
  EXPECT_EQ(config.axes_dims, (std::array<int64_t, 3>{32, 48, 48}));
  EXPECT_EQ(config.axes_lens, (std::array<int64_t, 3>{1024, 512, 512}));
  EXPECT_DOUBLE_EQ(config.rope_theta, 256.0);
  EXPECT_FLOAT_EQ(config.t_scale, 1000.0f);
}

TEST(ZImageConfig, ReadsTheTinyFixture) {
  MMGEN_REQUIRE_SHARED();
  const ZImageConfig config = ZImageConfig::from_file(tiny_transformer() / "config.json");
  EXPECT_EQ(config.dim, 64);
  EXPECT_EQ(config.n_heads, 4);
  EXPECT_EQ(config.n_layers, 2);
  EXPECT_EQ(config.n_refiner_layers, 1);
  EXPECT_EQ(config.adaln_dim(), 64);
  EXPECT_EQ(config.ffn_dim(), 170);  // int(64 / 3 * 8)
  EXPECT_EQ(config.axes_dims, (std::array<int64_t, 3>{4, 6, 6}));
}

// Each unsupported or malformed value is refused in one line naming the key and the file.
TEST(ZImageConfig, RefusesUnsupportedValuesNamingKeyAndFile) {
  const std::string where = "some/transformer/config.json";
  const auto refusal = [&](const nlohmann::json& config) {
    return error_message([&] { ZImageConfig::from_json(config, where); });
  };
  const std::vector<std::pair<nlohmann::json, std::string>> cases = {
      {{{"all_patch_size", {2, 4}}, {"all_f_patch_size", {1, 1}}}, "'all_patch_size'"},
      {{{"all_f_patch_size", {1, 2}}}, "'all_f_patch_size'"},
      {{{"siglip_feat_dim", 1152}}, "'siglip_feat_dim'"},
      {{{"qk_norm", false}}, "'qk_norm'"},
      {{{"axes_dims", {32, 48}}}, "\"axes_dims\""},
      {{{"axes_dims", {32, 48, 50}}}, "'axes_dims'"},
      {{{"dim", 3841}}, "'dim'"},
      {{{"n_layers", "30"}}, "\"n_layers\""},
      {{{"rope_theta", "256"}}, "\"rope_theta\""},
      {{{"_class_name", "WanTransformer3DModel"}}, "_class_name"},
  };
  for (const auto& [config, key] : cases) {
    const std::string message = refusal(config);
    SCOPED_TRACE(config.dump());
    expect_one_line(message);
    EXPECT_TRUE(contains(message, key)) << message;
    EXPECT_TRUE(contains(message, where)) << message;
  }
  // n_kv_heads does not change diffusers' model (its attention has n_heads for k and v): read.
  EXPECT_EQ(ZImageConfig::from_json({{"n_kv_heads", 10}}).n_kv_heads, 10);
}

TEST(ZImageConfig, RefusesABadConfigFileOnLoad) {
  MMGEN_REQUIRE_SHARED();
  const fs::path folder = testing::scratch_dir("zimage-bad-config");
  nlohmann::json config = read_json_object(tiny_transformer() / "config.json");
  config["siglip_feat_dim"] = 1152;
  testing::write_json_file(folder / "config.json", config);
  fs::copy_file(tiny_transformer() / "diffusion_pytorch_model.safetensors",
                folder / "diffusion_pytorch_model.safetensors");
  const std::string message = error_message([&] { ZImageTransformer::load(folder); });
  expect_one_line(message);
  EXPECT_TRUE(contains(message, "'siglip_feat_dim'")) << message;
  EXPECT_TRUE(contains(message, (folder / "config.json").string())) << message;
}

TEST(ZImageTransformer, RefusesMissingOrMisshapenWeightsNamingTensorAndFile) {
  MMGEN_REQUIRE_SHARED();
  const ZImageConfig config = ZImageConfig::from_file(tiny_transformer() / "config.json");
  // A checkpoint without one tensor.
  const WeightStore full = WeightStore::open_folder(tiny_transformer());
  NamedTensors tensors;
  for (const std::string& name : full.names())
    if (name != "layers.1.feed_forward.w3.weight") tensors.emplace_back(name, full.get(name));
  const fs::path folder = testing::scratch_dir("zimage-missing-weight");
  const fs::path file = folder / "diffusion_pytorch_model.safetensors";
  write_safetensors(file, tensors);
  std::string message =
      error_message([&] { ZImageTransformer(config, WeightStore::open_folder(folder)); });
  expect_one_line(message);
  EXPECT_TRUE(contains(message, "'layers.1.feed_forward.w3.weight' is missing")) << message;
  EXPECT_TRUE(contains(message, folder.string())) << message;

  // A config that implies other shapes than the checkpoint holds.
  ZImageConfig wider = config;
  wider.cap_feat_dim = 32;
  message = error_message(
      [&] { ZImageTransformer(wider, WeightStore::open_folder(tiny_transformer())); });
  expect_one_line(message);
  EXPECT_TRUE(contains(message, "'cap_embedder.0.weight' has shape [64]")) << message;
  ZImageConfig deeper = config;
  deeper.n_layers = 3;
  message = error_message(
      [&] { ZImageTransformer(deeper, WeightStore::open_folder(tiny_transformer())); });
  EXPECT_TRUE(contains(message, "'layers.2.attention.to_q.weight' is missing")) << message;
}

TEST(ZImageSequence, PositionsFollowDiffusers) {
  const ZImageConfig config = ZImageConfig::from_json(
      {{"dim", 64}, {"n_heads", 4}, {"axes_dims", {4, 6, 6}}, {"axes_lens", {256, 32, 32}}});
  // A 2x3 patch grid (6 tokens, padded to 32) and a 40-token caption (padded to 64).
  const ZImageLayout layout = zimage_layout(config, {16, 1, 4, 6}, 40);
  EXPECT_EQ(layout.image_tokens, 6);
  EXPECT_EQ(layout.image_padded, 32);
  EXPECT_EQ(layout.caption_padded, 64);
  const ZImagePositions caption = zimage_caption_positions(layout);
  ASSERT_EQ(caption.size(), 64u);
  EXPECT_EQ(caption[0], (std::array<int64_t, 3>{1, 0, 0}));
  EXPECT_EQ(caption[63], (std::array<int64_t, 3>{64, 0, 0}));  // padding continues the count
  const ZImagePositions image = zimage_image_positions(layout);
  ASSERT_EQ(image.size(), 32u);
  EXPECT_EQ(image[0], (std::array<int64_t, 3>{65, 0, 0}));
  EXPECT_EQ(image[5], (std::array<int64_t, 3>{65, 1, 2}));
  EXPECT_EQ(image[6], (std::array<int64_t, 3>{0, 0, 0}));  // padding at the origin
  // Positions past the RoPE tables are refused, as diffusers' table lookup would fail.
  EXPECT_TRUE(contains(error_message([&] {
                         zimage_layout(config, {16, 1, 4, 6}, 250);
                       }),
                       "axes_lens[0]"));
  EXPECT_TRUE(contains(error_message([&] { zimage_layout(config, {16, 1, 4, 5}, 4); }), "patch"));
}

TEST(ZImageSequence, PatchifyRoundTripsWithChannelsFastest) {
  const ZImageConfig config = ZImageConfig::from_json(
      {{"dim", 64}, {"n_heads", 4}, {"in_channels", 3}, {"axes_dims", {4, 6, 6}}});
  Tensor latents = Tensor::empty({3, 1, 4, 6});
  for (int64_t i = 0; i < latents.numel(); ++i) latents.data<float>()[i] = float(i);
  const ZImageLayout layout = zimage_layout(config, latents.shape(), 5);
  const Tensor rows = zimage_patchify(latents, config, layout);
  ASSERT_EQ(rows.shape(), (Shape{6, 12}));
  // Token 4 = (h 1, w 1); value 5 of its row = (ph 0, pw 1, c 2).
  EXPECT_EQ(rows.item_f32({4, 5}), latents.item_f32({2, 0, 2, 3}));
  EXPECT_EQ(relative_error(zimage_unpatchify(rows, config, layout), latents), 0.0);
}

class ZImageTransformerReference : public ::testing::Test {
 protected:
  void SetUp() override {
    MMGEN_REQUIRE_SHARED();
    reference_ = WeightStore::open_file(tiny_dir() / "reference" / "reference.safetensors");
    const nlohmann::json json = read_json_object(tiny_dir() / "reference" / "reference.json");
    timesteps_ = {json.at("transformer.t0").get<float>(), json.at("transformer.t1").get<float>()};
  }
  // The fixture's batch: item j is transformer.x{j} with the caption of prompt j (21 and 26
  // tokens), both at timestep t{k}.
  std::vector<ZImageItem> batch(int k) const {
    std::vector<ZImageItem> items;
    for (int j = 0; j < 2; ++j)
      items.push_back({reference_.get_f32("transformer.x" + std::to_string(j)),
                       reference_.get_f32("text_encoder.prompt" + std::to_string(j)),
                       timesteps_[size_t(k)]});
    return items;
  }
  void expect_matches(int k) {
    const ZImageTransformer model = ZImageTransformer::load(tiny_transformer());
    const std::vector<Tensor> out = model.forward(batch(k));
    ASSERT_EQ(out.size(), 2u);
    for (int j = 0; j < 2; ++j) {
      const std::string name = "transformer.out" + std::to_string(k) + "_item" + std::to_string(j);
      const double error = relative_error(out[size_t(j)], reference_.get_f32(name));
      std::printf("%s: relative error %.3g\n", name.c_str(), error);
      EXPECT_LT(error, 1e-5) << name;
    }
  }
  WeightStore reference_;
  std::array<float, 2> timesteps_{};
};

TEST_F(ZImageTransformerReference, MatchesDiffusersAtT0) {
  expect_matches(0);
}

TEST_F(ZImageTransformerReference, MatchesDiffusersAtT1) {
  expect_matches(1);
}

// A backend that records every call and runs the dense reference, optionally without the keys
// in [mask_from, mask_to) of the sequence: what the pipeline's plan would plug in, seen from the
// model's side.
class RecordingBackend : public attention::AttentionBackend {
 public:
  struct Call {
    int64_t tokens;
    std::array<int64_t, 3> grid;
    int64_t text_length;
    int64_t layer;
  };
  RecordingBackend(std::vector<Call>* calls, int64_t mask_from, int64_t mask_to)
      : calls_(calls), mask_from_(mask_from), mask_to_(mask_to) {}
  std::string_view name() const override { return "recording"; }
  Tensor forward(const Tensor& q, const Tensor& k, const Tensor& v, float scale,
                 const attention::AttentionContext& context,
                 attention::AttentionStats* /*stats*/) override {
    calls_->push_back({q.size(1), context.grid, context.text_length, context.layer_index});
    attention::DenseAttentionArgs args;
    args.q = q, args.k = k, args.v = v, args.scale = scale;
    if (mask_to_ > mask_from_) {
      std::vector<float> mask(size_t(k.size(1)), 1.0f);
      for (int64_t i = mask_from_; i < std::min(mask_to_, k.size(1)); ++i) mask[size_t(i)] = 0;
      args.key_mask = Tensor::from_vector({1, k.size(1)}, mask);
    }
    return attention::dense_attention(args);
  }

 private:
  std::vector<Call>* calls_;
  int64_t mask_from_, mask_to_;
};

// One stack of recording backends; `mask` gives the key range each hides.
std::vector<attention::Layer> recording_stack(int64_t layers,
                                              std::vector<RecordingBackend::Call>* calls,
                                              std::pair<int64_t, int64_t> mask = {0, 0}) {
  std::vector<attention::Layer> stack;
  for (int64_t i = 0; i < layers; ++i)
    stack.emplace_back(std::make_shared<RecordingBackend>(calls, mask.first, mask.second));
  return stack;
}

TEST_F(ZImageTransformerReference, EveryAttentionCallGoesThroughTheLayersBackend) {
  const ZImageTransformer model = ZImageTransformer::load(tiny_transformer());
  std::vector<RecordingBackend::Call> noise, context, main;
  attention::Layers attention;
  attention.set_stack("noise_refiner", recording_stack(1, &noise));
  attention.set_stack("context_refiner", recording_stack(1, &context));
  attention.set_stack("layers", recording_stack(2, &main));
  const std::vector<Tensor> out = model.forward(batch(1), {}, &attention);
  for (int j = 0; j < 2; ++j)
    EXPECT_LT(relative_error(out[size_t(j)],
                             reference_.get_f32("transformer.out1_item" + std::to_string(j))),
              1e-5);
  // Two items per layer, each over its own tokens: 96 image tokens (an 8x12 grid, a multiple of
  // 32 already) and the 21- or 26-token caption padded to 32.
  ASSERT_EQ(noise.size(), 2u);
  ASSERT_EQ(context.size(), 2u);
  ASSERT_EQ(main.size(), 4u);
  for (const RecordingBackend::Call& call : noise) {
    EXPECT_EQ(call.tokens, 96);
    EXPECT_EQ(call.grid, (std::array<int64_t, 3>{1, 8, 12}));
    EXPECT_EQ(call.text_length, 0);
  }
  for (const RecordingBackend::Call& call : context) {
    EXPECT_EQ(call.tokens, 32);
    EXPECT_EQ(call.text_length, 32);
  }
  for (size_t i = 0; i < main.size(); ++i) {
    EXPECT_EQ(main[i].tokens, 128);
    EXPECT_EQ(main[i].text_length, 32);  // the caption follows the image
    EXPECT_EQ(main[i].layer, int64_t(i / 2));
  }
}

// diffusers' attention mask covers only the batch padding (pad_sequence); the pad tokens that
// round each part up to 32 are keys every query sees. Hiding them changes the result well beyond
// the tolerance, so the reference pins this down.
TEST_F(ZImageTransformerReference, PaddingTokensAreAttendedAsInDiffusers) {
  const ZImageTransformer model = ZImageTransformer::load(tiny_transformer());
  const std::vector<ZImageItem> item0 = {batch(0)[0]};  // caption of 21 tokens, padded to 32
  std::vector<RecordingBackend::Call> calls;
  attention::Layers masked;
  masked.set_stack("context_refiner", recording_stack(1, &calls, {21, 32}));
  masked.set_stack("layers", recording_stack(2, &calls, {96 + 21, 96 + 32}));
  const Tensor reference = reference_.get_f32("transformer.out0_item0");
  const double masked_error = relative_error(model.forward(item0, {}, &masked)[0], reference);
  std::printf("padding keys masked: relative error %.3g\n", masked_error);
  EXPECT_GT(masked_error, 1e-3);
  EXPECT_LT(relative_error(model.forward(item0)[0], reference), 1e-5);
}

// Items are independent: an item's prediction is the same alone or next to others of other
// caption lengths and image sizes (here one whose 6 patches are padded to 32 with x_pad_token).
TEST_F(ZImageTransformerReference, RaggedItemsAreIndependent) {
  const ZImageTransformer model = ZImageTransformer::load(tiny_transformer());
  Tensor small = Tensor::empty({16, 1, 4, 6});
  for (int64_t i = 0; i < small.numel(); ++i) small.data<float>()[i] = std::sin(0.3f * float(i));
  const ZImageItem odd{small, reference_.get_f32("text_encoder.prompt2"), 0.25f};
  const std::vector<Tensor> mixed = model.forward({batch(1)[1], odd, batch(1)[0]});
  ASSERT_EQ(mixed.size(), 3u);
  EXPECT_EQ(mixed[1].shape(), (Shape{16, 1, 4, 6}));
  EXPECT_LT(relative_error(mixed[0], reference_.get_f32("transformer.out1_item1")), 1e-5);
  EXPECT_LT(relative_error(mixed[2], reference_.get_f32("transformer.out1_item0")), 1e-5);
  EXPECT_EQ(relative_error(mixed[1], model.forward({odd})[0]), 0.0);
  // The caption matters: the same latents with another prompt give another prediction.
  ZImageItem swapped = batch(1)[0];
  swapped.caption = reference_.get_f32("text_encoder.prompt1");
  EXPECT_GT(
      relative_error(model.forward({swapped})[0], reference_.get_f32("transformer.out1_item0")),
      1e-3);
}

TEST_F(ZImageTransformerReference, RefusesBadInputs) {
  const ZImageTransformer model = ZImageTransformer::load(tiny_transformer());
  const Tensor caption = reference_.get_f32("text_encoder.prompt0");
  EXPECT_TRUE(contains(error_message([&] { model.forward({}); }), "empty batch"));
  EXPECT_TRUE(contains(error_message([&] {
                         model.forward({{Tensor::zeros({16, 1, 5, 6}), caption, 0.5f}});
                       }),
                       "patch"));
  EXPECT_TRUE(contains(error_message([&] {
                         model.forward({{Tensor::zeros({8, 1, 4, 6}), caption, 0.5f}});
                       }),
                       "latents must be [16"));
  EXPECT_TRUE(
      contains(error_message([&] {
                 model.forward({{Tensor::zeros({16, 1, 4, 6}), Tensor::zeros({5, 32}), 0.5f}});
               }),
               "caption must be [tokens, 64]"));
  // axes_lens[1] is 32 here: a 66-row latent has a 33-row patch grid.
  EXPECT_TRUE(contains(error_message([&] {
                         model.forward({{Tensor::zeros({16, 1, 66, 2}), caption, 0.5f}});
                       }),
                       "RoPE"));
}

// The generated checkpoint holds exactly what the model checks for (a small config with every
// kind of block and a padded image), in bf16 as released checkpoints are, and runs.
TEST(ZImageRandomCheckpoint, LoadsAndRunsInBf16) {
  ZImageConfig config = ZImageConfig::from_json({{"dim", 96},
                                                 {"n_heads", 2},
                                                 {"n_kv_heads", 2},
                                                 {"n_layers", 2},
                                                 {"n_refiner_layers", 1},
                                                 {"cap_feat_dim", 40},
                                                 {"axes_dims", {16, 16, 16}},
                                                 {"axes_lens", {256, 64, 64}}});
  const fs::path folder = testing::scratch_dir("zimage-random");
  write_safetensors(folder / "diffusion_pytorch_model.safetensors",
                    zimage_random_checkpoint(config));
  const ZImageTransformer model(config, WeightStore::open_folder(folder));
  EXPECT_EQ(model.weights().get("layers.0.attention.to_q.weight").dtype(), DType::BF16);
  Tensor latents = Tensor::empty({16, 1, 6, 10});
  for (int64_t i = 0; i < latents.numel(); ++i)
    latents.data<float>()[i] = std::sin(0.37f * float(i));
  Tensor caption = Tensor::empty({7, 40});
  for (int64_t i = 0; i < caption.numel(); ++i)
    caption.data<float>()[i] = std::cos(0.11f * float(i));
  const Tensor out = model.forward({{latents, caption, 0.7f}})[0];
  ASSERT_EQ(out.shape(), latents.shape());
  double norm = 0;
  for (int64_t i = 0; i < out.numel(); ++i) {
    ASSERT_TRUE(std::isfinite(out.data<float>()[i])) << "at " << i;
    norm += double(out.data<float>()[i]) * out.data<float>()[i];
  }
  EXPECT_GT(norm, 0.0);
}

}  // namespace
}  // namespace mmgen::dit
