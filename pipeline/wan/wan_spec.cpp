// Wan2.1 text-to-video's registration (pipeline/pipeline_specs.h): its components, the sizes and
// frame counts it takes, its latent shape, loader, memory estimates and the options it ignores.
#include <fmt/format.h>

#include <algorithm>

#include "core/config_fields.h"
#include "core/error.h"
#include "pipeline/pipeline_specs.h"
#include "pipeline/request_checks.h"
#include "pipeline/wan/wan_memory.h"
#include "pipeline/wan/wan_pipeline.h"

namespace mmgen {
namespace {

// Wan2.1: latents [1, z_dim, (F - 1) / 4 + 1, H / 8, W / 8]; the transformer patchifies 2x2, so
// height and width must be multiples of 8 * 2 = 16.
struct WanGeometry {
  int64_t z_dim = 16, temporal = 4, spatial = 8;
};

WanGeometry wan_geometry(const ModelIndex& index) {
  WanGeometry geometry;
  if (!index.has("vae")) return geometry;
  const nlohmann::json& config = index.config("vae");
  const std::string where = component_config_path(index.component("vae")).string();
  geometry.z_dim = config_integer(config, "z_dim", geometry.z_dim, where, 1);
  geometry.temporal = config_integer(config, "scale_factor_temporal", geometry.temporal, where, 1);
  geometry.spatial = config_integer(config, "scale_factor_spatial", geometry.spatial, where, 1);
  return geometry;
}

// The valid frame counts (1 + a multiple of `temporal`) nearest to `frames`: "5" for 4, "1 or 5"
// for 3 (as near each other).
std::string nearest_frame_counts(int64_t frames, int64_t temporal) {
  const int64_t below = (frames - 1) / temporal * temporal + 1, above = below + temporal;
  if (frames - below < above - frames) return std::to_string(below);
  if (frames - below > above - frames) return std::to_string(above);
  return fmt::format("{} or {}", below, above);
}

void validate_wan(const Request& request, const ModelIndex& index) {
  const WanGeometry geometry = wan_geometry(index);
  const int64_t multiple = geometry.spatial * 2;
  check_size_multiple(request, multiple, "Wan");
  check((request.num_frames - 1) % geometry.temporal == 0,
        "--num-frames {}: Wan needs (frames - 1) divisible by {}; try {}", request.num_frames,
        geometry.temporal, nearest_frame_counts(request.num_frames, geometry.temporal));
  check_vae_tiles(request, geometry.spatial);
}

Shape wan_latent_shape(const Request& request, const ModelIndex& index) {
  const WanGeometry geometry = wan_geometry(index);
  return {1, geometry.z_dim, (request.num_frames - 1) / geometry.temporal + 1,
          request.height / geometry.spatial, request.width / geometry.spatial};
}

std::vector<std::string> unused_wan_settings(const Request& request) {
  std::vector<std::string> notes;
  note_zimage_options(request, "Wan", notes);
  if (given(request, "true-cfg-scale"))
    notes.push_back(
        fmt::format("--true-cfg-scale {} has no effect on Wan: its classifier-free guidance is "
                    "--guidance-scale (above 1; {} now)",
                    request.true_cfg_scale, request.guidance_scale));
  return notes;
}

}  // namespace

PipelineSpec wan_pipeline_spec() {
  return {
      "WanPipeline",
      "wan.yaml",
      {{"text_encoder", ComponentKind::TextEncoder, {"UMT5EncoderModel"}},
       {"tokenizer", ComponentKind::Tokenizer, {"T5Tokenizer", "T5TokenizerFast"}},
       {"transformer", ComponentKind::Transformer, {"WanTransformer3DModel"}},
       {"vae", ComponentKind::Vae, {"AutoencoderKLWan"}},
       // Wan's flow-matching schedule runs with any of them, as in diffusers.
       {"scheduler", ComponentKind::Scheduler, component_class_names(ComponentKind::Scheduler)}},
      validate_wan,
      wan_latent_shape,
      load_wan_pipeline,
      estimate_wan_memory,
      /*stage_offload=*/true,
      estimate_wan_gpu_weights,
      unused_wan_settings,
      guidance_of_cfg,
      {/*sequence=*/true, /*cfg=*/true}};
}

}  // namespace mmgen
