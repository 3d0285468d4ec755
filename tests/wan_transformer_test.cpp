#include "models/dit/wan/wan_transformer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

#include "attention/backend.h"
#include "attention/layer.h"
#include "core/error.h"
#include "models/dit/wan/wan_patchify.h"
#include "models/dit/wan/wan_rope.h"
#include "tests/test_support.h"

namespace mmgen::dit {
namespace {

using testing::relative_error;
using testing::shared_dir;

fs::path tiny_dir() {
  return shared_dir() / "fixtures" / "wan-tiny";
}

std::string error_of(const std::function<void()>& run) {
  try {
    run();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(WanTransformerConfig, OmittedKeysTakeDiffusersDefaults) {
  WanTransformerConfig config = WanTransformerConfig::from_json(nlohmann::json::object());
  EXPECT_EQ(config.num_attention_heads, 40);
  EXPECT_EQ(config.attention_head_dim, 128);
  EXPECT_EQ(config.ffn_dim, 13824);
  EXPECT_EQ(config.num_layers, 40);
  EXPECT_EQ(config.text_dim, 4096);
  EXPECT_EQ(config.freq_dim, 256);
  EXPECT_EQ(config.rope_max_seq_len, 1024);
  EXPECT_TRUE(config.cross_attn_norm);
  EXPECT_FLOAT_EQ(config.eps, 1e-6f);
  EXPECT_EQ(config.patch_size, (std::array<int64_t, 3>{1, 2, 2}));
  // out_channels null means "as many as in_channels".
  config = WanTransformerConfig::from_json({{"in_channels", 48}, {"out_channels", nullptr}});
  EXPECT_EQ(config.out_channels, 48);
}

// What the GPU keeps of the 14B shape (the default config), from the config alone: diffusers'
// WanTransformer3DModel there has 14,288,491,584 parameters (bench/cuda/wan14b_folder.py prints
// 14.29B). In bf16 that is about 2 bytes each (the time embedder stays float32: +1.3%; the
// blocks' modulation tables stay on the host); FP8 products take 1 byte per block product weight
// (14.06B of them) plus a float32 scale per row. tests/cuda/wan_transformer_cuda_test holds the
// figure equal to the bytes the upload keeps resident.
TEST(WanTransformerGpuWeights, The14BShapeInBf16AndWithFp8Products) {
  const WanTransformerConfig config = WanTransformerConfig::from_json(nlohmann::json::object());
  const double parameters = 14288491584.0;
  const double bf16 = double(WanTransformer::gpu_weight_bytes(config, false));
  const double fp8 = double(WanTransformer::gpu_weight_bytes(config, true));
  EXPECT_GT(bf16, 2.0 * parameters);
  EXPECT_LT(bf16, 2.0 * parameters * 1.02);
  const double block_products = 40.0 * (8.0 * 5120 * 5120 + 2.0 * 5120 * 13824);
  EXPECT_NEAR(bf16 - fp8, block_products, 40.0 * (8 * 5120 + 2 * 13824 + 5120) * 4 + 4096)
      << "FP8 saves one byte per block product weight, less the row scales";
}

TEST(WanTransformerConfig, RejectsUnsupportedSettings) {
  EXPECT_NE(error_of([] {
              WanTransformerConfig::from_json({{"image_dim", 1280}});
            }).find("I2V"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              WanTransformerConfig::from_json({{"added_kv_proj_dim", 5120}});
            }).find("added_kv_proj_dim"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              WanTransformerConfig::from_json({{"pos_embed_seq_len", 514}});
            }).find("pos_embed_seq_len"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              WanTransformerConfig::from_json({{"qk_norm", "rms_norm"}});
            }).find("qk_norm"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              WanTransformerConfig::from_json({{"qk_norm", nullptr}});
            }).find("qk_norm"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              WanTransformerConfig::from_json({{"num_layers", "30"}});
            }).find("\"num_layers\" must be an integer"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              WanTransformerConfig::from_json({{"patch_size", {1, 2}}});
            }).find("patch_size"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              WanTransformerConfig::from_json({{"attention_head_dim", 23}});
            }).find("attention_head_dim"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              WanTransformerConfig::from_json({{"_class_name", "FluxTransformer2DModel"}});
            }).find("_class_name"),
            std::string::npos);
}

