#include "pipeline/model_index.h"

#include <fmt/ranges.h>

#include <algorithm>

#include "core/error.h"
#include "core/file.h"
#include "core/json.h"
#include "pipeline/component_classes.h"
#include "pipeline/component_file.h"

namespace mmgen {

using json = nlohmann::json;

namespace {

// A component key names a folder inside the model directory, so it must be a plain name.
bool is_plain_name(const std::string& name) {
  if (name.empty() || name == "." || name == "..") return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
  });
}

}  // namespace

const ComponentEntry& ModelIndex::component(const std::string& name) const {
  auto it = components.find(name);
  check(it != components.end(), "{}: model_index.json has no component '{}' (it has: {})",
        root.string(), name, fmt::join(component_names(), ", "));
  return it->second;
}

std::vector<std::string> ModelIndex::component_names() const {
  std::vector<std::string> names;
  for (const auto& [name, entry] : components) names.push_back(name);
  return names;
}

ModelIndex load_model_index(const fs::path& root,
                            const std::map<std::string, fs::path>& path_overrides) {
  check(fs::exists(root),
        "model path {} does not exist; pass --model-path with a diffusers model folder",
        root.string());
  check(fs::is_directory(root),
        "model path {} is not a folder; pass the folder that holds model_index.json",
        root.string());
  const fs::path index_path = root / "model_index.json";
  if (!fs::exists(index_path)) {
    // A fixture folder (tests/fixtures/X, ../shared/fixtures/X) keeps the model in model/ beside
    // its reference outputs; a folder one level down with the index is what was meant.
    for (const char* inner : {"model", "pipeline"})
      check(!fs::exists(root / inner / "model_index.json"),
            "{} has no model_index.json, but {} has: pass --model-path {}", root.string(),
            (root / inner).string(), (root / inner).string());
    fail("{} has no model_index.json; is it a diffusers-format model folder?", root.string());
  }
  const json index = read_json_object(index_path);

  ModelIndex result;
  result.root = root;
  check(index.contains("_class_name") && index["_class_name"].is_string(),
        "{}: no \"_class_name\" naming the pipeline", index_path.string());
  result.class_name = index["_class_name"].get<std::string>();
  if (index.contains("_diffusers_version") && index["_diffusers_version"].is_string())
    result.diffusers_version = index["_diffusers_version"].get<std::string>();

  for (auto it = index.begin(); it != index.end(); ++it) {
    const std::string& key = it.key();
    if (key.starts_with("_")) continue;
    const json& value = *it;
    // A component is a two-element array of library and class; anything else is a pipeline extra.
    if (!value.is_array() || value.size() != 2) {
      result.extras[key] = value;
      continue;
    }
    if (value[0].is_null() && value[1].is_null()) {
      result.absent.push_back(key);
      continue;
    }
    check(value[0].is_string() && value[1].is_string(),
          "{}: component \"{}\" must be [library, ClassName] or [null, null]", index_path.string(),
          key);
    check(is_plain_name(key), "{}: component name \"{}\" is not a plain folder name",
          index_path.string(), key);
    ComponentEntry entry;
    entry.name = key;
    entry.library = value[0].get<std::string>();
    entry.class_name = value[1].get<std::string>();
    entry.path = root / key;
    result.components[key] = entry;
  }

  for (const auto& [name, path] : path_overrides) {
    auto it = result.components.find(name);
    check(it != result.components.end(),
          "--{}-path: model_index.json in {} has no component '{}' (components: {})", name,
          root.string(), name, fmt::join(result.component_names(), ", "));
    check(fs::exists(path),
          "--{}-path: {} does not exist; give the component's folder or its weights as one .gguf "
          "or .safetensors file",
          name, path.string());
    it->second.overridden = true;
    if (fs::is_directory(path)) {
      it->second.path = path;
      continue;
    }
    // Only a model's weights come as one file; a tokenizer or scheduler is a folder of files.
    const ComponentClass* known = find_component_class(it->second.class_name);
    check(!known || known->kind == ComponentKind::TextEncoder ||
              known->kind == ComponentKind::Transformer || known->kind == ComponentKind::Vae,
          "--{}-path: {} is a file, but a {} is a folder (its config and vocabulary files); give "
          "the folder",
          name, path.string(), known ? kind_name(known->kind) : std::string());
    weight_file_kind(path, "--" + name + "-path");  // refuses a file of neither kind here
    it->second.weights_file = path;
    it->second.path = component_file_config_folder(path, root, name, it->second.class_name);
    // (Inferring a config from the tensors' shapes is not built: one must be at hand.)
    check(fs::exists(it->second.path / "config.json"),
          "--{}-path: {} has no config.json beside it, and the model has none at {}; put the {} "
          "config.json beside the file",
          name, path.string(), (it->second.path / "config.json").string(), it->second.class_name);
  }
  return result;
}

fs::path component_config_path(const ComponentEntry& component) {
  check(fs::is_directory(component.path),
        "component '{}' ({}) has no folder at {}; download it or pass --{}-path", component.name,
        component.class_name, component.path.string(), component.name);
  for (const char* name : {"config.json", "scheduler_config.json"}) {
    fs::path candidate = component.path / name;
    if (fs::exists(candidate)) return candidate;
  }
  fail("component '{}' has no config.json or scheduler_config.json in {}", component.name,
       component.path.string());
}

const json& ModelIndex::config(const std::string& name) const {
  const fs::path path = component_config_path(component(name));
  std::lock_guard lock(configs->mutex);
  auto it = configs->parsed.find(path);
  if (it != configs->parsed.end()) return it->second;
  return configs->parsed.emplace(path, read_json_object(path)).first->second;
}

size_t ModelIndex::config_parses() const {
  std::lock_guard lock(configs->mutex);
  return configs->parsed.size();
}

}  // namespace mmgen
