// FLUX.1's registration (pipeline/pipeline_specs.h): its components, the sizes it takes, its
// latent shape, loader, memory estimates, the options it ignores and its guidance summary.
#include <fmt/format.h>

#include <algorithm>

#include "core/config_fields.h"
#include "core/error.h"
#include "pipeline/flux/flux_memory.h"
#include "pipeline/flux/flux_pipeline.h"
#include "pipeline/pipeline_specs.h"
#include "pipeline/request_checks.h"

namespace mmgen {
namespace {

// FLUX: latents [1, latent_channels, 2·(H / 2f), 2·(W / 2f)] packed into 2x2 tokens; diffusers
// rounds other sizes down, mmgen asks for multiples of 2f (16 with FLUX's VAE).
void validate_flux(const Request& request, const ModelIndex& index) {
  const int64_t multiple = kl_vae_spatial_factor(index) * 2;
  check_size_multiple(request, multiple, "FLUX");
  check(request.num_frames == 1, "--num-frames {}: FLUX makes still images; use --num-frames 1",
        request.num_frames);
  check_vae_tiles(request, kl_vae_spatial_factor(index));
}

Shape flux_latent_shape(const Request& request, const ModelIndex& index) {
  const int64_t factor = kl_vae_spatial_factor(index);
  const int64_t channels =
      config_integer(index.config("vae"), "latent_channels", 16,
                     component_config_path(index.component("vae")).string(), 1);
  return {1, channels, 2 * (request.height / (2 * factor)), 2 * (request.width / (2 * factor))};
}

// FLUX.1-dev takes --guidance-scale as an input (distilled guidance); the negative prompt is read
// only by true CFG.
std::vector<std::string> unused_flux_settings(const Request& request) {
  std::vector<std::string> notes;
  note_zimage_options(request, "FLUX", notes);
  if ((given(request, "negative-prompt") || request.negative_prompt_embeds) &&
      request.true_cfg_scale <= 1.0)
    notes.push_back(fmt::format(
        "{} is unused: FLUX reads a negative prompt only with true CFG; pass --true-cfg-scale "
        "above 1 (a second forward per step) to use it",
        given(request, "negative-prompt") ? "--negative-prompt" : "--negative-prompt-embeds"));
  if (request.true_cfg_scale > 1.0 && !has_negative(request))
    notes.push_back(fmt::format(
        "{}true CFG {} is off without a negative prompt (as in diffusers); pass "
        "--negative-prompt TEXT to turn it on",
        given(request, "true-cfg-scale") ? "--true-cfg-scale: " : "", request.true_cfg_scale));
  return notes;
}

std::string guidance_of_flux(const Request& request) {
  const bool true_cfg = request.true_cfg_scale > 1.0 && has_negative(request);
  return fmt::format("guidance {} (distilled input), true CFG {}", request.guidance_scale,
                     true_cfg ? fmt::format("{}", request.true_cfg_scale) : std::string("off"));
}

}  // namespace

PipelineSpec flux_pipeline_spec() {
  PipelineSpec spec{
      "FluxPipeline",
      "flux.yaml",
      {{"text_encoder", ComponentKind::TextEncoder, {"CLIPTextModel"}},
       {"tokenizer", ComponentKind::Tokenizer, {"CLIPTokenizer", "CLIPTokenizerFast"}},
       {"text_encoder_2", ComponentKind::TextEncoder, {"T5EncoderModel"}},
       {"tokenizer_2",
        ComponentKind::Tokenizer,
        {"T5Tokenizer", "T5TokenizerFast", "TokenizersBackend"}},
       {"transformer", ComponentKind::Transformer, {"FluxTransformer2DModel"}},
       {"vae", ComponentKind::Vae, {"AutoencoderKL"}},
       // FLUX passes explicit sigmas and mu, which only this scheduler takes.
       {"scheduler", ComponentKind::Scheduler, {"FlowMatchEulerDiscreteScheduler"}}},
      validate_flux,
      flux_latent_shape,
      load_flux_pipeline,
      estimate_flux_memory,
      /*stage_offload=*/false,
      estimate_flux_gpu_weights,
      unused_flux_settings,
      guidance_of_flux};
  // FluxLoraLoaderMixin's: the transformer and the CLIP text encoder.
  spec.lora_components = {"transformer", "text_encoder"};
  return spec;
}

}  // namespace mmgen
