// The whole Z-Image pipeline against diffusers' own run on the zimage-tiny fixture: the schedule,
// every step's latents and the image from given noise, from a seed, without guidance, with each
// paged text-encoder backend and each dense transformer backend, and through the executable.
#include "pipeline/zimage/zimage_pipeline.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>

#include "core/error.h"
#include "core/file.h"
#include "core/npy.h"
#include "core/safetensors.h"
#include "models/text_encoders/qwen3_prompt_embedding.h"
#include "pipeline/attention_plan.h"
#include "pipeline/image_schedule.h"
#include "pipeline/model_index.h"
#include "pipeline/zimage/zimage_guidance.h"
#include "pipeline/zimage/zimage_schedule.h"
#include "tests/test_support.h"

namespace mmgen {
namespace {

fs::path fixture() {
  return testing::shared_dir() / "fixtures/zimage-tiny";
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

class ZImagePipelineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    MMGEN_REQUIRE_SHARED();
    reference_ = std::make_unique<SafetensorsFile>(
        SafetensorsFile::open(fixture() / "reference/reference.safetensors"));
    settings_ = nlohmann::json::parse(read_text_file(fixture() / "reference/reference.json"));
    index_ = std::make_unique<ModelIndex>(load_model_index(fixture() / "model"));
  }

  // reference.json's `pipeline` request: 32x48, 4 steps, guidance 4, a negative prompt, 48 tokens.
  ZImageGenerationInput fixture_input() const {
    return testing::zimage_fixture_input(settings_["pipeline"]);
  }

  // A pipeline planned with `component_backends` ("text_encoder=triton"), as the CLI's
  // --component-attention-backends does it.
  std::unique_ptr<ZImagePipeline> pipeline_with(const std::string& component_backends) const {
    Request request;
    request.component_attention_backends = component_backends;
    return std::make_unique<ZImagePipeline>(*index_, plan_attention(*index_, request));
  }

  // `mmgen generate` of reference.json's request with seed 42 (pipeline.image_seed42).
  std::string fixture_command() const {
    const ZImageGenerationInput input = fixture_input();
    return testing::mmgen_binary().string() + " generate --model-path " +
           (fixture() / "model").string() + " --prompt '" + input.prompt + "' --negative-prompt '" +
           input.negative_prompt + "' --height " + std::to_string(input.height) + " --width " +
           std::to_string(input.width) + " --num-inference-steps " +
           std::to_string(input.num_inference_steps) +
           " --guidance-scale 4 --max-sequence-length " +
           std::to_string(input.max_sequence_length) + " --seed 42";
  }

  // The fixture image [H, W, 3] against frames [1, H, W, 3].
  double image_error(const Tensor& frames, const std::string& name) const {
    const Tensor expected = reference_->tensor(name);
    EXPECT_EQ(shape_string(frames.shape()),
              shape_string({1, expected.size(0), expected.size(1), expected.size(2)}));
    return testing::max_abs_diff(frames.select(0, 0), expected);
  }

