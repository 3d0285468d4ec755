#include "pipeline/registry.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <map>

#include "core/error.h"
#include "pipeline/pipeline_specs.h"

namespace mmgen {

const std::map<std::string, std::string>& embedded_configs();  // generated from configs/*.yaml

const std::vector<PipelineSpec>& pipeline_registry() {
  static const std::vector<PipelineSpec> registry = {wan_pipeline_spec(), zimage_pipeline_spec(),
                                                     flux_pipeline_spec(),
                                                     qwen_image_pipeline_spec()};
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
       class_name, fmt::join(known, ", "));
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
          entry.class_name, spec.class_name, fmt::join(loaded, ", "));
    check(std::find(slot->classes.begin(), slot->classes.end(), entry.class_name) !=
              slot->classes.end(),
          "{}: {} class '{}' is not supported by {} (supported {}: {})", where, name,
          entry.class_name, spec.class_name, kind_name(slot->kind, true),
          fmt::join(slot->classes, ", "));
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
