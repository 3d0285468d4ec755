#include "pipeline/registry.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "core/config_fields.h"
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
  const std::string where = component_config_path(index.component("vae")).string();
  geometry.z_dim = config_integer(config, "z_dim", geometry.z_dim, where, 1);
  geometry.temporal = config_integer(config, "scale_factor_temporal", geometry.temporal, where, 1);
  geometry.spatial = config_integer(config, "scale_factor_spatial", geometry.spatial, where, 1);
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

// Sizes must be multiples of `multiple` (the VAE's factor times the 2x2 patch); one line naming
// both flags as the log states sizes (width first) and the nearest smaller sizes that fit.
void check_size_multiple(const Request& request, int64_t multiple, const char* model) {
  check(request.height % multiple == 0 && request.width % multiple == 0,
        "--width {} --height {}: {} needs multiples of {}; try --width {} --height {}",
        request.width, request.height, model, multiple,
        std::max(multiple, request.width / multiple * multiple),
        std::max(multiple, request.height / multiple * multiple));
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
  check_size_multiple(request, multiple, "Z-Image");
  // The transformer's RoPE tables cover axes_lens patches per side (512 for Z-Image: 8192 pixels).
  const dit::ZImageConfig transformer = dit::ZImageConfig::from_json(
      index.config("transformer"), component_config_path(index.component("transformer")).string());
  const int64_t pixels_per_patch = zimage_spatial_factor(index) * transformer.patch_size;
  const int64_t max_height = transformer.axes_lens[1] * pixels_per_patch;
  const int64_t max_width = transformer.axes_lens[2] * pixels_per_patch;
  check(request.height <= max_height && request.width <= max_width,
        "--width {} --height {}: this Z-Image transformer's position tables reach {}x{} "
        "pixels; try --width {} --height {}",
        request.width, request.height, max_width, max_height, std::min(request.width, max_width),
        std::min(request.height, max_height));
  check(request.num_frames == 1, "--num-frames {}: Z-Image makes still images; use --num-frames 1",
        request.num_frames);
  check_vae_tiles(request, zimage_spatial_factor(index));
}

Shape zimage_latent_shape(const Request& request, const ModelIndex& index) {
  const int64_t factor = zimage_spatial_factor(index);
  const int64_t channels =
      config_integer(index.config("transformer"), "in_channels", 16,
                     component_config_path(index.component("transformer")).string(), 1);
  return {1, channels, request.height / factor, request.width / factor};
}

// FLUX: latents [1, latent_channels, 2·(H / 2f), 2·(W / 2f)] packed into 2x2 tokens; diffusers
// rounds other sizes down, mmgen asks for multiples of 2f (16 with FLUX's VAE).
void validate_flux(const Request& request, const ModelIndex& index) {
  const int64_t multiple = zimage_spatial_factor(index) * 2;
  check_size_multiple(request, multiple, "FLUX");
  check(request.num_frames == 1, "--num-frames {}: FLUX makes still images; use --num-frames 1",
        request.num_frames);
  check_vae_tiles(request, zimage_spatial_factor(index));
}

Shape flux_latent_shape(const Request& request, const ModelIndex& index) {
  const int64_t factor = zimage_spatial_factor(index);
  const int64_t channels =
      config_integer(index.config("vae"), "latent_channels", 16,
                     component_config_path(index.component("vae")).string(), 1);
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

bool given(const Request& request, const char* option) {
  return request.given.count(option) > 0;
}

bool has_negative(const Request& request) {
  return !request.negative_prompt.empty() || request.negative_prompt_embeds.has_value();
}

// Z-Image's own guidance options, set for another pipeline.
void note_zimage_options(const Request& request, const char* model,
                         std::vector<std::string>& notes) {
  for (const char* option : {"cfg-truncation", "cfg-normalization"})
    if (given(request, option))
      notes.push_back(
          fmt::format("--{} has no effect on {}: only Z-Image reads it", option, model));
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

std::string guidance_of_cfg(const Request& request) {
  return fmt::format("guidance {}", request.guidance_scale);
}

std::string guidance_of_flux(const Request& request) {
  const bool true_cfg = request.true_cfg_scale > 1.0 && has_negative(request);
  return fmt::format("guidance {} (distilled input), true CFG {}", request.guidance_scale,
                     true_cfg ? fmt::format("{}", request.true_cfg_scale) : std::string("off"));
}

std::string guidance_of_qwen_image(const Request& request) {
  const bool true_cfg = request.true_cfg_scale > 1.0 && has_negative(request);
  return true_cfg ? fmt::format("true CFG {}", request.true_cfg_scale)
                  : std::string("true CFG off");
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
       estimate_wan_gpu_weights,
       unused_wan_settings,
       guidance_of_cfg,
       {/*sequence=*/true, /*cfg=*/true}},
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
       estimate_zimage_memory,
       /*stage_offload=*/false,
       /*estimate_gpu_weights=*/{},
       unused_zimage_settings,
       guidance_of_cfg,
       {/*sequence=*/true, /*cfg=*/false}},
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
       estimate_flux_gpu_weights,
       unused_flux_settings,
       guidance_of_flux},
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
       estimate_qwen_image_gpu_weights,
       unused_qwen_image_settings,
       guidance_of_qwen_image},
  };
  return registry;
}

std::string pipelines_where(const std::function<bool(const PipelineSpec&)>& has) {
  std::string names;
  for (const auto& spec : pipeline_registry())
    if (has(spec)) names += (names.empty() ? "" : ", ") + spec.class_name;
  return names;
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