  std::unique_ptr<SafetensorsFile> reference_;
  nlohmann::json settings_;
  std::unique_ptr<ModelIndex> index_;
};

TEST_F(ZImagePipelineTest, ScheduleMatchesDiffusers) {
  const nlohmann::json& config = index_->config("scheduler");
  // 32x48 pixels: a 16x24 latent, 8x12 patches.
  EXPECT_NEAR(image_mu(config, 16, 24), settings_["scheduler.mu"].get<double>(), 1e-12);
  auto scheduler = make_image_scheduler(index_->component("scheduler").class_name, config,
                                        std::nullopt, zimage_default_sigmas(4), 16, 24);
  const Tensor timesteps = reference_->tensor("scheduler.timesteps");
  const Tensor sigmas = reference_->tensor("scheduler.sigmas");
  ASSERT_EQ(scheduler->timesteps().size(), size_t(timesteps.numel()));
  ASSERT_EQ(scheduler->sigmas().size(), size_t(sigmas.numel()));
  for (int64_t i = 0; i < timesteps.numel(); ++i)
    EXPECT_NEAR(scheduler->timesteps()[size_t(i)], timesteps.data<float>()[i], 1e-6) << i;
  for (int64_t i = 0; i < sigmas.numel(); ++i)
    EXPECT_NEAR(scheduler->sigmas()[size_t(i)], sigmas.data<float>()[i], 1e-6) << i;
}

TEST(ZImageSchedule, DefaultSigmasAreTorchLinspace) {
  // torch.linspace(1.0, 1 / 4, 4) and (1.0, 1 / 9, 9) in float32.
  const std::vector<double> four = zimage_default_sigmas(4);
  EXPECT_EQ(four, (std::vector<double>{1.0, 0.75, 0.5, 0.25}));
  const std::vector<double> nine = zimage_default_sigmas(9);
  ASSERT_EQ(nine.size(), 9u);
  EXPECT_EQ(nine.front(), 1.0);
  EXPECT_EQ(nine.back(), double(float(1.0 / 9.0)));
  for (size_t i = 1; i < nine.size(); ++i) EXPECT_LT(nine[i], nine[i - 1]);
  EXPECT_EQ(zimage_default_sigmas(1), std::vector<double>{1.0});
}

TEST(ZImageGuidance, PushesAwayFromTheNegativeAndTruncates) {
  const Tensor pos = Tensor::from_vector({2}, std::vector<float>{1.0f, 2.0f});
  const Tensor neg = Tensor::from_vector({2}, std::vector<float>{0.5f, 3.0f});
  const Tensor guided = guided_prediction(pos, neg, ZImageGuidance{.scale = 4.0}.policy(4.0));
  EXPECT_FLOAT_EQ(guided.data<float>()[0], 1.0f + 4.0f * 0.5f);
  EXPECT_FLOAT_EQ(guided.data<float>()[1], 2.0f - 4.0f);
  // cfg_normalization 1: the guided norm is capped at the conditional one's.
  const Tensor capped =
      guided_prediction(pos, neg, ZImageGuidance{.scale = 4.0, .normalization = 1.0}.policy(4.0));
  const double norm = std::hypot(capped.data<float>()[0], capped.data<float>()[1]);
  EXPECT_NEAR(norm, std::hypot(1.0, 2.0), 1e-5);
  ZImageGuidance guidance{.scale = 4.0, .truncation = 0.5};
  EXPECT_EQ(guidance.scale_at(0.25f), 4.0);
  EXPECT_EQ(guidance.scale_at(0.75f), 0.0);
  EXPECT_EQ(ZImageGuidance{.scale = 4.0}.scale_at(0.99f), 4.0);  // truncation 1: never
  EXPECT_FALSE(ZImageGuidance{.scale = 0.0}.enabled());
  EXPECT_TRUE(ZImageGuidance{.scale = 0.5}.enabled());  // Z-Image guides above 0, not above 1
}

TEST_F(ZImagePipelineTest, GivenNoiseReproducesEveryStepAndTheImage) {
  const ZImagePipeline pipeline(*index_);
  ZImageGenerationInput input = fixture_input();
  input.initial_latents = reference_->tensor("pipeline.noise").clone();
  const ZImageGenerationOutput output = pipeline.generate(input, /*keep_step_latents=*/true);
  ASSERT_EQ(output.latents_after_step.size(), 4u);
  for (int k = 0; k < 4; ++k) {
    const double error = testing::relative_error(
        output.latents_after_step[size_t(k)],
        reference_->tensor("pipeline.latents_after_step" + std::to_string(k)));
    std::printf("zimage-tiny latents after step %d: relative error %.3g\n", k, error);
    EXPECT_LT(error, 1e-4) << "step " << k;
  }
  const double error = image_error(output.frames, "pipeline.image");
  std::printf("zimage-tiny pipeline.image: max abs diff %.3g\n", error);
  EXPECT_LT(error, 1e-3);
}

TEST_F(ZImagePipelineTest, SeedReproducesDiffusersNoise) {
  const ZImagePipeline pipeline(*index_);
  ZImageGenerationInput input = fixture_input();
  input.seed = 42;
  const double error = image_error(pipeline.generate(input).frames, "pipeline.image_seed42");
  std::printf("zimage-tiny pipeline.image_seed42: max abs diff %.3g\n", error);
  EXPECT_LT(error, 1e-3);
}

TEST_F(ZImagePipelineTest, GuidanceZeroRunsTheConditionalPredictionOnly) {
  const ZImagePipeline pipeline(*index_);
  ZImageGenerationInput input = fixture_input();
  input.initial_latents = reference_->tensor("pipeline.noise").clone();
  input.guidance.scale = 0.0;
  input.negative_prompt = "";
  const double error = image_error(pipeline.generate(input).frames, "pipeline.image_guidance0");
  std::printf("zimage-tiny pipeline.image_guidance0: max abs diff %.3g\n", error);
  EXPECT_LT(error, 1e-3);
  // And differs from the guided image, so the test can tell the two apart.
  EXPECT_GT(testing::max_abs_diff(reference_->tensor("pipeline.image_guidance0"),
                                  reference_->tensor("pipeline.image")),
            1e-2);
}

// The text encoder through every paged backend this CPU runs: the same image, and the same
// numbers as each other.
TEST_F(ZImagePipelineTest, EveryPagedTextEncoderBackendGivesTheSameImage) {
  ZImageGenerationInput input = fixture_input();
  input.initial_latents = reference_->tensor("pipeline.noise").clone();
  Tensor first;
  for (const char* backend : {"torch_native", "triton", "flashinfer", "fa3", "flex_attention"}) {
    const auto pipeline = pipeline_with(std::string("text_encoder=") + backend);
    EXPECT_EQ(pipeline->text_encoder_backend(), backend);
    const Tensor frames = pipeline->generate(input).frames;
    const double error = image_error(frames, "pipeline.image");
    std::printf("text encoder %s: pipeline.image max abs diff %.3g\n", backend, error);
    EXPECT_LT(error, 1e-3) << backend;
    if (!first.defined()) {
      first = frames;
    } else {
      EXPECT_LT(testing::max_abs_diff(frames, first), 1e-5) << backend << " vs torch_native";
    }
  }
}

// A text encoder whose config has dual chunk attention (the 1M-context Qwen configs) is planned
// on dual_chunk_flash_attn, the only design for it; with chunks longer than the prompt it is the
// plain encoder, so the image is the fixture's.
TEST_F(ZImagePipelineTest, ADualChunkTextEncoderRunsOnTheDualChunkDesign) {
  const fs::path model = testing::scratch_dir("zimage-dual-chunk") / "model";
  fs::remove_all(model);
  fs::copy(fixture() / "model", model, fs::copy_options::recursive);
  const fs::path config_path = model / "text_encoder/config.json";
  nlohmann::json config = nlohmann::json::parse(read_text_file(config_path));
  config["dual_chunk_attention_config"] = {{"chunk_size", 4096}, {"local_size", 512}};
  std::ofstream(config_path) << config.dump(2);
  const ModelIndex index = load_model_index(model);
  const AttentionPlan plan = plan_attention(index, Request{});
  EXPECT_EQ(plan.components.at("text_encoder").primary().backend, "dual_chunk_flash_attn");
  Request triton;
  triton.component_attention_backends = "text_encoder=triton";
  const std::string message = testing::error_message([&] { plan_attention(index, triton); });
  EXPECT_TRUE(contains(message, "triton runs only models with plain attention")) << message;
  ZImageGenerationInput input = fixture_input();
  input.initial_latents = reference_->tensor("pipeline.noise").clone();
  ZImagePipeline pipeline(index, plan);
  EXPECT_EQ(pipeline.text_encoder_backend(), "dual_chunk_flash_attn");
  const double error = image_error(pipeline.generate(input).frames, "pipeline.image");
  std::printf("dual chunk text encoder: pipeline.image max abs diff %.3g\n", error);
  EXPECT_LT(error, 1e-3);
}

TEST_F(ZImagePipelineTest, EachDenseTransformerBackendReproducesTheImage) {
  ZImageGenerationInput input = fixture_input();
  input.initial_latents = reference_->tensor("pipeline.noise").clone();
  for (const char* backend : {"fa", "torch_sdpa"}) {
    const auto pipeline = pipeline_with(std::string("transformer=") + backend);
    EXPECT_EQ(pipeline->attention_plan().main_backend, backend);
    const double error = image_error(pipeline->generate(input).frames, "pipeline.image");
    std::printf("transformer %s: pipeline.image max abs diff %.3g\n", backend, error);
    EXPECT_LT(error, 1e-3) << backend;
  }
}

TEST_F(ZImagePipelineTest, PlanHasNoCrossAttentionAndRefusesSparseBackends) {
  const AttentionPlan plan = plan_attention(*index_, Request{});
  const auto& layers = plan.components.at("transformer").layers;
  ASSERT_EQ(layers.size(), 1u);
  EXPECT_EQ(layers[0].kind, attention::LayerKind::SelfAttention);
  for (const char* backend : {"video_sparse_attn", "sliding_tile_attn", "sla_attn"}) {
    Request request;
    request.component_attention_backends = std::string("transformer=") + backend;
    const std::string message = testing::error_message([&] { plan_attention(*index_, request); });
    EXPECT_TRUE(contains(message, "Z-Image")) << message;
    EXPECT_TRUE(contains(message, "choose a dense backend")) << message;
    EXPECT_EQ(std::count(message.begin(), message.end(), '\n'), 0) << message;
  }
}

TEST_F(ZImagePipelineTest, CommandLineWritesTheSameNumbers) {
  const fs::path out = testing::scratch_dir("zimage-cli-npy");
  const auto result = testing::run_command(
      fixture_command() + " --output-format npy --output-file-name image --output-path " +
      out.string());
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const double error = image_error(read_npy(out / "image.npy"), "pipeline.image_seed42");
  std::printf("mmgen generate (seed 42): max abs diff %.3g\n", error);
  EXPECT_LT(error, 1e-3);
  const auto sidecar = nlohmann::json::parse(read_text_file(out / "image.npy.json"));
  EXPECT_EQ(sidecar["seed"], 42);
  EXPECT_EQ(sidecar["prompt"], fixture_input().prompt);
}

// --vae-tiling through the executable on the fixture request (32x48: 16x24 latents, f = 2). A
// 64-pixel tile covers the image: the untiled picture, bit for bit. 16-pixel tiles overlapping by
// 4 (3 x 4 tiles of 8 latent pixels, 8-pixel halo): each tile's GroupNorms see its region only
// (models/vae/autoencoder_kl_tiled_decode.h): measured 0.023 max abs from diffusers' untiled
// image in [0, 1] (the untiled run: 7.8e-7); the bound is 0.04.
TEST_F(ZImagePipelineTest, CommandLineDecodesInTiles) {
  const std::string tiled = fixture_command() + " --vae-tiling ";
  const auto plan =
      testing::run_command(tiled + "--vae-tile-size 16 --vae-tile-overlap 4 --dry-run");
  ASSERT_EQ(plan.exit_code, 0) << plan.err;
  const auto request = nlohmann::json::parse(plan.out)["request"];
  EXPECT_EQ(request["vae_tiling"], true);
  EXPECT_EQ(request["vae_tile_size"], 16);
  EXPECT_EQ(request["vae_tile_overlap"], 4);

  const fs::path out = testing::scratch_dir("zimage-cli-tiles");
  const std::string write = " --output-format npy --overwrite --output-path " + out.string();
  for (const std::string& run :
       {fixture_command() + " --output-file-name untiled",
        tiled + "--vae-tile-size 64 --vae-tile-overlap 8 --output-file-name one",
        tiled + "--vae-tile-size 16 --vae-tile-overlap 4 --output-file-name several"}) {
    const auto result = testing::run_command(run + write);
    ASSERT_EQ(result.exit_code, 0) << result.err;
    if (contains(run, "several")) {
      EXPECT_TRUE(contains(result.err, "decode: 12 tiles")) << result.err;
    }
  }
  const Tensor untiled = read_npy(out / "untiled.npy");
  EXPECT_EQ(testing::max_abs_diff(read_npy(out / "one.npy"), untiled), 0.0);
  const double several = image_error(read_npy(out / "several.npy"), "pipeline.image_seed42");
  std::printf(
      "--vae-tiling, 12 tiles, against diffusers' untiled image: max abs diff %.3g (untiled: "
      "%.3g)\n",
      several, image_error(untiled, "pipeline.image_seed42"));
  EXPECT_GT(testing::max_abs_diff(read_npy(out / "several.npy"), untiled), 0.0);
  EXPECT_LT(several, 0.04);
}

// `mmgen encode` writes the prompt's embedding (the chat template, hidden_states[-2] at the real
// tokens) and `generate --prompt-embeds` runs from it without the text encoder: the same image as
// --prompt. Without guidance bit for bit; with it within 1e-5, because --prompt encodes the
// negative prompt after the prompt, reusing the template's KV from the prefix cache (a different
// summation order: measured 8.6e-7), where `mmgen encode` encodes it alone.
TEST_F(ZImagePipelineTest, PromptEmbedsFromEncodeGiveTheSameImage) {
  const fs::path dir = testing::scratch_dir("zimage-prompt-embeds");
  const ZImageGenerationInput input = fixture_input();
  const std::string model = (fixture() / "model").string();
  const std::string length = " --max-sequence-length " + std::to_string(input.max_sequence_length);
  auto encode = [&](const std::string& prompt, const std::string& name) {
    const auto result = testing::run_command(
        testing::mmgen_binary().string() + " encode --model-path " + model + " --prompt '" +
        prompt + "'" + length + " --out " + (dir / name).string());
    ASSERT_EQ(result.exit_code, 0) << result.err;
  };
  encode(input.prompt, "prompt.safetensors");
  encode(input.negative_prompt, "negative.safetensors");
  auto generate = [&](const std::string& flags, const std::string& name) {
    const auto result = testing::run_command(
        testing::mmgen_binary().string() + " generate --model-path " + model + " --height " +
        std::to_string(input.height) + " --width " + std::to_string(input.width) +
        " --num-inference-steps " + std::to_string(input.num_inference_steps) + length +
        " --seed 42 --output-format npy --output-file-name " + name + " --output-path " +
        dir.string() + " " + flags);
    EXPECT_EQ(result.exit_code, 0) << result.err;
    return result;
  };
  const std::string prompt = " --prompt '" + input.prompt + "'";
  const std::string embeds = " --prompt-embeds " + (dir / "prompt.safetensors").string();
  const std::string negative_embeds =
      " --negative-prompt-embeds " + (dir / "negative.safetensors").string();

  generate("--guidance-scale 0" + prompt, "text0");
  // A negative embedding without guidance is read (and checked) but unused, and the log says so.
  const auto unguided = generate("--guidance-scale 0" + embeds + negative_embeds, "embeds0");
  EXPECT_TRUE(contains(unguided.err, "--negative-prompt-embeds: unused, guidance is off"))
      << unguided.err;
  EXPECT_EQ(testing::max_abs_diff(read_npy(dir / "embeds0.npy"), read_npy(dir / "text0.npy")), 0.0);

  generate("--guidance-scale 4" + prompt + " --negative-prompt '" + input.negative_prompt + "'",
           "text4");
  generate("--guidance-scale 4" + embeds + negative_embeds, "embeds4");
  const double error =
      testing::max_abs_diff(read_npy(dir / "embeds4.npy"), read_npy(dir / "text4.npy"));
  std::printf("--prompt-embeds vs --prompt, guidance 4: max abs diff %.3g\n", error);
  EXPECT_LT(error, 1e-5);
  EXPECT_LT(image_error(read_npy(dir / "embeds4.npy"), "pipeline.image_seed42"), 1e-3);
}

// An embedding of another width (Wan's UMT5, 32 wide, against this transformer's 64) is refused in
// one line that names the file, before any output is written.
TEST_F(ZImagePipelineTest, PromptEmbedsOfAnotherWidthAreRefusedInOneLine) {
  const fs::path dir = testing::scratch_dir("zimage-prompt-embeds-width");
  const fs::path wan = dir / "wan.safetensors";
  auto result = testing::run_command(testing::mmgen_binary().string() + " encode --model-path " +
                                     (testing::source_dir() / "examples/models/wan-tiny").string() +
                                     " --prompt fox --out " + wan.string());
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const std::string base = testing::mmgen_binary().string() + " generate --model-path " +
                           (fixture() / "model").string() +
                           " --height 32 --width 48 --num-inference-steps 1 --output-format npy "
                           "--quiet --output-path " +
                           (dir / "out").string();
  for (const std::string flag : {"--prompt-embeds", "--negative-prompt-embeds"}) {
    SCOPED_TRACE(flag);
    result = testing::run_command(base + " --prompt fox " + flag + " " + wan.string());
    EXPECT_NE(result.exit_code, 0);
    EXPECT_TRUE(contains(result.err, flag + " " + wan.string() +
                                         ": prompt_embeds.0 is [512, 32] but this transformer "
                                         "takes [tokens, 64]; encode the prompt with this model"))
        << result.err;
    EXPECT_EQ(std::count(result.err.begin(), result.err.end(), '\n'), 1) << result.err;
    EXPECT_FALSE(fs::exists(dir / "out") && !fs::is_empty(dir / "out"));
  }
}

// The prompts of one encode_prompts call share one prefix cache: every prompt after the first
// reuses the chat template's prefix (the ids all prompts start with), and each embedding is the
// one its prompt gets alone: the first bit for bit, the others within 1e-6 relative (the cached
// rows were computed in another prompt's forward).
TEST_F(ZImagePipelineTest, PromptsOfOneCallShareTheTemplatePrefix) {
  const std::vector<std::string> prompts = {"a red fox running through snow", "blurry, low quality",
                                            "Zebra at noon"};
  const int64_t length = 48;
  const fs::path tokenizer_folder = index_->component("tokenizer").path;
  const auto ids = text_encoders::z_image_prompt_ids(
      *tokenizers::Tokenizer::load(tokenizer_folder),
      tokenizers::ChatTemplate::load(tokenizer_folder), prompts, length);
  // The template's prefix: what the three prompts' ids start with.
  size_t prefix = 0;
  while (prefix < ids[0].size() && prefix < ids[1].size() && prefix < ids[2].size() &&
         ids[0][prefix] == ids[1][prefix] && ids[0][prefix] == ids[2][prefix])
    ++prefix;
  ASSERT_GT(prefix, 0u);
  ASSERT_TRUE(ids[1][prefix] != ids[0][prefix] && ids[2][prefix] != ids[1][prefix]);

  const ZImagePipeline pipeline(*index_);
  text_encoders::PrefixCacheReport report;
  const std::vector<Tensor> together = pipeline.encode_prompts(prompts, length, &report);
  EXPECT_EQ(report.prompts_hit, 2);
  EXPECT_EQ(report.hit_tokens, int64_t(2 * prefix));
  EXPECT_EQ(report.prompt_tokens, int64_t(ids[0].size() + ids[1].size() + ids[2].size()));
  double worst = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const Tensor alone = pipeline.encode_prompts({prompts[i]}, length)[0];
    ASSERT_EQ(together[i].shape(), alone.shape()) << i;
    if (i == 0) {
      EXPECT_EQ(testing::max_abs_diff(together[i], alone), 0.0);
    }
    const double error = testing::relative_error(together[i], alone);
    EXPECT_LT(error, 1e-6) << i;
    worst = std::max(worst, error);
  }
  std::printf("template prefix %zu tokens; together vs alone: worst relative error %.3g\n", prefix,
              worst);
}

