// What a model folder holds, read from headers only (model_index.json, component configs and the
// safetensors headers; no tensor data): per component its class, files, parameter count, dtypes
// and sizes. `mmgen inspect` prints it and the memory estimate starts from it.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "pipeline/model_index.h"

namespace mmgen {

struct ComponentInventory {
  std::string name;  // model_index.json key
  std::string library;
  std::string class_name;
  fs::path path;
  bool overridden = false;
  // Weights (empty for components without safetensors: tokenizer, scheduler).
  std::vector<fs::path> weight_files;
  int64_t tensors = 0;
  int64_t parameters = 0;                           // elements of all tensors
  std::map<std::string, int64_t> dtype_parameters;  // "bf16" -> elements stored as bf16
  uint64_t tensor_bytes = 0;   // the tensors' data, as stored (what a memory mapping touches)
  uint64_t on_disk_bytes = 0;  // every regular file of the folder (weights, configs, vocab)
  // A component given as one file (--<name>-path FILE): the file, its format and how its keys
  // were mapped onto the model's (pipeline/component_weights.h).
  fs::path weights_file;
  std::string file_kind;  // "GGUF" or "safetensors"; empty for a folder
  std::string layout;     // "diffusers", "original Wan", ...; empty where the class lists none
  std::string prefix;     // a wrapper prefix taken off every key
  size_t mapped_keys = 0;
  size_t split_keys = 0, fused_tensors = 0;  // keys cut by rows from fused tensors
  std::vector<std::pair<std::string, std::string>> mapping_examples;  // (stored, model)

  bool has_weights() const { return !weight_files.empty(); }
  // Bytes of the weights once converted to float32, the dtype the CPU kernels compute in.
  uint64_t float32_bytes() const { return uint64_t(parameters) * 4; }
};

struct ModelInventory {
  fs::path root;
  std::string class_name;
  std::vector<ComponentInventory> components;  // sorted by name

  const ComponentInventory* find(const std::string& name) const;
  uint64_t tensor_bytes() const;
  uint64_t on_disk_bytes() const;
  int64_t parameters() const;
};

// Reads every present component's headers. A weight folder that the loader would refuse (several
// single files, a broken index) is an Error naming it, as loading would be.
ModelInventory take_inventory(const ModelIndex& index);

nlohmann::json inventory_json(const ModelInventory& inventory);

}  // namespace mmgen
