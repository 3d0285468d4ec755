#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>

#include "core/error.h"
#include "models/vae/wan_vae_decoder.h"
#include "tests/test_support.h"

namespace mmgen {
namespace {

using vae::WanVaeConfig;
using vae::WanVaeDecoder;

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

TEST(WanVae, DecodesFixtureLatentsLikeDiffusers) {
  MMGEN_REQUIRE_SHARED();
  const fs::path fixtures = testing::shared_dir() / "fixtures/wan-tiny";
  WeightStore reference = WeightStore::open_file(fixtures / "reference/reference.safetensors");
  WanVaeDecoder decoder = WanVaeDecoder::open_folder(fixtures / "model/vae");
  Tensor latents = reference.get_f32("vae.latents");
  Tensor expected = reference.get_f32("vae.decoded");
  int calls = 0;
  Tensor decoded = decoder.decode(latents, [&](int done, int total) {
    ++calls;
    EXPECT_EQ(done, calls);
    EXPECT_EQ(total, 2);
  });
  EXPECT_EQ(calls, 2);
  const double error = testing::relative_error(decoded, expected);
  std::printf("wan-tiny VAE decode relative error %.3g\n", error);
  EXPECT_LT(error, 1e-5);
}

// The pipeline's last step: de-normalise the final latents, decode, map [-1, 1] to [0, 1].
TEST(WanVae, DenormalizeThenDecodeGivesThePipelineVideo) {
  MMGEN_REQUIRE_SHARED();
  const fs::path fixtures = testing::shared_dir() / "fixtures/wan-tiny";
  WeightStore reference = WeightStore::open_file(fixtures / "reference/reference.safetensors");
  WanVaeDecoder decoder = WanVaeDecoder::open_folder(fixtures / "model/vae");
  Tensor latents = reference.get_f32("pipeline.latents_after_step3");
  Tensor video = decoder.decode(decoder.denormalize(latents));  // [1, 3, F, H, W]
  Tensor expected = reference.get_f32("pipeline.video");        // [F, H, W, 3]
  Tensor frames = video.select(0, 0).permute({1, 2, 3, 0}).contiguous();
  float* p = frames.data<float>();
  for (int64_t i = 0; i < frames.numel(); ++i) p[i] = std::clamp(p[i] / 2.0f + 0.5f, 0.0f, 1.0f);
  const double difference = testing::max_abs_diff(frames, expected);
  std::printf("pipeline video max abs diff %.3g, relative error %.3g\n", difference,
              testing::relative_error(frames, expected));
  EXPECT_LT(difference, 1e-5);
}

TEST(WanVae, ConfigDefaultsAndRefusals) {
  WanVaeConfig defaults = WanVaeConfig::from_json(nlohmann::json::object());
  EXPECT_EQ(defaults.base_dim, 96);
  EXPECT_EQ(defaults.decoder_dim(), 96);
  EXPECT_EQ(defaults.dim_mult, (std::vector<int64_t>{1, 2, 4, 4}));
  EXPECT_EQ(defaults.num_res_blocks, 2);
  EXPECT_EQ(defaults.temporal_factor(), 4);
  EXPECT_EQ(defaults.spatial_factor(), 8);
  EXPECT_EQ(defaults.output_frames(21), 81);
  EXPECT_FLOAT_EQ(defaults.latents_mean[0], -0.7571f);

  auto error_of = [](const nlohmann::json& json) -> std::string {
    try {
      WanVaeConfig::from_json(json, "vae/config.json");
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(error_of({{"is_residual", true}}).find("Wan2.2"), std::string::npos);
  EXPECT_NE(error_of({{"patch_size", 2}}).find("Wan2.2"), std::string::npos);
  EXPECT_EQ(error_of({{"patch_size", nullptr}, {"decoder_base_dim", nullptr}}), "");
  EXPECT_NE(error_of({{"dim_mult", {1, 2}}}).find("temperal_downsample"), std::string::npos);
  EXPECT_NE(error_of({{"latents_std", {1.0, 2.0}}}).find("z_dim"), std::string::npos);
  EXPECT_NE(error_of({{"base_dim", "96"}}).find("base_dim"), std::string::npos);
}

TEST(WanVae, WeightsThatDisagreeWithTheConfigAreRefused) {
  MMGEN_REQUIRE_SHARED();
  const fs::path folder = testing::shared_dir() / "fixtures/wan-tiny/model/vae";
  WanVaeConfig config = WanVaeConfig::from_file(folder / "config.json");
  config.base_dim = 16;  // the checkpoint has base_dim 8
  try {
    WanVaeDecoder(config, WeightStore::open_folder(folder));
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("decoder.conv_in.weight"), std::string::npos) << e.what();
  }
}

// z[0, c, t, h, w] = sin(0.1 · (7c + 3h + w + 5t)), computed in double and rounded to float32, the
// same input the Python reference used (numpy float64 sin, then astype(float32)).
Tensor sine_latents(int64_t frames, int64_t height, int64_t width) {
  Tensor z = Tensor::empty({1, 16, frames, height, width});
  float* p = z.data<float>();
  for (int64_t c = 0; c < 16; ++c)
    for (int64_t t = 0; t < frames; ++t)
      for (int64_t h = 0; h < height; ++h)
        for (int64_t w = 0; w < width; ++w)
          *p++ = float(std::sin(0.1 * double(c * 7 + h * 3 + w + 5 * t)));
  return z;
}

struct Summary {
  double mean, std;
  std::vector<std::pair<int64_t, float>> values;  // flat index -> value
};

void expect_matches(const Tensor& y, const Summary& expected, const char* what) {
  const float* p = y.data<float>();
  double sum = 0, squares = 0, lowest = 1e30, highest = -1e30;
  for (int64_t i = 0; i < y.numel(); ++i) {
    sum += p[i];
    lowest = std::min(lowest, double(p[i]));
    highest = std::max(highest, double(p[i]));
  }
  const double mean = sum / double(y.numel());
  for (int64_t i = 0; i < y.numel(); ++i) squares += (p[i] - mean) * (p[i] - mean);
  const double std = std::sqrt(squares / double(y.numel()));
  EXPECT_GE(lowest, -1.0) << what;
  EXPECT_LE(highest, 1.0) << what;
  EXPECT_NEAR(mean, expected.mean, 1e-4 * std::abs(expected.mean)) << what;
  EXPECT_NEAR(std, expected.std, 1e-4 * expected.std) << what;
  for (const auto& [index, value] : expected.values)
    EXPECT_NEAR(p[index], value, 1e-4 * std::abs(value)) << what << " at flat index " << index;
}

// Reference values from diffusers 0.40.0.dev0 / torch 2.11 on the CPU:
//   vae = AutoencoderKLWan.from_pretrained("examples/models/wan-shapes/vae",
//                                          torch_dtype=torch.float32)  # bf16 -> f32
//   y = vae.decode(z).sample  # z = sine_latents(...) as above
//   mean / std(unbiased=False) in float64, and y.flatten()[i] for a few i.
TEST(WanVae, DecodesBf16ShapesCheckpointLikeDiffusers) {
  const fs::path folder = testing::source_dir() / "examples/models/wan-shapes/vae";
  if (!fs::exists(folder)) GTEST_SKIP() << folder << " not found";
  WanVaeDecoder decoder = WanVaeDecoder::open_folder(folder);
  EXPECT_EQ(decoder.config().base_dim, 32);

  auto start = std::chrono::steady_clock::now();
  Tensor image = decoder.decode(sine_latents(1, 16, 16));
  std::printf("wan-shapes VAE: [1,16,1,16,16] -> 128x128 image in %.3f s\n", seconds_since(start));
  ASSERT_EQ(image.shape(), (Shape{1, 3, 1, 128, 128}));
  expect_matches(image,
                 {-0.175219514,
                  0.636095494,
                  {{0, 0.524523973f},
                   {1, 0.716513395f},
                   {1000, 0.305312812f},
                   {24593, -0.756855428f},
                   {49151, -0.375146449f}}},
                 "image");

  // Three latent frames exercise the feature cache past the first "Rep" chunk.
  start = std::chrono::steady_clock::now();
  Tensor video = decoder.decode(sine_latents(3, 8, 8));
  std::printf("wan-shapes VAE: [1,16,3,8,8] -> 9x64x64 video in %.3f s\n", seconds_since(start));
  ASSERT_EQ(video.shape(), (Shape{1, 3, 9, 64, 64}));
  expect_matches(video,
                 {0.132372016,
                  0.459834073,
                  {{0, 0.556758344f},
                   {1, 0.745295763f},
                   {1000, 0.888207018f},
                   {55313, -0.454488933f},
                   {110591, -0.324668437f}}},
                 "video");
}

// Timing only, skipped unless MMGEN_VAE_BENCH_MODEL names a Wan VAE folder (e.g. a full-size
// Wan2.1 VAE); MMGEN_VAE_BENCH_LATENT sets the latent shape "B,C,T,H,W" (default 1,16,3,60,104).
}  // namespace
}  // namespace mmgen
