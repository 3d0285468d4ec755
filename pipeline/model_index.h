// A diffusers model directory: `model_index.json` and the component folders it names.
//
// model_index.json holds `_class_name` (the pipeline), `_diffusers_version`, one entry per
// component `"name": [library, ClassName]` (`[null, null]` for an absent one), and extra values a
// pipeline registered (`boundary_ratio`, `expand_timesteps`, ...), kept as `extras`.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/json.h"
#include "models/lora/lora_file.h"

namespace mmgen {

namespace fs = std::filesystem;

struct ComponentEntry {
  std::string name;        // the model_index.json key: "transformer", "text_encoder", ...
  std::string library;     // "diffusers", "transformers", ...
  std::string class_name;  // "WanTransformer3DModel", ...
  fs::path path;           // its folder: <model>/<name>, or the --<name>-path override
  bool overridden = false;
  // A --<name>-path that names a file (GGUF or safetensors) rather than a folder: the weights
  // come from it, the config from `path` (the file's folder when a config.json lies beside it,
  // else <model>/<name>: pipeline/component_file.h).
  fs::path weights_file;
  // LoRAs merged into the component's weights when it loads (--lora-path: the transformer's),
  // in order (pipeline/component_loras.h).
  std::vector<lora::LoraUse> loras;
  lora::LoraMode lora_mode = lora::LoraMode::Auto;  // --lora-mode
};

// The component configs an index has parsed, by file: shared by every copy of the index (the
// generate command, the memory check and the loaded pipeline each hold one), so a run parses each
// config.json once whatever reads it.
struct ComponentConfigCache {
  std::mutex mutex;
  std::map<fs::path, nlohmann::json> parsed;
};

struct ModelIndex {
  fs::path root;
  std::string class_name;
  std::string diffusers_version;
  std::map<std::string, ComponentEntry> components;  // present components only
  std::vector<std::string> absent;                   // entries saved as [null, null]
  nlohmann::json extras = nlohmann::json::object();

  bool has(const std::string& component) const { return components.count(component) > 0; }
  const ComponentEntry& component(const std::string& name) const;
  std::vector<std::string> component_names() const;  // present ones, sorted

  // The component's JSON config (`config.json`, or `scheduler_config.json` for schedulers), parsed
  // on first use and kept; errors name the file. The reference stays valid while any copy of this
  // index lives.
  const nlohmann::json& config(const std::string& component) const;
  // How many config files this index and its copies have parsed (at most one per file).
  size_t config_parses() const;

  std::shared_ptr<ComponentConfigCache> configs = std::make_shared<ComponentConfigCache>();
};

// Reads `<root>/model_index.json`. `path_overrides` replaces component folders (--<name>-path),
// or gives a component's weights as one GGUF or safetensors file; naming a component the index
// does not list is an error that lists the valid names.
ModelIndex load_model_index(const fs::path& root,
                            const std::map<std::string, fs::path>& path_overrides = {});

// The config file a component folder holds, checked to exist.
fs::path component_config_path(const ComponentEntry& component);

}  // namespace mmgen
