// The whole Qwen-Image pipeline on the GPU (Qwen2.5-VL's language model on the GPU paged backends,
// the transformer with bf16 products, the Wan-style VAE) against diffusers' qwenimage-tiny
// reference (tests/fixtures/qwenimage-tiny, in the repository): given noise with true CFG, and
// noise drawn from seed 42. The bound for bf16 is a relative error of 1e-2.
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/file.h"
#include "core/safetensors.h"
#include "cuda_test_support.h"
#include "pipeline/model_index.h"
#include "pipeline/qwenimage/qwenimage_pipeline.h"

using namespace mmgen;
using namespace mmgen::cuda_testing;
namespace fs = std::filesystem;

int main() try {
  const fs::path tiny = fs::path(MMGEN_SOURCE_DIR) / "tests" / "fixtures" / "qwenimage-tiny";
  const SafetensorsFile reference = SafetensorsFile::open(tiny / "reference/reference.safetensors");
  const nlohmann::json request =
      nlohmann::json::parse(read_text_file(tiny / "reference/reference.json"))["pipeline"];
  constexpr double kBound = 1e-2;
  const ModelIndex index = load_model_index(tiny / "model");
  const QwenImagePipeline pipeline(index);
  const auto fixture_input = [&] {
    QwenImageGenerationInput input;
    input.prompt = request["prompt"];
    input.negative_prompt = request["negative_prompt"];
    input.true_cfg_scale = request["true_cfg_scale"];
    input.height = request["height"];
    input.width = request["width"];
    input.num_inference_steps = request["num_inference_steps"];
    input.max_sequence_length = 512;
    input.cuda = true;
    return input;
  };
  {
    QwenImageGenerationInput input = fixture_input();
    input.initial_latents = reference.tensor("pipeline.noise").clone();
    const QwenImageGenerationOutput output = pipeline.generate(input, true);
    for (size_t k = 0; k < output.latents_after_step.size(); ++k) {
      const double error =
          relative_error(output.latents_after_step[k],
                         reference.tensor("pipeline.latents_after_step" + std::to_string(k)));
      expect(error < kBound, fmt::format("latents after step {}: relative error {:.2e} < {:.0e}", k,
                                         error, kBound));
    }
    const double error = relative_error(output.frames, reference.tensor("pipeline.image"));
    expect(error < kBound, fmt::format("given noise, true CFG 4: image relative error {:.2e} < "
                                       "{:.0e}",
                                       error, kBound));
  }
  {
    QwenImageGenerationInput input = fixture_input();
    input.seed = 42;
    const double error =
        relative_error(pipeline.generate(input).frames, reference.tensor("pipeline.image_seed42"));
    expect(error < kBound,
           fmt::format("seed 42: image relative error {:.2e} < {:.0e}", error, kBound));
  }
  return finish("qwenimage_pipeline_cuda_test");
} catch (const std::exception& e) {
  std::printf("qwenimage_pipeline_cuda_test: %s\n", e.what());
  return 1;
}
