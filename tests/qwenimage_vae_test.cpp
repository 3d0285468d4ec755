// Qwen-Image's VAE (AutoencoderKLQwenImage) through WanVaeDecoder, against what diffusers 0.42.1
// computed for the qwenimage-tiny fixture (tests/fixtures/make_qwenimage_tiny.py).
#include <gtest/gtest.h>

#include "core/error.h"
#include "models/vae/wan_vae_decoder.h"
#include "tests/test_support.h"

namespace mmgen {
namespace {

using vae::WanVaeClass;
using vae::WanVaeConfig;
using vae::WanVaeDecoder;

fs::path fixture() {
  return testing::source_dir() / "tests/fixtures/qwenimage-tiny";
}

WeightStore reference() {
  return WeightStore::open_file(fixture() / "reference/reference.safetensors");
}

TEST(QwenImageVae, ReadsTheQwenImageConfigKeys) {
  const WanVaeConfig config = WanVaeConfig::from_file(fixture() / "model/vae/config.json");
  EXPECT_EQ(config.vae_class, WanVaeClass::QwenImage);
  EXPECT_EQ(config.base_dim, 16);
  EXPECT_EQ(config.out_channels, 3);  // from input_channels
  // No scale_factor_* keys: the compression is what dim_mult [1, 2] and [false] give.
  EXPECT_EQ(config.scale_factor_spatial, 2);
  EXPECT_EQ(config.scale_factor_temporal, 1);
}

TEST(QwenImageVae, DenormalisesLikeThePipeline) {
  const WanVaeDecoder decoder = WanVaeDecoder::open_folder(fixture() / "model/vae");
  const WeightStore tensors = reference();
  const Tensor denormalised = decoder.denormalize(tensors.get_f32("vae.latents"));
  const double error = testing::relative_error(denormalised, tensors.get_f32("vae.denormalised"));
  std::printf("qwenimage-tiny VAE de-normalisation relative error %.3g\n", error);
  EXPECT_LE(error, 1e-6);
}

TEST(QwenImageVae, DecodesOneFrameLikeDiffusers) {
  const WanVaeDecoder decoder = WanVaeDecoder::open_folder(fixture() / "model/vae");
  const WeightStore tensors = reference();
  const Tensor decoded = decoder.decode(tensors.get_f32("vae.denormalised"));
  ASSERT_EQ(decoded.shape(), (Shape{1, 3, 1, 32, 48}));
  const double error = testing::relative_error(decoded, tensors.get_f32("vae.decoded"));
  std::printf("qwenimage-tiny VAE decode relative error %.3g\n", error);
  EXPECT_LE(error, 1e-5);
}

TEST(QwenImageVae, RefusesABadConfig) {
  EXPECT_NE(
      testing::error_message([] {
        WanVaeConfig::from_json({{"_class_name", "AutoencoderKLQwenImage"}, {"input_channels", 0}});
      }).find("\"input_channels\" must be an integer from 1"),
      std::string::npos);
}

}  // namespace
}  // namespace mmgen
