// A component given as one weights file (`--transformer-path model.gguf`, a ComfyUI
// `diffusion_models/*.safetensors`) instead of a folder: what the file is, told from its first
// bytes, and which folder supplies its config.json.
#pragma once

#include <filesystem>
#include <string>

namespace mmgen {

namespace fs = std::filesystem;

enum class WeightFileKind { Gguf, Safetensors };

// The file's format from its magic bytes (a GGUF's "GGUF", a safetensors' 8-byte header length
// and the '{' that opens its header), whatever its name. `flag` names where it came from in the
// error a file of neither kind gets (`--transformer-path`).
WeightFileKind weight_file_kind(const fs::path& file, const std::string& flag);
const char* weight_file_kind_name(WeightFileKind kind);

// The folder whose config.json describes `file` as component `component` (class `class_name`)
// of the model at `root`: the file's own folder where the config.json beside it names that class
// (`_class_name`, or transformers' `architectures`), else the model folder's component folder
// (<root>/<component>), the config the file's weights replace. A config.json of another class
// beside the file (a folder of several components' files, where `mmgen convert` left the first
// one's config) is not it.
fs::path component_file_config_folder(const fs::path& file, const fs::path& root,
                                      const std::string& component, const std::string& class_name);

}  // namespace mmgen