// A --prompt-file-path batch encodes its prompts and the shared negative prompt ahead, in one call
// through one prefix cache; the log reports the hits, and each picture is the one its prompt gets
// alone within 1e-5.
TEST_F(ZImagePipelineTest, BatchEncodesThroughOnePrefixCacheAndReportsTheHits) {
  const fs::path dir = testing::scratch_dir("zimage-batch-prefix");
  const std::vector<std::string> prompts = {"a red fox running through snow", "Zebra at noon"};
  {
    std::ofstream file(dir / "prompts.txt");
    for (const auto& prompt : prompts) file << prompt << "\n";
  }
  const std::string base = testing::mmgen_binary().string() + " generate --model-path " +
                           (fixture() / "model").string() +
                           " --height 32 --width 48 --num-inference-steps 2 --guidance-scale 4 "
                           "--negative-prompt 'blurry, low quality' --max-sequence-length 48 "
                           "--seed 42 --output-format npy --output-path " +
                           dir.string();
  const auto batch =
      testing::run_command(base + " --prompt-file-path " + (dir / "prompts.txt").string() +
                           " --output-file-name batch.npy");
  ASSERT_EQ(batch.exit_code, 0) << batch.err;
  // Three prompts (two and the negative), the second and third hitting the template's prefix.
  EXPECT_TRUE(
      contains(batch.err, "encode: 3 prompt(s) through one prefix cache on the CPU, 2 hit(s) ("))
      << batch.err;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::string name = "alone_" + std::to_string(i);
    const auto alone = testing::run_command(base + " --prompt '" + prompts[i] +
                                            "' --output-file-name " + name + ".npy");
    ASSERT_EQ(alone.exit_code, 0) << alone.err;
    const double error = testing::max_abs_diff(
        read_npy(dir / ("batch_" + std::to_string(i) + ".npy")), read_npy(dir / (name + ".npy")));
    std::printf("batch vs alone, prompt %zu: max abs diff %.3g\n", i, error);
    EXPECT_LT(error, 1e-5) << i;
  }
}

