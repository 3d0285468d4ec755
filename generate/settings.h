// Settings for `generate` from four layers, highest first: the command line, a --config file,
// the pipeline's defaults in configs/, and the option table's built-in defaults. Only values a
// layer actually gives take part, so an explicit value wins even when it equals a default.
#pragma once

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "generate/options.h"

namespace mmgen::cli {

namespace fs = std::filesystem;

// One layer's values: option name (dashes) -> typed JSON value. `component-paths` holds an object
// of component -> folder when given.
using SettingsLayer = nlohmann::json;

// Parses the arguments after a subcommand (argv-style, without the program and subcommand names)
// against the command's rows of the option table (generate/options.h): values are typed and
// checked there; a repeatable option gives a list; --component-attention-backends.<component> NAME
// (generate, encode) and --<component>-path DIR (generate) are read as well.
SettingsLayer parse_arguments(Command command, const std::vector<std::string>& arguments);

// --<component>-path flags (generate) and <component>_path keys of a config file exist only for
// the model's components (`components`, from model_index.json; `absent`: the ones it lists as
// [null, null], which load_model_index reports itself): any other name is an unknown flag or key,
// reported with the nearest real one. `config_file` names the file the layer came from; empty for
// the command line. A flag given without a folder is reported here too.
void check_component_paths(const SettingsLayer& layer, const std::vector<std::string>& components,
                           const std::vector<std::string>& absent,
                           const std::string& config_file = {});

// Reads a --config file: .yaml/.yml as YAML, .json as JSON; any other extension is an error.
// Relative paths in it are read from the file's folder (resolve_relative_paths).
SettingsLayer load_config_file(const fs::path& path);

// Makes the relative paths of a file's layer relative to that file's folder, so a config file
// means the same from any current folder: every path option (output_path, latents, ...) and every
// component path. A relative model_path is taken from `folder` when that names a folder there,
// and left as written otherwise (a Hugging Face id such as Wan-AI/Wan2.1-T2V-1.3B-Diffusers).
void resolve_relative_paths(SettingsLayer& layer, const fs::path& folder);

// Converts a YAML/JSON document of options (e.g. a configs/ file) into a layer; `where` names it.
SettingsLayer settings_from_document(const nlohmann::json& document, const std::string& where);

// The built-in defaults of a command's options, from the option table.
SettingsLayer builtin_defaults(Command command = Command::Generate);

// Later layers override earlier ones key by key (component-paths merges per component).
SettingsLayer merge_layers(const std::vector<SettingsLayer>& lowest_first);

}  // namespace mmgen::cli
