#include "pipeline/registry.h"

#include <algorithm>
#include <map>

#include "core/error.h"
#include "pipeline/wan_memory.h"
#include "pipeline/wan_pipeline.h"

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
  if (request.vae_tiling)
    check(request.vae_tile_size % geometry.spatial == 0 &&
              request.vae_tile_overlap % geometry.spatial == 0,
          "--vae-tile-size {} / --vae-tile-overlap {}: the VAE tiles its {}x smaller latents, so "
          "both must be multiples of {}",
          request.vae_tile_size, request.vae_tile_overlap, geometry.spatial, geometry.spatial);
}

Shape wan_latent_shape(const Request& request, const ModelIndex& index) {
  const WanGeometry geometry = wan_geometry(index);
  return {1, geometry.z_dim, (request.num_frames - 1) / geometry.temporal + 1,
          request.height / geometry.spatial, request.width / geometry.spatial};
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
       estimate_wan_memory},
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
    auto slot = std::find_if(spec.components.begin(), spec.components.end(),
                             [&](const ComponentSlot& s) { return s.name == name; });
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
