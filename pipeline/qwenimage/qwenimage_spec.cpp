// Qwen-Image's registration (pipeline/pipeline_specs.h): its components, the sizes it takes, its
// latent shape, loader, memory estimates, the options it ignores and its guidance summary.
#include <fmt/format.h>

#include <algorithm>

#include "core/config_fields.h"
#include "core/error.h"
#include "pipeline/pipeline_specs.h"
#include "pipeline/qwenimage/qwenimage_memory.h"
#include "pipeline/qwenimage/qwenimage_pipeline.h"
#include "pipeline/request_checks.h"

namespace mmgen {
namespace {

// Qwen-Image: latents [1, z_dim, 2·(H / 2f), 2·(W / 2f)] (one frame), f =
// 2^len(temperal_downsample) (8 for the real VAE), packed into 2x2 tokens; sizes must be multiples
// of 2f.
int64_t qwen_image_spatial_factor(const ModelIndex& index) {
  const nlohmann::json& config = index.config("vae");
  const int64_t levels =
      config.contains("temperal_downsample") && config["temperal_downsample"].is_array()
          ? int64_t(config["temperal_downsample"].size())
          : 3;
  check(levels >= 0 && levels <= 8, "{}: temperal_downsample must list 0 to 8 levels",
        index.component("vae").path.string());
  return int64_t(1) << levels;
}

void validate_qwen_image(const Request& request, const ModelIndex& index) {
  const int64_t multiple = qwen_image_spatial_factor(index) * 2;
  check_size_multiple(request, multiple, "Qwen-Image");
  check(request.num_frames == 1,
        "--num-frames {}: Qwen-Image makes still images; use --num-frames 1", request.num_frames);
  check(request.max_sequence_length >= 1 && request.max_sequence_length <= 1024,
        "--max-sequence-length {} is outside Qwen-Image's 1 to 1024", request.max_sequence_length);
}

Shape qwen_image_latent_shape(const Request& request, const ModelIndex& index) {
  const int64_t factor = qwen_image_spatial_factor(index);
  const int64_t channels = config_integer(
      index.config("vae"), "z_dim", 16, component_config_path(index.component("vae")).string(), 1);
  return {1, channels, 2 * (request.height / (2 * factor)), 2 * (request.width / (2 * factor))};
}

// Qwen-Image has no guidance input: its classifier-free guidance is true CFG, on with a negative
// prompt and a scale above 1.
std::vector<std::string> unused_qwen_image_settings(const Request& request) {
  std::vector<std::string> notes;
  note_zimage_options(request, "Qwen-Image", notes);
  if (given(request, "guidance-scale"))
    notes.push_back(fmt::format(
        "--guidance-scale {} has no effect on Qwen-Image: its classifier-free guidance is "
        "--true-cfg-scale ({} now) with a --negative-prompt",
        request.guidance_scale, request.true_cfg_scale));
  if (request.true_cfg_scale > 1.0 && !has_negative(request)) {
    if (given(request, "true-cfg-scale"))
      notes.push_back(fmt::format(
          "--true-cfg-scale {}: no --negative-prompt, so true CFG is off (as in diffusers); pass "
          "--negative-prompt \" \" as the model card does",
          request.true_cfg_scale));
    else
      notes.push_back(fmt::format(
          "true CFG is off: Qwen-Image's default true CFG scale {} (configs/qwenimage.yaml) runs "
          "only with a negative prompt, as in diffusers; pass --negative-prompt \" \" as the "
          "model card does to turn it on",
          request.true_cfg_scale));
  }
  return notes;
}

std::string guidance_of_qwen_image(const Request& request) {
  const bool true_cfg = request.true_cfg_scale > 1.0 && has_negative(request);
  return true_cfg ? fmt::format("true CFG {}", request.true_cfg_scale)
                  : std::string("true CFG off");
}

}  // namespace

PipelineSpec qwen_image_pipeline_spec() {
  return {"QwenImagePipeline",
          "qwenimage.yaml",
          {{"text_encoder", ComponentKind::TextEncoder, {"Qwen2_5_VLForConditionalGeneration"}},
           {"tokenizer",
            ComponentKind::Tokenizer,
            {"Qwen2Tokenizer", "Qwen2TokenizerFast", "TokenizersBackend"}},
           {"transformer", ComponentKind::Transformer, {"QwenImageTransformer2DModel"}},
           {"vae", ComponentKind::Vae, {"AutoencoderKLQwenImage"}},
           {"scheduler", ComponentKind::Scheduler, {"FlowMatchEulerDiscreteScheduler"}}},
          validate_qwen_image,
          qwen_image_latent_shape,
          load_qwen_image_pipeline,
          estimate_qwen_image_memory,
          /*stage_offload=*/false,
          estimate_qwen_image_gpu_weights,
          unused_qwen_image_settings,
          guidance_of_qwen_image};
}

}  // namespace mmgen
