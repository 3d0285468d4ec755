#include "pipeline/registry.h"

#include <algorithm>
#include <map>

#include "core/error.h"
#include "models/dit/zimage_config.h"
#include "pipeline/flux_memory.h"
#include "pipeline/flux_pipeline.h"
#include "pipeline/qwenimage_memory.h"
#include "pipeline/qwenimage_pipeline.h"
#include "pipeline/wan_memory.h"
#include "pipeline/wan_pipeline.h"
#include "pipeline/zimage_memory.h"
#include "pipeline/zimage_pipeline.h"

namespace mmgen {

const std::map<std::string, std::string>& embedded_configs();  // generated from configs/*.yaml

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
  geometry.z_dim = config.value("z_dim", geometry.z_dim);
  geometry.temporal = config.value("scale_factor_temporal", geometry.temporal);
  geometry.spatial = config.value("scale_factor_spatial", geometry.spatial);
  check(geometry.z_dim > 0 && geometry.temporal > 0 && geometry.spatial > 0,
        "{}: z_dim and scale factors must be positive", index.component("vae").path.string());
  return geometry;
}

// --vae-tile-size and --vae-tile-overlap (output pixels) with --vae-tiling: the VAE tiles its
// latents, `factor` times smaller, so both must be multiples of it.
void check_vae_tiles(const Request& request, int64_t factor) {
  if (request.vae_tiling)
    check(request.vae_tile_size % factor == 0 && request.vae_tile_overlap % factor == 0,
          "--vae-tile-size {} / --vae-tile-overlap {}: the VAE tiles its {}x smaller latents, so "
          "both must be multiples of {}",
          request.vae_tile_size, request.vae_tile_overlap, factor, factor);
}

void validate_wan(const Request& request, const ModelIndex& index) {
  const WanGeometry geometry = wan_geometry(index);
  const int64_t multiple = geometry.spatial * 2;
  check(request.height % multiple == 0 && request.width % multiple == 0,
        "--height {} / --width {}: Wan needs multiples of {}; try {}x{}", request.height,
        request.width, multiple, std::max(multiple, request.height / multiple * multiple),
        std::max(multiple, request.width / multiple * multiple));
  check((request.num_frames - 1) % geometry.temporal == 0,
        "--num-frames {}: Wan needs (frames - 1) divisible by {}; try {}", request.num_frames,
        geometry.temporal, (request.num_frames - 1) / geometry.temporal * geometry.temporal + 1);
  check_vae_tiles(request, geometry.spatial);
}

Shape wan_latent_shape(const Request& request, const ModelIndex& index) {
  const WanGeometry geometry = wan_geometry(index);
  return {1, geometry.z_dim, (request.num_frames - 1) / geometry.temporal + 1,
          request.height / geometry.spatial, request.width / geometry.spatial};
}

// Z-Image: latents [1, in_channels, H / f, W / f], f = 2^(VAE levels − 1) (8 for the FLUX VAE);
// the transformer patchifies 2x2, so height and width must be multiples of 2f (diffusers'
// vae_scale_factor * 2). One still image: no frame axis.
int64_t zimage_spatial_factor(const ModelIndex& index) {
  const nlohmann::json& config = index.config("vae");
  const int64_t levels =
      config.contains("block_out_channels") && config["block_out_channels"].is_array()
          ? int64_t(config["block_out_channels"].size())
          : 4;
  check(levels >= 1 && levels <= 8, "{}: block_out_channels must list 1 to 8 levels",
        index.component("vae").path.string());
  return int64_t(1) << (levels - 1);
}

void validate_zimage(const Request& request, const ModelIndex& index) {
  const int64_t multiple = zimage_spatial_factor(index) * 2;
  check(request.height % multiple == 0 && request.width % multiple == 0,
        "--height {} / --width {}: Z-Image needs multiples of {}; try {}x{}", request.height,
        request.width, multiple, std::max(multiple, request.height / multiple * multiple),
        std::max(multiple, request.width / multiple * multiple));
  // The transformer's RoPE tables cover axes_lens patches per side (512 for Z-Image: 8192 pixels).
  const dit::ZImageConfig transformer = dit::ZImageConfig::from_json(
      index.config("transformer"), component_config_path(index.component("transformer")).string());
  const int64_t pixels_per_patch = zimage_spatial_factor(index) * transformer.patch_size;
  const int64_t max_height = transformer.axes_lens[1] * pixels_per_patch;
  const int64_t max_width = transformer.axes_lens[2] * pixels_per_patch;
  check(request.height <= max_height && request.width <= max_width,
        "--height {} / --width {}: this Z-Image transformer's position tables reach {}x{} "
        "pixels; try {}x{}",
        request.height, request.width, max_height, max_width, std::min(request.height, max_height),
        std::min(request.width, max_width));
  check(request.num_frames == 1, "--num-frames {}: Z-Image makes still images; use --num-frames 1",
        request.num_frames);
  check_vae_tiles(request, zimage_spatial_factor(index));
}

