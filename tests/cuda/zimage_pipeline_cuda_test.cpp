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
#include "pipeline/zimage_pipeline.h"

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