TEST(WanPatchify, RoundTripsAndOrdersPatchValuesLikeTheConvWeight) {
  Tensor latents = Tensor::empty({2, 3, 2, 4, 6});
  for (int64_t i = 0; i < latents.numel(); ++i) latents.data<float>()[i] = float(i);
  const PatchGrid grid{2, 2, 3};
  Tensor rows = patchify(latents, {1, 2, 2}, grid);
  ASSERT_EQ(rows.shape(), (Shape{2, 12, 12}));
  // Token 4 = (t 0, h 1, w 1); value 5 of its row = (c 1, ph 0, pw 1).
  EXPECT_EQ(rows.item_f32({1, 4, 5}), latents.item_f32({1, 1, 0, 2, 3}));
  // unpatchify expects channel-fastest rows: build them by permuting patchify's (c, ph, pw).
  Tensor channel_last =
      rows.view({2, 12, 3, 4}).permute({0, 1, 3, 2}).contiguous().view({2, 12, 12});
  Tensor back = unpatchify(channel_last, {1, 2, 2}, grid, 3);
  EXPECT_EQ(relative_error(back, latents), 0.0);
}

TEST(WanTimestep, SinusoidPutsCosinesFirst) {
  std::vector<float> s = timestep_sinusoid(2.0f, 8);
  ASSERT_EQ(s.size(), 8u);
  EXPECT_FLOAT_EQ(s[0], std::cos(2.0f));
  EXPECT_FLOAT_EQ(s[4], std::sin(2.0f));
  EXPECT_NEAR(s[1], std::cos(2.0 * std::exp(-std::log(10000.0) / 4)), 1e-6);
}

TEST(WanRope, RotatesPairsByTheirAxisPosition) {
  // head_dim 24: channels 0-7 follow the frame, 8-15 the row, 16-23 the column.
  WanRope rope(24, 8);
  Tensor x = Tensor::full({1, 2 * 3 * 4, 1, 24}, 1.0f);
  rope.apply_(x, 2, 3, 4);
  // Token 0 sits at (0, 0, 0): nothing rotates.
  EXPECT_FLOAT_EQ(x.item_f32({0, 0, 0, 0}), 1.0f);
  // Token 23 = (1, 2, 3). Pair 0 (frame part, frequency 1) turns by 1 radian; pair 4 (row part,
  // frequency 1) by 2; pair 9 (column part, frequency 10000^(-2/8)) by 3·that.
  EXPECT_NEAR(x.item_f32({0, 23, 0, 0}), std::cos(1.0) - std::sin(1.0), 1e-6);
  EXPECT_NEAR(x.item_f32({0, 23, 0, 1}), std::sin(1.0) + std::cos(1.0), 1e-6);
  EXPECT_NEAR(x.item_f32({0, 23, 0, 8}), std::cos(2.0) - std::sin(2.0), 1e-6);
  const double angle = 3.0 * std::pow(10000.0, -2.0 / 8.0);
  EXPECT_NEAR(x.item_f32({0, 23, 0, 18}), std::cos(angle) - std::sin(angle), 1e-6);
  Tensor too_long = Tensor::full({1, 9, 1, 24}, 1.0f);
  EXPECT_NE(error_of([&] { rope.apply_(too_long, 9, 1, 1); }).find("rope_max_seq_len"),
            std::string::npos);
}

// fa for every self- and cross-attention layer of `model` (empty Layers: the reference).
attention::Layers fa_everywhere(const WanTransformer& model) {
  return attention::layers_from(
      model.attention_stacks(), [](const attention::StackTraits&, int64_t) {
        return attention::Layer(attention::make_dit_backend("fa", nlohmann::json::object()));
      });
}

class WanTransformerReference : public ::testing::Test {
 protected:
  void SetUp() override {
    MMGEN_REQUIRE_SHARED();
    reference_ = WeightStore::open_file(tiny_dir() / "reference" / "reference.safetensors");
  }
  void expect_matches(float timestep, const std::string& name) {
    WanTransformer model = WanTransformer::load(tiny_dir() / "model" / "transformer");
    Tensor out = model.forward(reference_.get_f32("transformer.hidden_states"), timestep,
                               reference_.get_f32("transformer.encoder_hidden_states"));
    const double error = relative_error(out, reference_.get_f32(name));
    std::printf("%s: relative error %.3g\n", name.c_str(), error);
    EXPECT_LT(error, 1e-5);
  }
  WeightStore reference_;
};

