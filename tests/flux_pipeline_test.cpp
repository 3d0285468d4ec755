// FluxPipeline against diffusers on the flux-tiny fixture (tests/fixtures/flux-tiny, made by
// tests/fixtures/make_flux_tiny.py): the schedule, the two encoders as the pipeline calls them,
// the latents after every step and the image from given noise, from seed 42, with true CFG, and
// through the executable.
#include "pipeline/flux/flux_pipeline.h"

#include <gtest/gtest.h>

#include <memory>
#include <nlohmann/json.hpp>

#include "core/file.h"
#include "core/npy.h"
#include "core/safetensors.h"
#include "pipeline/image_schedule.h"
#include "pipeline/model_index.h"
#include "tests/test_support.h"

namespace mmgen {
namespace {

fs::path fixture() {
  return testing::source_dir() / "tests" / "fixtures" / "flux-tiny";
}

class FluxPipelineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    reference_ = std::make_unique<SafetensorsFile>(
        SafetensorsFile::open(fixture() / "reference/reference.safetensors"));
    settings_ = nlohmann::json::parse(read_text_file(fixture() / "reference/reference.json"));
    index_ = std::make_unique<ModelIndex>(load_model_index(fixture() / "model"));
  }

  // reference.json's `pipeline` request: 32x48, 4 steps, guidance 3.5, 32 T5 tokens.
  FluxGenerationInput fixture_input() const {
    return testing::flux_fixture_input(settings_["pipeline"]);
  }

  const FluxPipeline& pipeline() {
    if (!pipeline_) pipeline_ = std::make_unique<FluxPipeline>(*index_);
    return *pipeline_;
  }

  double image_error(const Tensor& frames, const std::string& name) const {
    const Tensor expected = reference_->tensor(name);  // [1, H, W, 3]
    EXPECT_EQ(shape_string(frames.shape()), shape_string(expected.shape()));
    return testing::max_abs_diff(frames, expected);
  }

  std::unique_ptr<SafetensorsFile> reference_;
  nlohmann::json settings_;
  std::unique_ptr<ModelIndex> index_;
  std::unique_ptr<FluxPipeline> pipeline_;
};

TEST_F(FluxPipelineTest, ScheduleMatchesDiffusers) {
  auto scheduler =
      make_image_scheduler(index_->component("scheduler").class_name, index_->config("scheduler"),
                           std::nullopt, numpy_linspace_sigmas(4), 16, 24);
  const Tensor timesteps = reference_->tensor("scheduler.timesteps");
  const Tensor sigmas = reference_->tensor("scheduler.sigmas");
  ASSERT_EQ(scheduler->timesteps().size(), size_t(timesteps.numel()));
  ASSERT_EQ(scheduler->sigmas().size(), size_t(sigmas.numel()));
  for (int64_t i = 0; i < timesteps.numel(); ++i)
    EXPECT_FLOAT_EQ(float(scheduler->timesteps()[size_t(i)]), timesteps.data<float>()[i]) << i;
  for (int64_t i = 0; i < sigmas.numel(); ++i)
    EXPECT_FLOAT_EQ(float(scheduler->sigmas()[size_t(i)]), sigmas.data<float>()[i]) << i;
}

TEST_F(FluxPipelineTest, PackingIsDiffusersLayoutAndUnpacks) {
  // Token (i, j) channel 4c + 2dy + dx holds latent (c, 2i + dy, 2j + dx).
  Tensor latents = Tensor::empty({1, 3, 4, 6});
  for (int64_t k = 0; k < latents.numel(); ++k) latents.data<float>()[k] = float(k);
  const Tensor packed = pack_latents_2x2(latents);
  ASSERT_EQ(shape_string(packed.shape()), shape_string({1, 6, 12}));
  EXPECT_EQ(packed.item_f32({0, 4, 2 * 4 + 1 * 2 + 0}), latents.item_f32({0, 2, 3, 2}));
  EXPECT_EQ(testing::max_abs_diff(unpack_latents_2x2(packed, 3, 4, 6), latents), 0.0);
}

TEST_F(FluxPipelineTest, EncodesThePromptAsThePipeline) {
  const FluxPromptEmbedding embedding =
      pipeline().encode_prompt(settings_["pipeline"]["prompt"], 32);
  const double text = testing::relative_error(
      embedding.text, reference_->tensor("encode.prompt_embeds").select(0, 0));
  const double pooled =
      testing::relative_error(embedding.pooled, reference_->tensor("encode.pooled").view({-1}));
  std::printf("FLUX encode: T5 %.3g, CLIP pooled %.3g\n", text, pooled);
  EXPECT_LT(text, 1e-5);
  EXPECT_LT(pooled, 1e-5);
}

TEST_F(FluxPipelineTest, LatentsAfterEveryStepAndTheImageMatchDiffusers) {
  FluxGenerationInput input = fixture_input();
  input.initial_latents = reference_->tensor("pipeline.noise");
  const FluxGenerationOutput output = pipeline().generate(input, /*keep_step_latents=*/true);
  ASSERT_EQ(output.latents_after_step.size(), 4u);
  for (size_t k = 0; k < 4; ++k) {
    const double error = testing::relative_error(
        output.latents_after_step[k],
        reference_->tensor("pipeline.latents_after_step" + std::to_string(k)));
    std::printf("latents after step %zu: %.3g\n", k, error);
    EXPECT_LT(error, 1e-4) << k;
  }
  const double image = image_error(output.frames, "pipeline.image");
  std::printf("image: max abs diff %.3g\n", image);
  EXPECT_LT(image, 1e-3);
}

TEST_F(FluxPipelineTest, SeedDrawsTorchNoise) {
  FluxGenerationInput input = fixture_input();
  input.seed = 42;
  EXPECT_LT(image_error(pipeline().generate(input).frames, "pipeline.image_seed42"), 1e-3);
}

TEST_F(FluxPipelineTest, TrueCfgWithANegativePrompt) {
  FluxGenerationInput input = fixture_input();
  input.initial_latents = reference_->tensor("pipeline.noise");
  input.negative_prompt = settings_["pipeline_true_cfg"]["negative_prompt"];
  input.true_cfg_scale = settings_["pipeline_true_cfg"]["true_cfg_scale"];
  const double error = image_error(pipeline().generate(input).frames, "pipeline.image_true_cfg");
  std::printf("true CFG image: max abs diff %.3g\n", error);
  EXPECT_LT(error, 1e-3);
}

TEST_F(FluxPipelineTest, CommandLineMatchesTheSeededImage) {
  const auto& p = settings_["pipeline"];
  const fs::path out = testing::scratch_dir("flux-cli");
  const auto result = testing::run_command(
      testing::mmgen_binary().string() + " generate --model-path " +
      (fixture() / "model").string() + " --prompt '" + p["prompt"].get<std::string>() +
      "' --height 32 --width 48 --num-inference-steps 4 --guidance-scale 3.5 "
      "--max-sequence-length 32 --seed 42 --output-format npy --output-file-name image "
      "--output-path " +
      out.string());
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const Tensor image = read_npy(out / "image.npy");
  const Tensor expected = reference_->tensor("pipeline.image_seed42").select(0, 0);
  EXPECT_LT(testing::max_abs_diff(image.dim() == 4 ? image.select(0, 0) : image, expected), 1e-3);
}

}  // namespace
}  // namespace mmgen
