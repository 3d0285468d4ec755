#include "pipeline/model_inventory.h"

#include <algorithm>

#include "core/safetensors.h"
#include "pipeline/component_file.h"
#include "pipeline/component_weights.h"

namespace mmgen {

namespace {

// Safetensors (one file or shards) or one GGUF file: what WeightStore::open_folder reads.
bool folder_has_weights(const fs::path& folder) {
  for (const auto& entry : fs::directory_iterator(folder)) {
    const std::string name = entry.path().filename().string();
    if (name.ends_with(".safetensors") || name.ends_with(".gguf")) return true;
  }
  return false;
}

uint64_t folder_bytes(const fs::path& folder) {
  uint64_t total = 0;
  for (const auto& entry : fs::recursive_directory_iterator(folder))
    if (entry.is_regular_file()) total += entry.file_size();
  return total;
}

ComponentInventory inventory_of(const ComponentEntry& entry) {
  ComponentInventory component;
  component.name = entry.name;
  component.library = entry.library;
  component.class_name = entry.class_name;
  component.path = entry.path;
  component.overridden = entry.overridden;
  const bool file = !entry.weights_file.empty();
  if (file) {
    component.weights_file = entry.weights_file;
    component.file_kind =
        weight_file_kind_name(weight_file_kind(entry.weights_file, "--" + entry.name + "-path"));
    component.on_disk_bytes = fs::file_size(entry.weights_file);
  } else {
    if (!fs::is_directory(entry.path)) return component;  // check_components reports it
    component.on_disk_bytes = folder_bytes(entry.path);
    if (!folder_has_weights(entry.path)) return component;
  }
  // The loader's own choice of files (single file or index shards) and key mapping, so the
  // figures describe what generate would map.
  const ComponentWeights weights = open_component_weights(entry);
  const WeightStore& store = weights.store;
  component.layout = weights.layout;
  component.prefix = weights.prefix;
  component.mapped_keys = weights.mapped;
  component.split_keys = weights.split;
  component.fused_tensors = weights.fused;
  component.mapping_examples = weights.examples;
  component.weight_files = store.files();
  for (const auto& name : store.names()) {
    const TensorInfo& info = store.info(name);
    int64_t elements = 1;
    for (int64_t size : info.shape) elements *= size;
    ++component.tensors;
    component.parameters += elements;
    component.dtype_parameters[store.stored_type(name)] += elements;
    component.tensor_bytes += info.end - info.begin;
  }
  return component;
}

}  // namespace

const ComponentInventory* ModelInventory::find(const std::string& name) const {
  for (const auto& component : components)
    if (component.name == name) return &component;
  return nullptr;
}

uint64_t ModelInventory::tensor_bytes() const {
  uint64_t total = 0;
  for (const auto& component : components) total += component.tensor_bytes;
  return total;
}

uint64_t ModelInventory::on_disk_bytes() const {
  uint64_t total = 0;
  for (const auto& component : components) total += component.on_disk_bytes;
  return total;
}

int64_t ModelInventory::parameters() const {
  int64_t total = 0;
  for (const auto& component : components) total += component.parameters;
  return total;
}

ModelInventory take_inventory(const ModelIndex& index) {
  ModelInventory inventory;
  inventory.root = index.root;
  inventory.class_name = index.class_name;
  for (const auto& [name, entry] : index.components)
    inventory.components.push_back(inventory_of(entry));
  return inventory;
}

nlohmann::json inventory_json(const ModelInventory& inventory) {
  nlohmann::json components = nlohmann::json::object();
  for (const auto& c : inventory.components) {
    nlohmann::json files = nlohmann::json::array();
    for (const auto& file : c.weight_files) files.push_back(file.filename().string());
    components[c.name] = {{"class", c.class_name},           {"library", c.library},
                          {"path", c.path.string()},         {"overridden", c.overridden},
                          {"weight_files", files},           {"tensors", c.tensors},
                          {"parameters", c.parameters},      {"dtypes", c.dtype_parameters},
                          {"tensor_bytes", c.tensor_bytes},  {"float32_bytes", c.float32_bytes()},
                          {"on_disk_bytes", c.on_disk_bytes}};
    if (!c.weights_file.empty()) {
      nlohmann::json examples = nlohmann::json::array();
      for (const auto& [stored, model] : c.mapping_examples)
        examples.push_back({{"stored", stored}, {"model", model}});
      components[c.name]["weights_file"] = {{"path", c.weights_file.string()},
                                            {"format", c.file_kind},
                                            {"layout", c.layout.empty() ? "as stored" : c.layout},
                                            {"prefix_removed", c.prefix},
                                            {"mapped_keys", c.mapped_keys},
                                            {"split_keys", c.split_keys},
                                            {"fused_tensors", c.fused_tensors},
                                            {"examples", examples}};
    }
  }
  return {{"pipeline", inventory.class_name},           {"model_path", inventory.root.string()},
          {"parameters", inventory.parameters()},       {"tensor_bytes", inventory.tensor_bytes()},
          {"on_disk_bytes", inventory.on_disk_bytes()}, {"components", components}};
}

}  // namespace mmgen