TEST_F(WanTransformerReference, MatchesDiffusersAtTimestep999) {
  expect_matches(999.0f, "transformer.out_t999");
}

TEST_F(WanTransformerReference, MatchesDiffusersAtTimestep431_5) {
  expect_matches(431.5f, "transformer.out_t431");
}

TEST_F(WanTransformerReference, BatchOfTwoGivesEachItemItsOwnResult) {
  WanTransformer model = WanTransformer::load(tiny_dir() / "model" / "transformer");
  Tensor latents = reference_.get_f32("transformer.hidden_states");
  Tensor text = reference_.get_f32("transformer.encoder_hidden_states");
  // Item 1 is item 0 with the latents scaled, so a batching mistake would mix the two.
  Tensor latents2 = Tensor::empty({2, 16, 2, 4, 6}), text2 = Tensor::empty({2, 24, 32});
  for (int64_t i = 0; i < latents.numel(); ++i) {
    latents2.data<float>()[i] = latents.data<float>()[i];
    latents2.data<float>()[latents.numel() + i] = 0.5f * latents.data<float>()[i];
  }
  for (int64_t i = 0; i < text.numel(); ++i)
    text2.data<float>()[i] = text2.data<float>()[text.numel() + i] = text.data<float>()[i];
  Tensor out = model.forward(latents2, 999.0f, text2);
  EXPECT_LT(
      relative_error(out.slice(0, 0, 1).contiguous(), reference_.get_f32("transformer.out_t999")),
      1e-5);
  Tensor half = Tensor::empty(latents.shape());
  for (int64_t i = 0; i < latents.numel(); ++i)
    half.data<float>()[i] = 0.5f * latents.data<float>()[i];
  EXPECT_LT(relative_error(out.slice(0, 1, 2).contiguous(), model.forward(half, 999.0f, text)),
            1e-6);
}

// What lets the CPU pipeline run the two guidance branches as one batch: with dense attention (the
// reference and fa) a batch element's output is, to the bit, what it gets alone.
TEST_F(WanTransformerReference, BatchOfTwoIsBitIdenticalToTwoForwards) {
  WanTransformer model = WanTransformer::load(tiny_dir() / "model" / "transformer");
  const Tensor latents = reference_.get_f32("transformer.hidden_states");
  const Tensor text = reference_.get_f32("transformer.encoder_hidden_states");
  Tensor other_text = text.clone();
  for (int64_t i = 0; i < other_text.numel(); ++i) other_text.data<float>()[i] *= -0.75f;
  Tensor latents2 = Tensor::empty({2, 16, 2, 4, 6}), text2 = Tensor::empty({2, 24, 32});
  latents2.select(0, 0).copy_from(latents.select(0, 0));
  latents2.select(0, 1).copy_from(latents.select(0, 0));
  text2.select(0, 0).copy_from(text.select(0, 0));
  text2.select(0, 1).copy_from(other_text.select(0, 0));
  for (const bool flash : {false, true}) {
    attention::Layers attention = flash ? fa_everywhere(model) : attention::Layers();
    ASSERT_TRUE(attention.batch_elements_alone());
    const Tensor both = model.forward(latents2, 431.5f, text2, {}, &attention);
    const Tensor first = model.forward(latents, 431.5f, text, {}, &attention);
    const Tensor second = model.forward(latents, 431.5f, other_text, {}, &attention);
    const size_t bytes = size_t(first.numel()) * sizeof(float);
    EXPECT_EQ(0, std::memcmp(both.data<float>(), first.data<float>(), bytes)) << "fa " << flash;
    EXPECT_EQ(0, std::memcmp(both.data<float>() + first.numel(), second.data<float>(), bytes))
        << "fa " << flash;
  }
}