Shape zimage_latent_shape(const Request& request, const ModelIndex& index) {
  const int64_t factor = zimage_spatial_factor(index);
  const nlohmann::json& transformer = index.config("transformer");
  const int64_t channels = transformer.value("in_channels", int64_t(16));
  return {1, channels, request.height / factor, request.width / factor};
}

// FLUX: latents [1, latent_channels, 2·(H / 2f), 2·(W / 2f)] packed into 2x2 tokens; diffusers
// rounds other sizes down, mmgen asks for multiples of 2f (16 with FLUX's VAE).
void validate_flux(const Request& request, const ModelIndex& index) {
  const int64_t multiple = zimage_spatial_factor(index) * 2;
  check(request.height % multiple == 0 && request.width % multiple == 0,
        "--height {} / --width {}: FLUX needs multiples of {}; try {}x{}", request.height,
        request.width, multiple, std::max(multiple, request.height / multiple * multiple),
        std::max(multiple, request.width / multiple * multiple));
  check(request.num_frames == 1, "--num-frames {}: FLUX makes still images; use --num-frames 1",
        request.num_frames);
  check_vae_tiles(request, zimage_spatial_factor(index));
}

Shape flux_latent_shape(const Request& request, const ModelIndex& index) {
  const int64_t factor = zimage_spatial_factor(index);
  const int64_t channels = index.config("vae").value("latent_channels", int64_t(16));
  return {1, channels, 2 * (request.height / (2 * factor)), 2 * (request.width / (2 * factor))};
}

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
  check(request.height % multiple == 0 && request.width % multiple == 0,
        "--height {} / --width {}: Qwen-Image needs multiples of {}; try {}x{}", request.height,
        request.width, multiple, std::max(multiple, request.height / multiple * multiple),
        std::max(multiple, request.width / multiple * multiple));
  check(request.num_frames == 1,
        "--num-frames {}: Qwen-Image makes still images; use --num-frames 1", request.num_frames);
  check(request.max_sequence_length >= 1 && request.max_sequence_length <= 1024,
        "--max-sequence-length {} is outside Qwen-Image's 1 to 1024", request.max_sequence_length);
}

Shape qwen_image_latent_shape(const Request& request, const ModelIndex& index) {
  const int64_t factor = qwen_image_spatial_factor(index);
  const int64_t channels = index.config("vae").value("z_dim", int64_t(16));
  return {1, channels, 2 * (request.height / (2 * factor)), 2 * (request.width / (2 * factor))};
}

std::string join(const std::vector<std::string>& names) {
  std::string text;
  for (const auto& name : names) text += (text.empty() ? "" : ", ") + name;
  return text;
}

}  // namespace

const std::vector<PipelineSpec>& pipeline_registry() {
  static const std::vector<PipelineSpec> registry = {
      {"WanPipeline",
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
       estimate_wan_gpu_weights},
      {"ZImagePipeline",
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
       estimate_zimage_memory},
      {"FluxPipeline",
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
       estimate_flux_gpu_weights},
      {"QwenImagePipeline",
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
       estimate_qwen_image_gpu_weights},
  };
  return registry;
}

const PipelineSpec& find_pipeline(const std::string& class_name, const fs::path& where) {
  std::vector<std::string> known;
  for (const auto& spec : pipeline_registry()) {
    if (spec.class_name == class_name) return spec;
    known.push_back(spec.class_name);
  }
  fail("{}: pipeline class '{}' is not supported by this mmgen (supported: {})", where.string(),
       class_name, join(known));
}

void check_components(const PipelineSpec& spec, const ModelIndex& index) {
  const std::string where = (index.root / "model_index.json").string();
  std::vector<std::string> loaded;
  for (const ComponentSlot& slot : spec.components) loaded.push_back(slot.name);
  for (const auto& [name, entry] : index.components) {
    // (A structured binding is not captured by lambdas before clang 16: compare by a copy.)
    auto slot =
        std::find_if(spec.components.begin(), spec.components.end(),
                     [&, wanted = name](const ComponentSlot& s) { return s.name == wanted; });
    check(slot != spec.components.end(),
          "{}: component '{}' ({}) is not supported by {} yet (it loads only: {})", where, name,
          entry.class_name, spec.class_name, join(loaded));
    check(std::find(slot->classes.begin(), slot->classes.end(), entry.class_name) !=
              slot->classes.end(),
          "{}: {} class '{}' is not supported by {} (supported {}: {})", where, name,
          entry.class_name, spec.class_name, kind_name(slot->kind, true), join(slot->classes));
  }
  for (const ComponentSlot& slot : spec.components) {
    check(index.has(slot.name),
          "{}: {} needs a '{}' component but model_index.json does not list one", where,
          spec.class_name, slot.name);
    const ComponentEntry& entry = index.component(slot.name);
    check(fs::is_directory(entry.path),
          "component '{}' ({}) is missing: no folder {}; download it or pass --{}-path DIR",
          slot.name, entry.class_name, entry.path.string(), slot.name);
  }
}

const std::string& embedded_config(const std::string& file_name) {
  const auto& files = embedded_configs();
  auto it = files.find(file_name);
  check(it != files.end(), "no built-in defaults file configs/{}", file_name);
  return it->second;
}

}  // namespace mmgen
