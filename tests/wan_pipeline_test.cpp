// The whole Wan pipeline against diffusers' own run on the wan-tiny fixture.
#include "pipeline/wan/wan_pipeline.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <nlohmann/json.hpp>

#include "core/file.h"
#include "core/npy.h"
#include "core/safetensors.h"
#include "pipeline/model_index.h"
#include "tests/test_support.h"

namespace mmgen {
namespace {

fs::path fixture() {
  return testing::shared_dir() / "fixtures/wan-tiny";
}

class WanPipelineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (testing::shared_dir().empty())
      GTEST_SKIP() << "../shared not found; reference check skipped";
    reference_ = std::make_unique<SafetensorsFile>(
        SafetensorsFile::open(fixture() / "reference/reference.safetensors"));
    settings_ = nlohmann::json::parse(read_text_file(fixture() / "reference/reference.json"));
    pipeline_ = std::make_unique<WanPipeline>(load_model_index(fixture() / "model"));
  }

  WanGenerationInput fixture_input() const {
    return testing::wan_fixture_input(settings_["pipeline"]);
  }

  std::unique_ptr<SafetensorsFile> reference_;
  nlohmann::json settings_;
  std::unique_ptr<WanPipeline> pipeline_;
};

TEST_F(WanPipelineTest, PromptEmbeddingsMatchDiffusers) {
  // text_encoder.prompt{k}: prompt k cleaned, tokenized to 24, encoded with the mask, zero-filled.
  for (int k = 0; k < 6; ++k) {
    const std::string prompt = settings_["prompts"][size_t(k)];
    Tensor ours = pipeline_->encode_prompt(prompt, 24);
    Tensor expected = reference_->tensor("text_encoder.prompt" + std::to_string(k));
    EXPECT_LT(testing::relative_error(ours, expected), 1e-5) << "prompt " << k << ": " << prompt;
  }
}

TEST_F(WanPipelineTest, GivenNoiseReproducesEveryStepAndTheVideo) {
  WanGenerationInput input = fixture_input();
  input.initial_latents = reference_->tensor("pipeline.noise").clone();
  WanGenerationOutput output = pipeline_->generate(input, /*keep_step_latents=*/true);
  ASSERT_EQ(output.latents_after_step.size(), 4u);
  for (int k = 0; k < 4; ++k) {
    double error = testing::relative_error(
        output.latents_after_step[size_t(k)],
        reference_->tensor("pipeline.latents_after_step" + std::to_string(k)));
    EXPECT_LT(error, 1e-4) << "step " << k;
  }
  Tensor video = reference_->tensor("pipeline.video");
  EXPECT_EQ(shape_string(output.frames.shape()), shape_string(video.shape()));
  EXPECT_LT(testing::max_abs_diff(output.frames, video), 1e-3);
}

// The same run with each dense DiT backend chosen explicitly (--attention-backend NAME): both match
// diffusers within the same tolerances.
TEST_F(WanPipelineTest, EachDenseAttentionBackendReproducesEveryStep) {
  for (const char* backend : {"fa", "torch_sdpa"}) {
    SCOPED_TRACE(backend);
    Request request;
    request.attention_backend = backend;
    request.num_inference_steps = settings_["pipeline"]["num_inference_steps"];
    const ModelIndex index = load_model_index(fixture() / "model");
    const WanPipeline pipeline(index, plan_attention(index, request));
    ASSERT_EQ(pipeline.attention_plan().main_backend, backend);
    WanGenerationInput input = fixture_input();
    input.initial_latents = reference_->tensor("pipeline.noise").clone();
    WanGenerationOutput output = pipeline.generate(input, /*keep_step_latents=*/true);
    ASSERT_EQ(output.latents_after_step.size(), 4u);
    for (int k = 0; k < 4; ++k) {
      double error = testing::relative_error(
          output.latents_after_step[size_t(k)],
          reference_->tensor("pipeline.latents_after_step" + std::to_string(k)));
      EXPECT_LT(error, 1e-4) << "step " << k;
      char text[32];
      std::snprintf(text, sizeof text, "%.3g", error);
      RecordProperty(std::string(backend) + "_step" + std::to_string(k), text);
    }
    EXPECT_LT(testing::max_abs_diff(output.frames, reference_->tensor("pipeline.video")), 1e-3);
  }
}

TEST_F(WanPipelineTest, SeedReproducesDiffusersNoise) {
  WanGenerationInput input = fixture_input();
  input.seed = settings_["pipeline"]["seed_for_video_seed42"];
  WanGenerationOutput output = pipeline_->generate(input);
  EXPECT_LT(testing::max_abs_diff(output.frames, reference_->tensor("pipeline.video_seed42")),
            1e-3);
}

TEST_F(WanPipelineTest, CommandLineWritesTheSameNumbers) {
  fs::path out = testing::scratch_dir("cli-npy");
  WanGenerationInput input = fixture_input();
  input.seed = settings_["pipeline"]["seed_for_video_seed42"];
  const std::string command =
      testing::mmgen_binary().string() + " generate --model-path " +
      (fixture() / "model").string() + " --prompt '" + input.prompt + "' --negative-prompt '" +
      input.negative_prompt + "' --height " + std::to_string(input.height) + " --width " +
      std::to_string(input.width) + " --num-frames " + std::to_string(input.num_frames) +
      " --num-inference-steps " + std::to_string(input.num_inference_steps) + " --guidance-scale " +
      std::to_string(input.guidance_scale) + " --max-sequence-length " +
      std::to_string(input.max_sequence_length) + " --seed " + std::to_string(input.seed) +
      " --output-format npy --output-file-name video --output-path " + out.string();
  auto result = testing::run_command(command);
  ASSERT_EQ(result.exit_code, 0) << result.err;
  Tensor frames = read_npy(out / "video.npy");
  EXPECT_LT(testing::max_abs_diff(frames, reference_->tensor("pipeline.video_seed42")), 1e-3);
  // The library call for the same request (same default attention plan) gives the same numbers.
  const Tensor library = pipeline_->generate(input).frames;
  EXPECT_EQ(shape_string(frames.shape()), shape_string(library.shape()));
  EXPECT_LT(testing::max_abs_diff(frames, library), 1e-6);
  auto sidecar = nlohmann::json::parse(read_text_file(out / "video.npy.json"));
  EXPECT_EQ(sidecar["seed"], input.seed);
  EXPECT_EQ(sidecar["prompt"], input.prompt);
  // The resolved attention backends travel with the output, as --dry-run shows them.
  EXPECT_EQ(sidecar["attention_backends"]["transformer"]["backend"],
            pipeline_->attention_plan().main_backend);
  EXPECT_EQ(sidecar["attention_backends"]["transformer"]["source"], "auto");
}

}  // namespace
}  // namespace mmgen