// WanPipeline pads every prompt's embedding with zero rows to max_sequence_length; on the host the
// padding is embedded, projected and attended to once, counted for its copies
// (attention/repeated_keys.h). diffusers' forward over the padded text (tests/data/wan_padded_text,
// two elements padded from rows 9 and 5), through the reference attention (which gets every key)
// and through fa (which counts them), batched and alone.
TEST_F(WanTransformerReference, PaddedTextMatchesDiffusersWithItsPaddingAttendedOnce) {
  WanTransformer model = WanTransformer::load(tiny_dir() / "model" / "transformer");
  const WeightStore padded = WeightStore::open_file(testing::source_dir() / "tests" / "data" /
                                                    "wan_padded_text" / "reference.safetensors");
  const Tensor latents = padded.get_f32("latents"), text = padded.get_f32("text");
  const Tensor expected = padded.get_f32("out_t431");
  for (const bool flash : {false, true}) {
    attention::Layers attention = flash ? fa_everywhere(model) : attention::Layers();
    const Tensor out = model.forward(latents, 431.5f, text, {}, &attention);
    const double error = relative_error(out, expected);
    std::printf("fa %d: relative error %.3g\n", int(flash), error);
    EXPECT_LT(error, 1e-5) << "fa " << flash;
    for (int64_t b = 0; b < 2; ++b) {
      const Tensor alone = model.forward(latents.slice(0, b, b + 1).contiguous(), 431.5f,
                                         text.slice(0, b, b + 1).contiguous(), {}, &attention);
      EXPECT_EQ(0, std::memcmp(alone.data<float>(), out.data<float>() + b * alone.numel(),
                               size_t(alone.numel()) * sizeof(float)))
          << "fa " << flash << ", element " << b;
    }
  }
}

TEST_F(WanTransformerReference, RejectsBadInputs) {
  WanTransformer model = WanTransformer::load(tiny_dir() / "model" / "transformer");
  Tensor text = reference_.get_f32("transformer.encoder_hidden_states");
  EXPECT_NE(error_of([&] {
              model.forward(Tensor::zeros({1, 16, 2, 5, 6}), 1.0f, text);
            }).find("not divisible"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              model.forward(Tensor::zeros({1, 8, 2, 4, 6}), 1.0f, text);
            }).find("latents"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              model.forward(Tensor::zeros({1, 16, 2, 4, 6}), 1.0f, Tensor::zeros({1, 24, 64}));
            }).find("text embeddings"),
            std::string::npos);
  // rope_max_seq_len is 32 in this model: a 66-wide latent has a 33-wide grid.
  EXPECT_NE(error_of([&] {
              model.forward(Tensor::zeros({1, 16, 1, 2, 66}), 1.0f, text);
            }).find("rope_max_seq_len"),
            std::string::npos);
}

TEST(WanTransformer, RejectsWeightsThatDoNotMatchTheConfig) {
  MMGEN_REQUIRE_SHARED();
  fs::path folder = tiny_dir() / "model" / "transformer";
  WanTransformerConfig config = WanTransformerConfig::from_file(folder / "config.json");
  config.num_layers = 3;  // the checkpoint has 2
  EXPECT_NE(error_of([&] {
              WanTransformer(config, WeightStore::open_folder(folder));
            }).find("'blocks.2.attn1.to_q.weight' is missing"),
            std::string::npos);
  config.num_layers = 2;
  config.ffn_dim = 65;
  EXPECT_NE(error_of([&] {
              WanTransformer(config, WeightStore::open_folder(folder));
            }).find("ffn.net.0.proj.weight' has shape [64, 48]"),
            std::string::npos);
}

TEST(WanTransformer, RunsTheBf16ShapesCheckpoint) {
  fs::path folder = testing::source_dir() / "examples" / "models" / "wan-shapes" / "transformer";
  if (!fs::exists(folder)) GTEST_SKIP() << folder << " not found";
  WanTransformer model = WanTransformer::load(folder);
  EXPECT_EQ(model.weights().get("blocks.0.attn1.to_q.weight").dtype(), DType::BF16);
  Tensor latents = Tensor::empty({1, 16, 1, 16, 16});
  for (int64_t i = 0; i < latents.numel(); ++i)
    latents.data<float>()[i] = std::sin(0.37f * float(i));
  Tensor text = Tensor::empty({1, 32, 128});
  for (int64_t i = 0; i < text.numel(); ++i) text.data<float>()[i] = std::cos(0.11f * float(i));
  Tensor out = model.forward(latents, 500.0f, text);
  ASSERT_EQ(out.shape(), (Shape{1, 16, 1, 16, 16}));
  double norm = 0;
  for (int64_t i = 0; i < out.numel(); ++i) {
    ASSERT_TRUE(std::isfinite(out.data<float>()[i])) << "at " << i;
    norm += double(out.data<float>()[i]) * out.data<float>()[i];
  }
  EXPECT_GT(norm, 0.0);
}

}  // namespace
}  // namespace mmgen::dit
