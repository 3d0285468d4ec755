// Z-Image's guidance options on the command line, --cfg-truncation and --cfg-normalization,
// against diffusers' ZImagePipeline with cfg_truncation / cfg_normalization on the shared
// zimage-tiny model (tests/fixtures/make_zimage_cfg.py wrote the images; each case changes the
// picture against the plain run by 0.13 to 0.27, so an option that is read but not applied
// fails here).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/file.h"
#include "core/npy.h"
#include "core/safetensors.h"
#include "tests/test_support.h"

namespace mmgen {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

fs::path reference_dir() {
  return testing::source_dir() / "tests/fixtures/zimage-cfg";
}

// `mmgen generate` of the fixture's request (seed 42) with `options`, as an npy image [1, H, W, 3].
testing::CommandResult generate(const std::string& options, const fs::path& out) {
  const json request = json::parse(read_text_file(reference_dir() / "reference.json"))["request"];
  const std::string model = (testing::shared_dir() / "fixtures/zimage-tiny/model").string();
  return testing::run_command(
      testing::mmgen_binary().string() + " generate --model-path " + model + " --prompt '" +
      request["prompt"].get<std::string>() + "' --negative-prompt '" +
      request["negative_prompt"].get<std::string>() + "' --height " +
      std::to_string(request["height"].get<int>()) + " --width " +
      std::to_string(request["width"].get<int>()) + " --num-inference-steps " +
      std::to_string(request["num_inference_steps"].get<int>()) + " --guidance-scale " +
      std::to_string(request["guidance_scale"].get<double>()) + " --max-sequence-length " +
      std::to_string(request["max_sequence_length"].get<int>()) +
      " --seed 42 --output-format npy --output-file-name image --overwrite --output-path " +
      out.string() + " " + options);
}

TEST(ZImageCfgOptions, TruncationAndNormalizationMatchDiffusers) {
  MMGEN_REQUIRE_SHARED();
  const SafetensorsFile reference =
      SafetensorsFile::open(reference_dir() / "reference.safetensors");
  const fs::path out = testing::scratch_dir("zimage-cfg-options");
  for (const auto& [name, options] : std::vector<std::pair<std::string, std::string>>{
           {"plain", ""},
           {"truncation_0_3", "--cfg-truncation 0.3"},
           {"normalization_0_5", "--cfg-normalization 0.5"},
           {"both", "--cfg-truncation 0.2 --cfg-normalization 1"}}) {
    SCOPED_TRACE(name);
    const auto result = generate(options, out);
    ASSERT_EQ(result.exit_code, 0) << result.err;
    const double error = testing::max_abs_diff(read_npy(out / "image.npy"), reference.tensor(name));
    std::printf("%s: max abs diff from diffusers %.3g\n", name.c_str(), error);
    EXPECT_LT(error, 1e-3);  // the pipeline's bound for its image (zimage_pipeline_test)
    // The output's settings record the values that ran and where they came from.
    const json sidecar = json::parse(read_text_file(out / "image.npy.json"));
    if (name == "both") {
      EXPECT_EQ(sidecar["cfg_truncation"], 0.2);
      EXPECT_EQ(sidecar["cfg_normalization"], 1.0);
      EXPECT_EQ(sidecar["setting_sources"]["cfg_normalization"], "command line");
    }
  }
}

// Both are guidance options: with guidance off, or on another pipeline, they do nothing and say so.
TEST(ZImageCfgOptions, UnusedValuesAreWarnedAbout) {
  MMGEN_REQUIRE_SHARED();
  const std::string model = (testing::shared_dir() / "fixtures/zimage-tiny/model").string();
  const std::string base = testing::mmgen_binary().string() + " generate --dry-run --prompt x " +
                           "--height 32 --width 48 --model-path ";
  const auto unguided =
      testing::run_command(base + model + " --guidance-scale 0 --cfg-truncation 0.5");
  ASSERT_EQ(unguided.exit_code, 0) << unguided.err;
  EXPECT_NE(unguided.err.find("--cfg-truncation is unused: guidance is off (--guidance-scale 0)"),
            std::string::npos)
      << unguided.err;
  const std::string wan = (testing::source_dir() / "examples/models/wan-tiny").string();
  const auto other = testing::run_command(base + wan + " --cfg-normalization 1");
  ASSERT_EQ(other.exit_code, 0) << other.err;
  EXPECT_NE(other.err.find("--cfg-normalization has no effect on Wan: only Z-Image reads it"),
            std::string::npos)
      << other.err;
  const auto bad = testing::run_command(base + model + " --cfg-truncation -1");
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("--cfg-truncation must be from 0"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace mmgen
