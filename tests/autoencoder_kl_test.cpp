// The AutoencoderKL decoder (models/vae/autoencoder_kl_*) against diffusers 0.42.1 on the
// zimage-tiny fixture, the Z-Image de-normalisation, and the one-line refusals of a bad config
// and of weights that disagree with it.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <vector>

#include "attention/backend.h"
#include "core/error.h"
#include "core/ops.h"
#include "models/vae/autoencoder_kl_decoder.h"
#include "tests/test_support.h"

namespace mmgen {
namespace {

using vae::AutoencoderKLConfig;
using vae::AutoencoderKLDecoder;

fs::path fixture() {
  return testing::shared_dir() / "fixtures/zimage-tiny";
}

WeightStore reference() {
  return WeightStore::open_file(fixture() / "reference/reference.safetensors");
}

TEST(AutoencoderKL, DecodesFixtureLatentsLikeDiffusers) {
  MMGEN_REQUIRE_SHARED();
  const AutoencoderKLDecoder decoder = AutoencoderKLDecoder::open_folder(fixture() / "model/vae");
  const WeightStore ref = reference();
  const Tensor decoded = decoder.decode(ref.get_f32("vae.latents"));
  const Tensor expected = ref.get_f32("vae.decoded");
  ASSERT_EQ(decoded.shape(), expected.shape());
  const double error = testing::relative_error(decoded, expected);
  std::printf("zimage-tiny VAE decode relative error %.3g\n", error);
  EXPECT_LT(error, 1e-5);
}

// The mid block's attention through a catalogue backend (as the attention plan hands the VAE one)
// gives what the built-in dense path gives.
TEST(AutoencoderKL, DecodesThroughAnAttentionBackend) {
  MMGEN_REQUIRE_SHARED();
  AutoencoderKLDecoder decoder = AutoencoderKLDecoder::open_folder(fixture() / "model/vae");
  decoder.set_attention(
      attention::Layer(attention::make_dit_backend("torch_sdpa", nlohmann::json::object())));
  const WeightStore ref = reference();
  const double error = testing::relative_error(decoder.decode(ref.get_f32("vae.latents")),
                                               ref.get_f32("vae.decoded"));
  EXPECT_LT(error, 1e-5);
}

// The pipeline's last step: de-normalise the final latents, decode, and the post-processing that
// is not the VAE's ((x / 2 + 0.5) clamped to [0, 1], channels last) gives the pipeline's image.
TEST(AutoencoderKL, DenormalizeThenDecodeGivesThePipelineImage) {
  MMGEN_REQUIRE_SHARED();
  const AutoencoderKLDecoder decoder = AutoencoderKLDecoder::open_folder(fixture() / "model/vae");
  const WeightStore ref = reference();
  const Tensor image =
      decoder.decode(decoder.denormalize(ref.get_f32("pipeline.latents_after_step3")));
  Tensor pixels = image.select(0, 0).permute({1, 2, 0}).contiguous();  // [H, W, 3]
  float* p = pixels.data<float>();
  for (int64_t i = 0; i < pixels.numel(); ++i) p[i] = std::clamp(p[i] / 2.0f + 0.5f, 0.0f, 1.0f);
  const double difference = testing::max_abs_diff(pixels, ref.get_f32("pipeline.image"));
  std::printf("zimage-tiny pipeline image max abs diff %.3g\n", difference);
  EXPECT_LT(difference, 1e-3);
}

// diffusers: latents / scaling_factor + shift_factor in float32, the division a true one. At
// x = −2.997 (float32) the true quotient plus the shift rounds to −0x1.05e134p+3 while a product
// with the float32 reciprocal rounds to −0x1.05e132p+3, so the test tells them apart.
TEST(AutoencoderKL, DenormalizeDividesByScalingThenAddsShift) {
  const AutoencoderKLConfig config = AutoencoderKLConfig::from_json(
      {{"latent_channels", 2}, {"scaling_factor", 0.3611}, {"shift_factor", 0.1159}});
  ASSERT_TRUE(config.shift_factor.has_value());
  EXPECT_EQ(config.scaling_factor, 0.3611f);
  EXPECT_EQ(*config.shift_factor, 0.1159f);
  const Tensor latents = Tensor::from_vector({1, 2, 1, 2}, std::vector<float>{-2.997f, 1, 0, -2});
  const Tensor result = vae::denormalize(config, latents);
  ASSERT_EQ(result.shape(), latents.shape());
  EXPECT_EQ(result.data<float>()[0], -0x1.05e134p+3f);
  EXPECT_NE(result.data<float>()[0], -0x1.05e132p+3f);    // what x · (1 / s) + shift would give
  EXPECT_FLOAT_EQ(result.data<float>()[1], 2.88521600f);  // 1 / 0.3611 + 0.1159
  EXPECT_FLOAT_EQ(result.data<float>()[2], 0.1159f);
  EXPECT_FLOAT_EQ(result.data<float>()[3], -5.42273188f);

  // Without a shift_factor (SD's VAE) only the division remains.
  const AutoencoderKLConfig unshifted =
      AutoencoderKLConfig::from_json({{"latent_channels", 2}, {"scaling_factor", 0.5}});
  EXPECT_EQ(vae::denormalize(unshifted, latents).data<float>()[3], -4.0f);
  EXPECT_NE(testing::error_message([&] {
              vae::denormalize(config, Tensor::zeros({1, 3, 2, 2}));
            }).find("expected latents [batch, 2, height, width]"),
            std::string::npos);
}

std::string config_error(const nlohmann::json& json) {
  return testing::error_message([&] { AutoencoderKLConfig::from_json(json, "vae/config.json"); });
}

TEST(AutoencoderKL, ConfigDefaultsAndRefusals) {
  const AutoencoderKLConfig defaults = AutoencoderKLConfig::from_json(nlohmann::json::object());
  EXPECT_EQ(defaults.block_out_channels, (std::vector<int64_t>{64}));
  EXPECT_EQ(defaults.layers_per_block, 1);
  EXPECT_EQ(defaults.norm_num_groups, 32);
  EXPECT_EQ(defaults.latent_channels, 4);
  EXPECT_EQ(defaults.scaling_factor, 0.18215f);
  EXPECT_FALSE(defaults.shift_factor.has_value());
  EXPECT_TRUE(defaults.use_post_quant_conv);
  EXPECT_EQ(defaults.spatial_factor(), 1);
  EXPECT_EQ(config_error({{"shift_factor", nullptr}, {"latents_mean", nullptr}}), "");

  const std::string act = config_error({{"act_fn", "gelu"}});
  EXPECT_NE(act.find("vae/config.json"), std::string::npos) << act;
  EXPECT_NE(act.find("\"act_fn\" \"gelu\""), std::string::npos) << act;
  EXPECT_EQ(act.find('\n'), std::string::npos) << act;
  EXPECT_NE(config_error({{"up_block_types", {"AttnUpDecoderBlock2D"}}}).find("up_block_types"),
            std::string::npos);
  EXPECT_NE(
      config_error({{"block_out_channels", {16, 32}}, {"up_block_types", {"UpDecoderBlock2D"}}})
          .find("one block per block_out_channels entry"),
      std::string::npos);
  EXPECT_NE(config_error({{"norm_num_groups", 5}, {"block_out_channels", {16}}})
                .find("\"norm_num_groups\" 5 does not divide"),
            std::string::npos);
  EXPECT_NE(config_error({{"scaling_factor", 0}}).find("scaling_factor"), std::string::npos);
  EXPECT_NE(config_error({{"shift_factor", 1e300}}).find("shift_factor"), std::string::npos);
  EXPECT_NE(config_error({{"layers_per_block", "1"}}).find("layers_per_block"), std::string::npos);
  EXPECT_NE(config_error({{"use_post_quant_conv", 1}}).find("use_post_quant_conv"),
            std::string::npos);
}

// A copy of the fixture's VAE folder with `drop` left out of the weights.
fs::path vae_without(const std::string& drop) {
  const fs::path source = fixture() / "model/vae";
  const fs::path folder = testing::scratch_dir("autoencoder-kl-" + std::to_string(drop.size()));
  fs::copy_file(source / "config.json", folder / "config.json");
  const WeightStore store = WeightStore::open_folder(source);
  NamedTensors tensors;
  for (const std::string& name : store.names())
    if (name != drop) tensors.emplace_back(name, store.get(name));
  write_safetensors(folder / "diffusion_pytorch_model.safetensors", tensors);
  return folder;
}

TEST(AutoencoderKL, MissingWeightIsRefusedInOneLine) {
  MMGEN_REQUIRE_SHARED();
  const std::string name = "decoder.mid_block.attentions.0.to_k.bias";
  const fs::path folder = vae_without(name);
  const std::string error =
      testing::error_message([&] { AutoencoderKLDecoder::open_folder(folder); });
  EXPECT_NE(error.find("tensor '" + name + "' is missing"), std::string::npos) << error;
  EXPECT_NE(error.find(folder.string()), std::string::npos) << error;
  EXPECT_EQ(error.find('\n'), std::string::npos) << error;
}

TEST(AutoencoderKL, WeightsThatDisagreeWithTheConfigAreRefused) {
  MMGEN_REQUIRE_SHARED();
  const fs::path folder = fixture() / "model/vae";
  AutoencoderKLConfig config = AutoencoderKLConfig::from_file(folder / "config.json");
  config.block_out_channels = {16, 64};  // the checkpoint has [16, 32]
  const std::string error = testing::error_message(
      [&] { AutoencoderKLDecoder(config, WeightStore::open_folder(folder)); });
  EXPECT_NE(error.find("'decoder.conv_in.weight'"), std::string::npos) << error;
  EXPECT_NE(error.find("[32, 16, 3, 3]"), std::string::npos) << error;

  // use_post_quant_conv true asks for a tensor this (FLUX-style) checkpoint does not have.
  config = AutoencoderKLConfig::from_file(folder / "config.json");
  config.use_post_quant_conv = true;
  EXPECT_NE(testing::error_message([&] {
              AutoencoderKLDecoder(config, WeightStore::open_folder(folder));
            }).find("'post_quant_conv.weight'"),
            std::string::npos);
}

// Timing only: MMGEN_KL_BENCH=HxW decodes random latents of that size with the fixture's weights
// (or MMGEN_KL_BENCH_VAE's) and prints the median time (run it under OMP_NUM_THREADS=1 and =2 to
// see the thread scaling).
TEST(AutoencoderKL, BenchmarkDecodeWhenAsked) {
  const char* size = std::getenv("MMGEN_KL_BENCH");
  if (!size)
    GTEST_SKIP() << "set MMGEN_KL_BENCH=HxW (and MMGEN_KL_BENCH_VAE=folder) to time a decode";
  MMGEN_REQUIRE_SHARED();
  int64_t height = 0, width = 0;
  ASSERT_EQ(std::sscanf(size, "%ldx%ld", &height, &width), 2) << size;
  // MMGEN_KL_BENCH_VAE: another AutoencoderKL folder (the real FLUX VAE's sizes, say).
  const char* folder = std::getenv("MMGEN_KL_BENCH_VAE");
  const AutoencoderKLDecoder decoder =
      AutoencoderKLDecoder::open_folder(folder ? fs::path(folder) : fixture() / "model/vae");
  const Tensor z = ops::random_uniform({1, 16, height, width}, DType::F32, Device::CPU, 1, 2.0f);
  const Tensor first = decoder.decode(z);  // warm-up: page in the weights, start the thread team
  ASSERT_EQ(first.size(1), 3);
  std::vector<double> seconds;
  for (int run = 0; run < 5; ++run) {
    const auto start = std::chrono::steady_clock::now();
    const Tensor image = decoder.decode(z);
    seconds.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    ASSERT_EQ(image.shape(), first.shape());
  }
  std::sort(seconds.begin(), seconds.end());
  const double median = seconds[2];
  std::printf("AutoencoderKL decode [1, 16, %ld, %ld]: median of 5 %.3f s\n", height, width,
              median);
}

}  // namespace
}  // namespace mmgen
