// Z-Image's registration (pipeline/pipeline_specs.h): its components, the sizes it takes, its
// latent shape, loader, memory estimate and the options it ignores.
#include <fmt/format.h>

#include <algorithm>

#include "core/config_fields.h"
#include "core/error.h"
#include "models/dit/zimage/zimage_config.h"
#include "pipeline/pipeline_specs.h"
#include "pipeline/request_checks.h"
#include "pipeline/zimage/zimage_memory.h"
#include "pipeline/zimage/zimage_pipeline.h"

namespace mmgen {
namespace {

// Z-Image: latents [1, in_channels, H / f, W / f], f = 2^(VAE levels − 1) (8 for the FLUX VAE);
// the transformer patchifies 2x2, so height and width must be multiples of 2f (diffusers'
// vae_scale_factor * 2). One still image: no frame axis.
void validate_zimage(const Request& request, const ModelIndex& index) {
  const int64_t multiple = kl_vae_spatial_factor(index) * 2;
  check_size_multiple(request, multiple, "Z-Image");
  // The transformer's RoPE tables cover axes_lens patches per side (512 for Z-Image: 8192 pixels).
  const dit::ZImageConfig transformer = dit::ZImageConfig::from_json(
      index.config("transformer"), component_config_path(index.component("transformer")).string());
  const int64_t pixels_per_patch = kl_vae_spatial_factor(index) * transformer.patch_size;
  const int64_t max_height = transformer.axes_lens[1] * pixels_per_patch;
  const int64_t max_width = transformer.axes_lens[2] * pixels_per_patch;
  check(request.height <= max_height && request.width <= max_width,
        "--width {} --height {}: this Z-Image transformer's position tables reach {}x{} "
        "pixels; try --width {} --height {}",
        request.width, request.height, max_width, max_height, std::min(request.width, max_width),
        std::min(request.height, max_height));
  check(request.num_frames == 1, "--num-frames {}: Z-Image makes still images; use --num-frames 1",
        request.num_frames);
  check_vae_tiles(request, kl_vae_spatial_factor(index));
}

Shape zimage_latent_shape(const Request& request, const ModelIndex& index) {
  const int64_t factor = kl_vae_spatial_factor(index);
  const int64_t channels =
      config_integer(index.config("transformer"), "in_channels", 16,
                     component_config_path(index.component("transformer")).string(), 1);
  return {1, channels, request.height / factor, request.width / factor};
}

std::vector<std::string> unused_zimage_settings(const Request& request) {
  std::vector<std::string> notes;
  if (given(request, "true-cfg-scale"))
    notes.push_back(
        fmt::format("--true-cfg-scale {} has no effect on Z-Image: its classifier-free guidance is "
                    "--guidance-scale (above 0; {} now)",
                    request.true_cfg_scale, request.guidance_scale));
  if (request.guidance_scale <= 0)
    for (const char* option : {"cfg-truncation", "cfg-normalization"})
      if (given(request, option))
        notes.push_back(fmt::format(
            "--{} is unused: guidance is off (--guidance-scale {}); it shapes guidance only",
            option, request.guidance_scale));
  return notes;
}

}  // namespace

PipelineSpec zimage_pipeline_spec() {
  return {"ZImagePipeline",
          "zimage.yaml",
          {{"text_encoder", ComponentKind::TextEncoder, {"Qwen3ForCausalLM", "Qwen3Model"}},
           // transformers 5 saves Qwen's fast tokenizer as the generic TokenizersBackend.
           {"tokenizer",
            ComponentKind::Tokenizer,
            {"Qwen2Tokenizer", "Qwen2TokenizerFast", "TokenizersBackend"}},
           {"transformer", ComponentKind::Transformer, {"ZImageTransformer2DModel"}},
           {"vae", ComponentKind::Vae, {"AutoencoderKL"}},
           // Z-Image passes explicit sigmas, which only this scheduler takes.
           {"scheduler", ComponentKind::Scheduler, {"FlowMatchEulerDiscreteScheduler"}}},
          validate_zimage,
          zimage_latent_shape,
          load_zimage_pipeline,
          estimate_zimage_memory,
          /*stage_offload=*/false,
          /*estimate_gpu_weights=*/{},
          unused_zimage_settings,
          guidance_of_cfg,
          {/*sequence=*/true, /*cfg=*/false}};
}

}  // namespace mmgen