TEST_F(ZImagePipelineTest, DryRunNamesThePipelineAndItsSizes) {
  const std::string model = (fixture() / "model").string();
  auto result = testing::run_command(testing::mmgen_binary().string() + " generate --model-path " +
                                     model + " --prompt fox --height 32 --width 48 --dry-run");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const auto plan = nlohmann::json::parse(result.out);
  EXPECT_EQ(plan["pipeline"], "ZImagePipeline");
  EXPECT_EQ(plan["latent_shape"], nlohmann::json({1, 16, 16, 24}));
  EXPECT_EQ(plan["request"]["height"], 32);
  EXPECT_EQ(plan["request"]["width"], 48);
  EXPECT_TRUE(plan["components"]["transformer"]["attention_layers"].contains("self_attention"));
  EXPECT_FALSE(plan["components"]["transformer"]["attention_layers"].contains("cross_attention"));
  // Without sizes and steps: configs/zimage.yaml's defaults (diffusers' call defaults). The tiny
  // transformer's RoPE tables stop at 128 pixels, so a copy with Z-Image's own axes_lens plans it
  // (a dry run reads configs only).
  const fs::path full = testing::scratch_dir("zimage-axes") / "model";
  fs::copy(fixture() / "model", full, fs::copy_options::recursive);
  nlohmann::json transformer =
      nlohmann::json::parse(read_text_file(full / "transformer/config.json"));
  transformer["axes_lens"] = {1536, 512, 512};
  testing::write_json_file(full / "transformer/config.json", transformer);
  result = testing::run_command(testing::mmgen_binary().string() + " generate --model-path " +
                                full.string() + " --prompt fox --dry-run");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const auto defaults = nlohmann::json::parse(result.out)["request"];
  EXPECT_EQ(defaults["height"], 1024);
  EXPECT_EQ(defaults["width"], 1024);
  EXPECT_EQ(defaults["num_inference_steps"], 50);
  EXPECT_EQ(defaults["guidance_scale"], 5.0);
  EXPECT_EQ(defaults["max_sequence_length"], 512);
  // inspect reads the same plan with a memory estimate.
  result = testing::run_command(testing::mmgen_binary().string() + " inspect --model-path " +
                                model + " --height 32 --width 48");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_TRUE(contains(result.out, "ZImagePipeline")) << result.out;
}

