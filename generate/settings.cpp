#include "generate/settings.h"

#include <CLI/CLI.hpp>

#include "core/error.h"
#include "core/file.h"
#include "core/limits.h"
#include "core/text.h"
#include "core/yaml.h"
#include "generate/foreign_names.h"
#include "generate/options.h"
#include "pipeline/model_index.h"

namespace mmgen::cli {

using json = nlohmann::json;

namespace {

std::vector<std::string> option_names(bool config_only, Command command = Command::Generate) {
  std::vector<std::string> names;
  for (const auto& option : command_options(command))
    if (!config_only || option.in_config) names.emplace_back(option.name);
  return names;
}

std::string hint(const std::string& name, const std::vector<std::string>& candidates,
                 const char* prefix, Command command = Command::Generate) {
  std::string nearest = nearest_name(name, candidates);
  return nearest.empty() ? fmt::format(" (see mmgen {} --help)", command_name(command))
                         : fmt::format(" (did you mean {}{}?)", prefix, nearest);
}

// An unknown flag (`dashes` "--" or "-") or config key (`dashes` ""): refused in one line that
// names mmgen's spelling of another tool's name, says a feature is coming, or suggests the nearest
// real name.
[[noreturn]] void unknown_name(const std::string& where, const std::string& name,
                               const std::string& dashes,
                               const std::vector<std::string>& candidates, Command command) {
  const std::string written = dashes + name;
  if (const auto foreign = foreign_option_hint(name, dashes)) {
    if (!foreign->starts_with(" ("))
      fail("{}: {}", where, *foreign);  // a coming feature: the whole sentence
    if (dashes.empty()) fail("{}: unknown option '{}'{}", where, name, *foreign);
    fail("{}: unknown flag {}{}", where, written, *foreign);
  }
  if (dashes.empty())
    fail("{}: unknown option '{}'{}", where, name, hint(name, candidates, "", command));
  fail("{}: unknown flag {}{}", where, written, hint(name, candidates, "--", command));
}

// Adds a component path; `where` names the source.
void add_component_path(SettingsLayer& layer, const std::string& component, const json& value,
                        const std::string& where) {
  check(value.is_string() && !value.get<std::string>().empty(), "{}: expected a folder path",
        where);
  layer["component-paths"][component] = value;
}

// "text-encoder-path" -> "text_encoder".
std::string component_of_path_flag(const std::string& name) {
  std::string component = name.substr(0, name.size() - 5);
  std::replace(component.begin(), component.end(), '-', '_');
  return component;
}

}  // namespace

SettingsLayer settings_from_document(const json& document, const std::string& where) {
  SettingsLayer layer = json::object();
  if (document.is_null()) return layer;  // an empty file sets nothing
  check(document.is_object(), "{}: expected a mapping of option names to values", where);
  for (auto it = document.begin(); it != document.end(); ++it) {
    const std::string key = normalize_option_name(it.key());
    const std::string source = fmt::format("{}: {}", where, it.key());
    if (key == "component-paths") {
      check(it->is_object(), "{}: expected a mapping of component names to folders", source);
      for (auto c = it->begin(); c != it->end(); ++c)
        add_component_path(layer, c.key(), *c, source);
      continue;
    }
    const OptionSpec* option = find_option(key);
    if (!option && key.ends_with("-path") && key.size() > 5) {  // transformer_path: DIR
      add_component_path(layer, it.key().substr(0, it.key().size() - 5), *it, source);
      continue;
    }
    if (option == nullptr) unknown_name(where, it.key(), "", option_names(true), Command::Generate);
    check(option->in_config,
          "{}: '{}' cannot be set inside a config file; give --{} on the command line", where,
          it.key(), option->name);
    if (it->is_null()) continue;
    layer[key] = convert_option_value(*option, *it, source);
  }
  return layer;
}

void check_component_paths(const SettingsLayer& layer, const std::vector<std::string>& components,
                           const std::vector<std::string>& absent, const std::string& config_file) {
  if (!layer.contains("component-paths")) return;
  const bool command_line = config_file.empty();
  const auto spelled = [&](std::string component) {
    if (!command_line) return component + "_path";
    std::replace(component.begin(), component.end(), '_', '-');
    return "--" + component + "-path";
  };
  for (auto it = layer["component-paths"].begin(); it != layer["component-paths"].end(); ++it) {
    const std::string& component = it.key();
    if (std::find(components.begin(), components.end(), component) == components.end() &&
        std::find(absent.begin(), absent.end(), component) == absent.end()) {
      std::vector<std::string> candidates = option_names(!command_line);
      for (const auto& real : components) {
        const std::string flag = spelled(real);
        candidates.push_back(command_line ? flag.substr(2) : flag);
      }
      std::string component_flags;
      for (const auto& real : components)
        component_flags += (component_flags.empty() ? "" : ", ") + spelled(real);
      if (!command_line)
        for (auto& candidate : candidates)
          std::replace(candidate.begin(), candidate.end(), '-', '_');
      const std::string wrong = spelled(component);
      const std::string nearest = nearest_name(command_line ? wrong.substr(2) : wrong, candidates);
      const std::string suggestion =
          nearest.empty() ? std::string()
                          : fmt::format(" (did you mean {}{}?)", command_line ? "--" : "", nearest);
      if (command_line)
        fail("generate: unknown flag {}{}; this model's component folders are set with {}", wrong,
             suggestion, component_flags);
      fail("{}: unknown option '{}'{}; this model's component folders are set with {}", config_file,
           wrong, suggestion, component_flags);
    }
    check(!it->is_null(), "generate: {} needs a value (the component's folder)",
          spelled(component));
  }
}

SettingsLayer load_config_file(const fs::path& path) {
  const std::string extension = path.extension().string();
  check(extension == ".yaml" || extension == ".yml" || extension == ".json",
        "--config {}: config files must end in .yaml, .yml or .json", path.string());
  check(fs::exists(path), "--config {}: no such file", path.string());
  SettingsLayer layer =
      extension == ".json"
          ? settings_from_document(read_json_object(path, /*unique_keys=*/true), path.string())
          : settings_from_document(yaml_to_json(read_text_file(path), path.string()),
                                   path.string());
  resolve_relative_paths(layer, path.parent_path());
  return layer;
}

void resolve_relative_paths(SettingsLayer& layer, const fs::path& folder) {
  if (folder.empty()) return;  // a file in the current folder: nothing to change
  const auto resolved = [&](const json& value) -> json {
    if (!value.is_string()) return value;
    const fs::path path = value.get<std::string>();
    if (path.empty() || path.is_absolute()) return value;
    return (folder / path).lexically_normal().string();
  };
  for (auto it = layer.begin(); it != layer.end(); ++it) {
    if (it.key() == "component-paths") {
      for (auto c = it->begin(); c != it->end(); ++c) *c = resolved(*c);
      continue;
    }
    const OptionSpec* option = find_option(it.key());
    if (!option || option->type != OptionType::Path) continue;
    if (it.key() == "model-path") {
      const json candidate = resolved(*it);
      if (candidate.is_string() && fs::is_directory(candidate.get<std::string>())) *it = candidate;
      continue;
    }
    *it = resolved(*it);
  }
}

SettingsLayer builtin_defaults(Command command) {
  SettingsLayer layer = json::object();
  for (const auto& option : command_options(command))
    if (!option.builtin_default.is_null()) layer[std::string(option.name)] = option.builtin_default;
  return layer;
}

SettingsLayer merge_layers(const std::vector<SettingsLayer>& lowest_first) {
  SettingsLayer merged = json::object();
  for (const auto& layer : lowest_first)
    for (auto it = layer.begin(); it != layer.end(); ++it) {
      if (it.key() == "component-paths") {
        for (auto c = it->begin(); c != it->end(); ++c) merged["component-paths"][c.key()] = *c;
      } else {
        merged[it.key()] = *it;
      }
    }
  return merged;
}

SettingsLayer parse_arguments(Command command, const std::vector<std::string>& arguments) {
  const std::string_view prefix = command_name(command);
  CLI::App app{fmt::format("mmgen {}", prefix), fmt::format("mmgen {}", prefix)};
  app.allow_extras();
  app.set_help_flag();  // --help is handled by the caller
  // Every option collects all its values, so "given twice" is ours to report in one line.
  std::map<std::string, std::vector<std::string>> raw;
  std::map<std::string, bool> flags;  // --overwrite, --overwrite=false
  std::map<std::string, CLI::Option*> parsed;
  for (const auto& option : command_options(command)) {
    const std::string name(option.name);
    CLI::Option* cli_option = option.type == OptionType::Flag
                                  ? app.add_flag("--" + name, flags[name], std::string(option.help))
                                  : app.add_option("--" + name, raw[name], std::string(option.help))
                                        ->allow_extra_args(false)
                                        ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
    parsed[name] = cli_option;
  }
  // A valued option with nothing after it: one line of ours rather than CLI11's wording.
  for (size_t i = 0; i < arguments.size(); ++i) {
    if (!arguments[i].starts_with("--") || arguments[i].find('=') != std::string::npos) continue;
    const OptionSpec* option = find_option(arguments[i].substr(2), command);
    if (option && option->type != OptionType::Flag)
      check(i + 1 < arguments.size() && !arguments[i + 1].starts_with("--"), "{}: {} needs a value",
            prefix, arguments[i]);
  }
  // CLI11 wants argv in reverse order when given a vector.
  std::vector<std::string> reversed(arguments.rbegin(), arguments.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    fail("{}: {}", prefix, e.what());
  }

  SettingsLayer layer = json::object();
  for (const auto& option : command_options(command)) {
    const std::string name(option.name);
    const size_t count = parsed[name]->count();
    if (count == 0) continue;
    if (option.type == OptionType::Flag) {
      layer[name] = flags[name];
      continue;
    }
    if (option.repeatable) {
      layer[name] = json::array();
      for (const auto& value : raw[name])
        layer[name].push_back(convert_option_value(option, value, "--" + name));
    } else {
      // Given more than once, the last one wins (as argparse-based tools and stable-diffusion.cpp
      // do), so a script's fixed arguments can be overridden by appending a flag; each value is
      // still checked.
      for (const auto& value : raw[name])
        layer[name] = convert_option_value(option, value, "--" + name);
    }
  }

  // What CLI11 did not know: per-component flags, or mistakes.
  const bool per_component = command == Command::Generate || command == Command::Encode;
  std::vector<std::string> extras = app.remaining();
  for (size_t i = 0; i < extras.size(); ++i) {
    std::string token = extras[i];
    bool has_value = true;
    // -W 512 (stable-diffusion.cpp): a short flag mmgen spells long.
    if (token.size() > 1 && token[0] == '-' && token[1] != '-' &&
        foreign_option_hint(token.substr(1), "-"))
      unknown_name(std::string(prefix), token.substr(1), "-", option_names(false, command),
                   command);
    check(token.starts_with("--"), "{}: unexpected argument '{}'; every value follows a --flag",
          prefix, token);
    std::string value;
    auto equals = token.find('=');
    if (equals != std::string::npos) {
      value = token.substr(equals + 1);
      token = token.substr(0, equals);
    } else if (i + 1 < extras.size() && !extras[i + 1].starts_with("--")) {
      value = extras[++i];
    } else {
      has_value = false;
    }
    const std::string name = token.substr(2);
    // A coming feature's flag (--image-path, --lora-path) says so before it could pass for a
    // component's --<component>-path.
    if (const auto foreign = foreign_option_hint(name, "--");
        foreign && !foreign->starts_with(" ("))
      fail("{}: {}", prefix, *foreign);
    const std::string dotted_backends = "component-attention-backends.";
    const std::string dotted_paths = "component-paths.";
    const bool component_flag =
        per_component && (name.starts_with(dotted_backends) ||
                          (command == Command::Generate &&
                           (name.starts_with(dotted_paths) ||
                            (name.ends_with("-path") && name.size() > 5 && !find_option(name)))));
    if (!component_flag)
      unknown_name(std::string(prefix), name, "--", option_names(false, command), command);
    if (command == Command::Generate && !name.starts_with(dotted_backends) && !has_value) {
      // --image-path with nothing after it: whether it is a flag at all is known only once the
      // model's components are (check_component_path_flags), so it is recorded without a value.
      const std::string component = name.starts_with(dotted_paths)
                                        ? name.substr(dotted_paths.size())
                                        : component_of_path_flag(name);
      layer["component-paths"][component] = nullptr;
      continue;
    }
    check(has_value, "{}: {} needs a value", prefix, token);
    if (name.starts_with(dotted_backends)) {
      check(!layer.contains("component-attention-backends") ||
                layer["component-attention-backends"].is_object(),
            "{}: use either --component-attention-backends SPEC or the dotted form, not both",
            token);
      layer["component-attention-backends"][name.substr(dotted_backends.size())] = value;
    } else if (name.starts_with(dotted_paths)) {
      add_component_path(layer, name.substr(dotted_paths.size()), value, token);
    } else {
      // --transformer-path DIR; the component name is checked against model_index.json later
      // (check_component_path_flags): a name that is no component is an unknown flag.
      add_component_path(layer, component_of_path_flag(name), value, token);
    }
  }
  return layer;
}

}  // namespace mmgen::cli
