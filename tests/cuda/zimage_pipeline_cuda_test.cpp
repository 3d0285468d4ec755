// The whole Z-Image pipeline on the GPU (text encoder on the GPU paged backends, transformer,
// VAE) against diffusers' zimage-tiny reference images: the given noise, noise drawn from seed 42,
// and guidance 0. bf16 products: the bound is a relative image error of 1e-2. The fixture
// folder is $MMGEN_FIXTURES (scripts/gpu.sh carries a copy) or ../shared/fixtures.
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/file.h"
#include "core/safetensors.h"
#include "cuda_test_support.h"
#include "pipeline/model_index.h"
#include "pipeline/zimage/zimage_pipeline.h"

using namespace mmgen;
using namespace mmgen::cuda_testing;
namespace fs = std::filesystem;

int main() try {
  const char* from_environment = std::getenv("MMGEN_FIXTURES");
  const fs::path tiny =
      (from_environment ? fs::path(from_environment) : fs::path(MMGEN_SHARED_DIR) / "fixtures") /
      "zimage-tiny";
  if (!fs::exists(tiny / "reference/reference.safetensors")) {
    std::printf("zimage_pipeline_cuda_test: no fixture at %s (set MMGEN_FIXTURES)\n", tiny.c_str());
    return 1;
  }
  const SafetensorsFile reference = SafetensorsFile::open(tiny / "reference/reference.safetensors");
  const nlohmann::json settings =
      nlohmann::json::parse(read_text_file(tiny / "reference/reference.json"))["pipeline"];
  const ModelIndex index = load_model_index(tiny / "model");
  const ZImagePipeline pipeline(index);
  const auto fixture_input = [&] {
    ZImageGenerationInput input;
    input.prompt = settings["prompt"];
    input.negative_prompt = settings["negative_prompt"];
    input.height = settings["height"];
    input.width = settings["width"];
    input.num_inference_steps = settings["num_inference_steps"];
    input.guidance.scale = settings["guidance_scale"];
    input.guidance.truncation = settings["cfg_truncation"];
    input.max_sequence_length = settings["max_sequence_length"];
    input.cuda = true;
    return input;
  };
  constexpr double kBound = 1e-2;
  {
    ZImageGenerationInput input = fixture_input();
    input.initial_latents = reference.tensor("pipeline.noise").clone();
    const ZImageGenerationOutput output = pipeline.generate(input, true);
    for (size_t k = 0; k < output.latents_after_step.size(); ++k) {
      const double error =
          relative_error(output.latents_after_step[k],
                         reference.tensor("pipeline.latents_after_step" + std::to_string(k)));
      std::printf("  latents after step %zu: relative error %.2e\n", k, error);
    }
    const double error = relative_error(output.frames, reference.tensor("pipeline.image"));
    expect(error < kBound,
           fmt::format("given noise, guidance 4: image relative error {:.2e} < {:.0e}", error,
                       kBound));
    expect(pipeline.text_encoder_backend() != "",
           "text encoder on the GPU runs " + pipeline.text_encoder_backend());
  }
  {
    ZImageGenerationInput input = fixture_input();
    input.seed = 42;
    const double error =
        relative_error(pipeline.generate(input).frames, reference.tensor("pipeline.image_seed42"));
    expect(error < kBound,
           fmt::format("seed 42: image relative error {:.2e} < {:.0e}", error, kBound));
  }
  {
    ZImageGenerationInput input = fixture_input();
    input.initial_latents = reference.tensor("pipeline.noise").clone();
    input.guidance.scale = 0.0;
    input.negative_prompt = "";
    const double error = relative_error(pipeline.generate(input).frames,
                                        reference.tensor("pipeline.image_guidance0"));
    expect(error < kBound,
           fmt::format("guidance 0: image relative error {:.2e} < {:.0e}", error, kBound));
  }
  {  // A prompt-file batch on the GPU: encode_ahead encodes the two prompts and the negative one
     // through one prefix cache on the GPU (the second and third hit the chat template's prefix),
     // and each picture is the one its prompt gets alone (the cached rows come from another
     // prompt's bf16 forward, so within bf16 rounding, not bit for bit).
    const std::vector<std::string> prompts = {"a red fox running through snow", "Zebra at noon"};
    Request request;
    request.negative_prompt = "blurry, low quality";
    request.height = 32;
    request.width = 48;
    request.num_inference_steps = 2;
    request.guidance_scale = 4;
    request.max_sequence_length = 48;
    request.seed = 42;
    request.device = "cuda";
    std::vector<Request> batch;
    for (const auto& prompt : prompts) {
      batch.push_back(request);
      batch.back().prompt = prompt;
    }
    pipeline.place(true);
    text_encoders::PrefixCacheReport report;
    pipeline.encode_prompts({prompts[0], prompts[1], request.negative_prompt},
                            request.max_sequence_length, &report);
    expect(report.prompts_hit == 2 && report.hit_tokens > 0,
           fmt::format("three prompts on the GPU through one prefix cache: {} hit(s), {} of {} "
                       "tokens reused",
                       report.prompts_hit, report.hit_tokens, report.prompt_tokens));
    const PipelineRunner runner = load_zimage_pipeline(index, pipeline.attention_plan());
    runner.encode_ahead(batch);
    for (size_t i = 0; i < batch.size(); ++i) {
      const Tensor together = runner(batch[i]);
      ZImageGenerationInput alone = zimage_input_from_request(batch[i], pipeline);
      const double error = relative_error(together, pipeline.generate(alone).frames);
      expect(error < 1e-3, fmt::format("batch prompt {} on the GPU against its run alone: "
                                       "relative error {:.2e} < 1e-3",
                                       i, error));
    }
  }
  {  // Back on the CPU after the GPU: the CPU's numbers again (float32, 1e-3 max abs in the CPU
     // test; here relative).
    ZImageGenerationInput input = fixture_input();
    input.initial_latents = reference.tensor("pipeline.noise").clone();
    input.cuda = false;
    const double error =
        relative_error(pipeline.generate(input).frames, reference.tensor("pipeline.image"));
    expect(error < 1e-5,
           fmt::format("the same pipeline back on the CPU: relative error {:.2e} < 1e-5", error));
  }
  return finish("zimage_pipeline_cuda_test");
} catch (const std::exception& error) {
  std::printf("zimage_pipeline_cuda_test: error: %s\n", error.what());
  return 1;
}
