// LoRAs on the image models, against diffusers' load_lora_weights + set_adapters(["a", "b"],
// [0.6, 1.3]) and fuse_lora on each model's reference request (tests/fixtures/
// make_image_loras.py): Z-Image with a diffusers file and one in the original names, Qwen-Image
// with a diffusers file and one in kohya's flattened names, FLUX with a diffusers file and one in
// kohya's sd-scripts names (BFL's fused layers). Each merged at load and added at run time.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/file.h"
#include "core/npy.h"
#include "core/safetensors.h"
#include "pipeline/component_loras.h"
#include "pipeline/flux/flux_pipeline.h"
#include "pipeline/model_index.h"
#include "pipeline/qwenimage/qwenimage_pipeline.h"
#include "pipeline/zimage/zimage_pipeline.h"
#include "tests/test_support.h"

namespace mmgen {
namespace {

const lora::LoraMode kModes[] = {lora::LoraMode::Merge, lora::LoraMode::Runtime};

const char* mode_name(lora::LoraMode mode) {
  return mode == lora::LoraMode::Merge ? "merged" : "runtime";
}

// Every step's latents within the base pipeline test's bound of diffusers' (1e-4 relative), the
// image within 1e-3 of both the unfused and the fused image, and far from the image of b alone.
template <class Output>
void expect_matches(const Output& output, const fs::path& fixture) {
  const SafetensorsFile reference = SafetensorsFile::open(fixture / "reference.safetensors");
  ASSERT_EQ(output.latents_after_step.size(), 4u);
  for (int k = 0; k < 4; ++k)
    EXPECT_LT(
        testing::relative_error(output.latents_after_step[size_t(k)],
                                reference.tensor("both.latents_after_step" + std::to_string(k))),
        1e-4)
        << "step " << k;
  EXPECT_LT(testing::max_abs_diff(output.frames, reference.tensor("both.image")), 1e-3);
  EXPECT_LT(testing::max_abs_diff(output.frames, reference.tensor("both_fused.image")), 1e-3);
  EXPECT_GT(testing::max_abs_diff(output.frames, reference.tensor("b.image")), 1e-2);
}

ModelIndex index_with(const fs::path& model, const fs::path& a, const fs::path& b,
                      lora::LoraMode mode) {
  ModelIndex index = load_model_index(model);
  attach_loras(index, {{a, 0.6}, {b, 1.3}}, mode);
  return index;
}

// The "pipeline" request of a tiny model's reference.json.
nlohmann::json reference_request(const fs::path& tiny) {
  return nlohmann::json::parse(read_text_file(tiny / "reference/reference.json"))["pipeline"];
}

// `input` on the tiny model with its reference noise and LoRAs `a` at 0.6 and `b` at 1.3, merged
// and at run time, against the fixture's diffusers results.
template <class Pipeline, class Input>
void expect_both_modes_match(const fs::path& tiny, const fs::path& fixture, const fs::path& a,
                             const fs::path& b, Input input) {
  input.initial_latents =
      SafetensorsFile::open(tiny / "reference/reference.safetensors").tensor("pipeline.noise");
  for (const lora::LoraMode mode : kModes) {
    SCOPED_TRACE(mode_name(mode));
    const Pipeline pipeline(index_with(tiny / "model", a, b, mode));
    expect_matches(pipeline.generate(input, /*keep_step_latents=*/true), fixture);
  }
}

TEST(ImageLora, ZImageDiffusersAndOriginalNamesMatchDiffusers) {
  MMGEN_REQUIRE_SHARED();
  const fs::path tiny = testing::shared_dir() / "fixtures/zimage-tiny";
  const fs::path fixture = testing::source_dir() / "tests/fixtures/zimage-tiny-lora";
  expect_both_modes_match<ZImagePipeline>(tiny, fixture, fixture / "a_diffusers.safetensors",
                                          fixture / "b_original.safetensors",
                                          testing::zimage_fixture_input(reference_request(tiny)));
}

TEST(ImageLora, QwenImageDiffusersAndKohyaNamesMatchDiffusers) {
  const fs::path tiny = testing::source_dir() / "tests/fixtures/qwenimage-tiny";
  const fs::path fixture = testing::source_dir() / "tests/fixtures/qwenimage-tiny-lora";
  expect_both_modes_match<QwenImagePipeline>(
      tiny, fixture, fixture / "a_diffusers.safetensors", fixture / "b_kohya.safetensors",
      testing::qwenimage_fixture_input(reference_request(tiny)));
}

TEST(ImageLora, FluxDiffusersAndKohyaNamesMatchDiffusers) {
  const fs::path tiny = testing::source_dir() / "tests/fixtures/flux-tiny";
  const fs::path fixture = testing::source_dir() / "tests/fixtures/flux-tiny-kohya";
  expect_both_modes_match<FluxPipeline>(
      tiny, fixture, tiny.parent_path() / "flux-tiny-lora/lora_diffusers.safetensors",
      fixture / "b_kohya.safetensors", testing::flux_fixture_input(reference_request(tiny)));
}

// LoRAs that change FLUX's CLIP text encoder too (FluxLoraLoaderMixin applies them to the
// transformer and the text encoder): a diffusers file with both components and a kohya file
// with lora_unet_ and lora_te1_ keys (transformers' "text_model." prefix, which the checkpoint
// lacks).
TEST(ImageLora, FluxTextEncoderLorasMatchDiffusers) {
  const fs::path tiny = testing::source_dir() / "tests/fixtures/flux-tiny";
  const fs::path fixture = testing::source_dir() / "tests/fixtures/flux-tiny-text-encoder-lora";
  const fs::path a = fixture / "a_diffusers.safetensors", b = fixture / "b_kohya.safetensors";
  const ModelIndex index = index_with(tiny / "model", a, b, lora::LoraMode::Auto);
  EXPECT_EQ(index.component("text_encoder").loras.size(), 2u);
  EXPECT_TRUE(index.component("text_encoder_2").loras.empty());
  expect_both_modes_match<FluxPipeline>(tiny, fixture, a, b,
                                        testing::flux_fixture_input(reference_request(tiny)));
}

// XLabs' FLUX layout (their attention processors' LoRAs, fused q/k/v split by rows, no alpha) at
// 0.8, as diffusers converts and runs it.
TEST(ImageLora, FluxXlabsLayoutMatchesDiffusers) {
  const fs::path tiny = testing::source_dir() / "tests/fixtures/flux-tiny";
  const fs::path fixture = testing::source_dir() / "tests/fixtures/flux-tiny-xlabs-lora";
  const SafetensorsFile reference = SafetensorsFile::open(fixture / "reference.safetensors");
  FluxGenerationInput input = testing::flux_fixture_input(reference_request(tiny));
  input.initial_latents =
      SafetensorsFile::open(tiny / "reference/reference.safetensors").tensor("pipeline.noise");
  for (const lora::LoraMode mode : kModes) {
    SCOPED_TRACE(mode_name(mode));
    ModelIndex index = load_model_index(tiny / "model");
    attach_loras(index, {{fixture / "lora_xlabs.safetensors", 0.8}}, mode);
    const FluxGenerationOutput output =
        FluxPipeline(index).generate(input, /*keep_step_latents=*/true);
    ASSERT_EQ(output.latents_after_step.size(), 4u);
    for (int k = 0; k < 4; ++k)
      EXPECT_LT(
          testing::relative_error(output.latents_after_step[size_t(k)],
                                  reference.tensor("xlabs.latents_after_step" + std::to_string(k))),
          1e-4)
          << "step " << k;
    EXPECT_LT(testing::max_abs_diff(output.frames, reference.tensor("xlabs.image")), 1e-3);
  }
}

// `mmgen generate --lora-path A --lora-scale 0.6 --lora-path B --lora-scale 1.3` on each
// pipeline's tiny folder: the LoRAs change the output (against the same seed without them), and
// the runtime mode gives the merged output (the pipeline tests above hold both against
// diffusers).
TEST(ImageLora, TheCommandLineAppliesTwoLorasOnEveryPipeline) {
  MMGEN_REQUIRE_SHARED();
  const fs::path fixtures = testing::source_dir() / "tests/fixtures";
  const fs::path wan = fixtures / "wan-tiny-lora", zimage = fixtures / "zimage-tiny-lora",
                 qwen = fixtures / "qwenimage-tiny-lora", flux = fixtures / "flux-tiny-kohya";
  const struct {
    const char* name;
    fs::path model, a, b;
    const char* size;
  } cases[] = {
      {"wan", testing::shared_dir() / "fixtures/wan-tiny/model", wan / "a_diffusers.safetensors",
       wan / "b_original.safetensors", "--height 32 --width 48 --num-frames 5"},
      {"zimage", testing::shared_dir() / "fixtures/zimage-tiny/model",
       zimage / "a_diffusers.safetensors", zimage / "b_original.safetensors",
       "--height 32 --width 48"},
      {"qwenimage", fixtures / "qwenimage-tiny/model", qwen / "a_diffusers.safetensors",
       qwen / "b_kohya.safetensors", "--height 32 --width 48"},
      {"flux", fixtures / "flux-tiny/model", fixtures / "flux-tiny-lora/lora_diffusers.safetensors",
       flux / "b_kohya.safetensors", "--height 32 --width 48"},
  };
  const fs::path out = testing::scratch_dir("image_lora_cli");
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string base = testing::mmgen_binary().string() + " generate --quiet --model-path " +
                             c.model.string() + " --prompt fox " + c.size +
                             " --num-inference-steps 2 --seed 7 --output-format npy --overwrite "
                             "--output-path " +
                             out.string() + " --output-file-name ";
    const std::string loras = " --lora-path " + c.a.string() + " --lora-scale 0.6 --lora-path " +
                              c.b.string() + " --lora-scale 1.3";
    const std::string name = c.name;
    for (const auto& [file, flags] :
         {std::pair{name + "_none", std::string()}, std::pair{name + "_merged", loras},
          std::pair{name + "_runtime", loras + " --lora-mode runtime"}}) {
      const auto result = testing::run_command(base + file + flags);
      ASSERT_EQ(result.exit_code, 0) << result.err;
    }
    const Tensor none = read_npy(out / (name + "_none.npy"));
    const Tensor merged = read_npy(out / (name + "_merged.npy"));
    const Tensor runtime = read_npy(out / (name + "_runtime.npy"));
    EXPECT_GT(testing::max_abs_diff(merged, none), 1e-2);
    EXPECT_LT(testing::max_abs_diff(runtime, merged), 1e-4);
  }
}

}  // namespace
}  // namespace mmgen
