// A model folder's own defaults: `mmgen.yaml` beside model_index.json, for a model whose settings
// differ from its pipeline's (a small model trained at 128x128 should not start at Wan2.1's
// 832x480, 81 frames and 50 steps). It sits between the pipeline's configs/ file and --config in
// the order of settings. Besides options it may say `draws: stills` (a model trained on single
// pictures: a multi-frame request is warned about) or `draws: video`.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include "generate/settings.h"

namespace mmgen::cli {

namespace fs = std::filesystem;

inline constexpr const char* kModelDefaultsFile = "mmgen.yaml";

struct ModelFolderDefaults {
  SettingsLayer layer = nlohmann::json::object();  // the options it sets
  fs::path file;                                   // empty when the folder has none
  std::optional<bool> draws_stills;                // `draws:`; nullopt when not said
};

// Reads <model_root>/mmgen.yaml when there is one. Option names are checked as in a --config
// file; relative paths are read from the model folder.
ModelFolderDefaults load_model_folder_defaults(const fs::path& model_root);

// The one warning line for a multi-frame request to a model that draws stills; empty when none.
std::string stills_warning(const ModelFolderDefaults& defaults, int64_t num_frames);

}  // namespace mmgen::cli
