#include "pipeline/component_loras.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <bit>
#include <map>
#include <set>

#include "core/error.h"
#include "core/file.h"
#include "models/lora/lora_merge.h"
#include "pipeline/registry.h"

namespace mmgen {

std::vector<std::string> attach_loras(ModelIndex& index, const std::vector<lora::LoraUse>& loras,
                                      lora::LoraMode mode) {
  std::vector<std::string> warnings;
  if (loras.empty()) return warnings;
  check(index.has("transformer"), "--lora-path: {} has no transformer to apply a LoRA to",
        (index.root / "model_index.json").string());
  const PipelineSpec& spec = find_pipeline(index.class_name, index.root);
  for (const lora::LoraUse& use : loras) {
    lora::check_lora_path(use.path);
    lora::LoraUse hashed = use;  // hashed once: the listing and the output's metadata read it
    hashed.sha256 = file_sha256(use.path);
    // Each component the file has keys for and the pipeline applies LoRAs to takes it; a file
    // with keys for none goes to the transformer, whose reader refuses it in one line.
    bool taken = false;
    for (const std::string& component :
         lora::lora_components(SafetensorsFile::open(use.path).names())) {
      const bool applied =
          std::count(spec.lora_components.begin(), spec.lora_components.end(), component) > 0;
      if (index.has(component) && applied) {
        index.components.at(component).loras.push_back(hashed);
        index.components.at(component).lora_mode = mode;
        taken = true;
      } else {
        warnings.push_back(
            fmt::format("lora: {} has keys for the {}, which {} applies no LoRA to; they are left "
                        "out",
                        use.path.string(), component, index.class_name));
      }
    }
    if (!taken) {
      index.components.at("transformer").loras.push_back(hashed);
      index.components.at("transformer").lora_mode = mode;
    }
  }
  return warnings;
}

namespace {

// `family`'s names, and kohya's flattened ones: "double_blocks_0_img_attn_qkv" is read as the
// dotted name (some of its underscores dots) that the family's names, or the model's own, give
// modules of `modules` for: the model's own module whose name flattens to it, else the first
// such dotted name, trying those with fewer dots first (at most 12 underscores: 4096 names; real
// layer names have under 10).
lora::ModuleNames with_flattened_names(const lora::ModuleNames& family,
                                       const std::set<std::string>& modules) {
  std::map<std::string, std::string> flattened;
  for (const std::string& module : modules) {
    std::string flat = module;
    std::replace(flat.begin(), flat.end(), '.', '_');
    flattened.emplace(flat, module);
  }
  return [family, &modules, flattened](const std::string& name) {
    if (name.find('.') != std::string::npos) return family(name);
    if (const auto own = flattened.find(name); own != flattened.end())
      return std::vector<lora::LoraTarget>{{own->second, {}}};
    const auto fits = [&](const std::vector<lora::LoraTarget>& targets) {
      for (const lora::LoraTarget& target : targets)
        if (!modules.count(target.module)) return false;
      return !targets.empty();
    };
    std::vector<size_t> underscores;
    for (size_t i = 0; i < name.size(); ++i)
      if (name[i] == '_') underscores.push_back(i);
    if (underscores.size() > 12) return family(name);
    for (int dots = 1; dots <= int(underscores.size()); ++dots)
      for (uint32_t mask = 0; mask < (1u << underscores.size()); ++mask) {
        if (std::popcount(mask) != dots) continue;
        std::string dotted = name;
        for (size_t i = 0; i < underscores.size(); ++i)
          if (mask & (1u << i)) dotted[underscores[i]] = '.';
        if (std::vector<lora::LoraTarget> targets = family(dotted); fits(targets)) return targets;
      }
    return family(name);
  };
}

}  // namespace

WeightStore with_loras(const ComponentEntry& entry, const WeightStore& weights,
                       const models::ParameterList& tree, const lora::ModuleNames& original_names) {
  const std::set<std::string> modules = lora::linear_modules(tree);
  const lora::ModuleNames names = with_flattened_names(original_names, modules);
  std::vector<lora::LoraFile> files;
  files.reserve(entry.loras.size());
  for (const lora::LoraUse& use : entry.loras)
    files.push_back(lora::read_lora_file(use.path, entry.name, names));
  std::vector<lora::ScaledLora> scaled;
  for (size_t i = 0; i < files.size(); ++i) scaled.push_back({&files[i], entry.loras[i].scale});
  const lora::LoraMode mode = lora::resolved_mode(entry.lora_mode, weights, scaled);
  const bool runtime = mode == lora::LoraMode::Runtime;
  WeightStore applied = runtime ? lora::with_runtime_loras(weights, tree, scaled, entry.class_name)
                                : lora::merge_loras(weights, tree, scaled, entry.class_name);
  for (size_t i = 0; i < files.size(); ++i) {
    const lora::LoraFile& file = files[i];
    std::string left_out;
    if (file.full_weight_diffs > 0)
      left_out += fmt::format("; {} .diff key(s) left out, as diffusers leaves them",
                              file.full_weight_diffs);
    if (file.other_components > 0)
      left_out += fmt::format("; {} key(s) for other components", file.other_components);
    spdlog::info("lora: {} ({} names): {} layer(s) of the {} {} at scale {}{}", file.path.string(),
                 file.format, file.layers.size(), entry.name,
                 runtime ? "added at run time" : "merged", entry.loras[i].scale, left_out);
  }
  return applied;
}

nlohmann::json loras_json(const ComponentEntry& entry) {
  nlohmann::json list = nlohmann::json::array();
  const lora::ModuleNames as_named = [](const std::string&) {
    return std::vector<lora::LoraTarget>{};
  };
  for (const lora::LoraUse& use : entry.loras) {
    const lora::LoraFile file = lora::read_lora_file(use.path, entry.name, as_named);
    std::set<int64_t> ranks;
    int64_t bias_deltas = 0;
    for (const lora::LoraLayer& layer : file.layers) {
      if (layer.down.defined()) ranks.insert(layer.down.size(0));
      if (layer.bias_delta.defined()) ++bias_deltas;
    }
    list.push_back({{"path", use.path.string()},
                    {"sha256", use.sha256},
                    {"bytes", fs::file_size(use.path)},
                    {"format", file.format},
                    {"layers", file.layers.size()},
                    {"ranks", std::vector<int64_t>(ranks.begin(), ranks.end())},
                    {"bias_deltas", bias_deltas},
                    {"scale", use.scale},
                    {"mode", lora::lora_mode_name(entry.lora_mode)},
                    {"full_weight_diffs_left_out", file.full_weight_diffs},
                    {"other_component_keys", file.other_components}});
  }
  return list;
}

nlohmann::json loras_metadata(const ModelIndex& index,
                              const std::vector<lora::LoraUse>& requested) {
  nlohmann::json list = nlohmann::json::array();
  for (const lora::LoraUse& asked : requested)
    for (const auto& [name, entry] : index.components) {
      const auto given =
          std::find_if(entry.loras.begin(), entry.loras.end(),
                       [&](const lora::LoraUse& use) { return use.path == asked.path; });
      if (given == entry.loras.end()) continue;
      list.push_back({{"file", asked.path.filename().string()},
                      {"sha256", given->sha256},
                      {"scale", asked.scale}});
      break;
    }
  return list;
}

}  // namespace mmgen