TEST_F(ZImagePipelineTest, RefusesWhatZImageCannotDoInOneLine) {
  const std::string base = testing::mmgen_binary().string() + " generate --model-path " +
                           (fixture() / "model").string() + " --prompt fox --dry-run ";
  // The tiny VAE has two levels (f = 2), so sizes must be multiples of 4.
  for (const auto& [flags, expected] : std::vector<std::pair<std::string, std::string>>{
           {"--height 30 --width 48", "Z-Image needs multiples of 4; try --width 48 --height 28"},
           {"--height 32 --width 48 --num-frames 5", "Z-Image makes still images"},
           // axes_lens [64, 32, 32] with 2x2 patches of f = 2: 128 pixels a side at most.
           {"--height 256 --width 48",
            "position tables reach 128x128 pixels; try --width 48 --height 128"},
           {"--height 32 --width 48 --attention-backend video_sparse_attn",
            "cannot run sparse attention"},
           {"--height 32 --width 48 --vae-tiling --vae-tile-size 15 --vae-tile-overlap 4",
            "--vae-tile-size 15 / --vae-tile-overlap 4: the VAE tiles its 2x smaller latents, so "
            "both must be multiples of 2"}}) {
    const auto result = testing::run_command(base + flags);
    EXPECT_NE(result.exit_code, 0) << flags;
    EXPECT_TRUE(contains(result.err, expected)) << flags << ": " << result.err;
    EXPECT_EQ(std::count(result.err.begin(), result.err.end(), '\n'), 1)
        << flags << ": " << result.err;
  }
}

// Peak resident memory of a generate run (its summary line) against `mmgen inspect --json`'s
// estimate for the same request: the estimate covers the peak without wild excess.
TEST_F(ZImagePipelineTest, MemoryEstimateCoversTheMeasuredPeak) {
  const std::string model = (fixture() / "model").string();
  const fs::path out = testing::scratch_dir("zimage-peak");
  for (const std::string flags : {" --height 128 --width 128",
                                  " --height 128 --width 128 "
                                  "--guidance-scale 0",
                                  " --height 128 --width 128 --vae-tiling --vae-tile-size 32 "
                                  "--vae-tile-overlap 8"}) {
    SCOPED_TRACE(flags);
    const auto measured = testing::measure_peak_and_inspect(model, flags, out);
    ASSERT_FALSE(measured.inspection.is_null());
    const double peak = measured.peak_mib;
    const double estimate = measured.inspection["memory"]["total_bytes"].get<double>() / (1 << 20);
    std::printf("%s: estimate %.0f MiB, measured peak %.0f MiB\n", flags.c_str(), estimate, peak);
    EXPECT_GE(estimate, peak * 0.95);
    EXPECT_LE(estimate, peak * 1.6);
  }
}

}  // namespace
}  // namespace mmgen
