#include "pipeline/component_loras.h"

#include <spdlog/spdlog.h>

#include "core/error.h"
#include "models/lora/lora_merge.h"

namespace mmgen {

void attach_loras(ModelIndex& index, const std::vector<lora::LoraUse>& loras) {
  if (loras.empty()) return;
  check(index.has("transformer"), "--lora-path: {} has no transformer to merge a LoRA into",
        (index.root / "model_index.json").string());
  for (const lora::LoraUse& use : loras) lora::check_lora_path(use.path);
  index.components.at("transformer").loras = loras;
}

WeightStore with_loras(const ComponentEntry& entry, const WeightStore& weights,
                       const models::ParameterList& tree, const lora::ModuleNames& original_names) {
  std::vector<lora::LoraFile> files;
  files.reserve(entry.loras.size());
  for (const lora::LoraUse& use : entry.loras)
    files.push_back(lora::read_lora_file(use.path, entry.name, original_names));
  std::vector<lora::ScaledLora> scaled;
  for (size_t i = 0; i < files.size(); ++i) scaled.push_back({&files[i], entry.loras[i].scale});
  WeightStore merged = lora::merge_loras(weights, tree, scaled, entry.class_name);
  for (size_t i = 0; i < files.size(); ++i) {
    const lora::LoraFile& file = files[i];
    std::string left_out;
    if (file.full_weight_diffs > 0)
      left_out += fmt::format("; {} .diff key(s) left out, as diffusers leaves them",
                              file.full_weight_diffs);
    if (file.other_components > 0)
      left_out += fmt::format(
          "; {} key(s) for other components not applied (text encoder "
          "LoRAs are not read yet)",
          file.other_components);
    spdlog::info("lora: {} ({} names): {} layer(s) of the {} merged at scale {}{}",
                 file.path.string(), file.format, file.layers.size(), entry.name,
                 entry.loras[i].scale, left_out);
  }
  return merged;
}

}  // namespace mmgen
