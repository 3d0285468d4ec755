// The whole FLUX pipeline on the GPU (CLIP and T5 on the GPU paged backends, the transformer with
// bf16 products, the VAE) against diffusers' flux-tiny reference (tests/fixtures/flux-tiny, in the
// repository): the given noise, noise drawn from seed 42, and true CFG. The bound for bf16
// is a relative error of 1e-2; the transformer alone is also held against the CPU's float32 run.
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/file.h"
#include "core/safetensors.h"
#include "cuda_test_support.h"
#include "models/dit/flux/flux_transformer.h"
#include "pipeline/flux/flux_pipeline.h"
#include "pipeline/model_index.h"

using namespace mmgen;
using namespace mmgen::cuda_testing;
namespace fs = std::filesystem;

int main() try {
  const fs::path tiny = fs::path(MMGEN_SOURCE_DIR) / "tests" / "fixtures" / "flux-tiny";
  const SafetensorsFile reference = SafetensorsFile::open(tiny / "reference/reference.safetensors");
  const nlohmann::json settings =
      nlohmann::json::parse(read_text_file(tiny / "reference/reference.json"));
  constexpr double kBound = 1e-2;
  {
    // The transformer alone: bf16 on the GPU against diffusers' float32 forward.
    dit::FluxTransformer model = dit::FluxTransformer::load(tiny / "model/transformer");
    model.set_device(Device::CUDA);
    dit::FluxItem item;
    item.image = reference.tensor("transformer.hidden_states").select(0, 0).contiguous();
    item.text = reference.tensor("transformer.encoder_hidden_states").select(0, 0).contiguous();
    item.pooled = reference.tensor("transformer.pooled_projections").view({-1});
    item.timestep = 0.4315f;
    item.guidance = 3.5f;
    item.rows = 8;
    item.columns = 12;
    const double error = relative_error(model.forward({item, item})[1],
                                        reference.tensor("transformer.out_t431").select(0, 0));
    expect(error < kBound,
           fmt::format("transformer on the GPU: relative error {:.2e} < {:.0e}", error, kBound));
  }
  const ModelIndex index = load_model_index(tiny / "model");
  const FluxPipeline pipeline(index);
  const nlohmann::json& request = settings["pipeline"];
  const auto fixture_input = [&] {
    FluxGenerationInput input;
    input.prompt = request["prompt"];
    input.height = request["height"];
    input.width = request["width"];
    input.num_inference_steps = request["num_inference_steps"];
    input.guidance_scale = request["guidance_scale"];
    input.max_sequence_length = request["max_sequence_length"];
    input.cuda = true;
    return input;
  };
  {
    FluxGenerationInput input = fixture_input();
    input.initial_latents = reference.tensor("pipeline.noise").clone();
    const FluxGenerationOutput output = pipeline.generate(input, true);
    for (size_t k = 0; k < output.latents_after_step.size(); ++k) {
      const double error =
          relative_error(output.latents_after_step[k],
                         reference.tensor("pipeline.latents_after_step" + std::to_string(k)));
      expect(error < kBound, fmt::format("latents after step {}: relative error {:.2e} < {:.0e}",
                                         k, error, kBound));
    }
    const double error = relative_error(output.frames, reference.tensor("pipeline.image"));
    expect(error < kBound,
           fmt::format("given noise: image relative error {:.2e} < {:.0e}", error, kBound));
  }
  {
    FluxGenerationInput input = fixture_input();
    input.seed = 42;
    const double error =
        relative_error(pipeline.generate(input).frames, reference.tensor("pipeline.image_seed42"));
    expect(error < kBound,
           fmt::format("seed 42: image relative error {:.2e} < {:.0e}", error, kBound));
  }
  {
    FluxGenerationInput input = fixture_input();
    input.initial_latents = reference.tensor("pipeline.noise").clone();
    input.negative_prompt = settings["pipeline_true_cfg"]["negative_prompt"];
    input.true_cfg_scale = settings["pipeline_true_cfg"]["true_cfg_scale"];
    const double error =
        relative_error(pipeline.generate(input).frames, reference.tensor("pipeline.image_true_cfg"));
    expect(error < kBound,
           fmt::format("true CFG: image relative error {:.2e} < {:.0e}", error, kBound));
  }
  return finish("flux_pipeline_cuda_test");
} catch (const std::exception& e) {
  std::printf("flux_pipeline_cuda_test: %s\n", e.what());
  return 1;
}
