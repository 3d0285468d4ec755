#include "generate/generate_command.h"

#include <spdlog/spdlog.h>

#include <iostream>

#include "core/error.h"
#include "generate/options.h"
#include "generate/settings.h"

namespace mmgen::cli {

using json = nlohmann::json;

ResolvedGenerate resolve_generate(const std::vector<std::string>& arguments) {
  const SettingsLayer command_line = parse_generate_arguments(arguments);
  SettingsLayer config_file = json::object();
  if (command_line.contains("config"))
    config_file = load_config_file(command_line["config"].get<std::string>());

  // The model path decides the pipeline, whose defaults sit below the config file and the flags.
  const SettingsLayer upper = merge_layers({config_file, command_line});
  check(upper.contains("model-path"),
        "generate: no model; pass --model-path DIR (a folder with model_index.json)");
  const bool has_prompt = upper.contains("prompt") || upper.contains("prompt-file-path");
  check(has_prompt, "generate: no prompt; pass --prompt TEXT or --prompt-file-path FILE");

  std::map<std::string, fs::path> component_paths;
  if (upper.contains("component-paths"))
    for (auto it = upper["component-paths"].begin(); it != upper["component-paths"].end(); ++it)
      component_paths[it.key()] = it->get<std::string>();

  ResolvedGenerate resolved;
  resolved.index = load_model_index(upper["model-path"].get<std::string>(), component_paths);
  resolved.spec =
      &find_pipeline(resolved.index.class_name, resolved.index.root / "model_index.json");
  const std::string defaults_name = "configs/" + resolved.spec->defaults_file;
  const SettingsLayer pipeline_defaults = settings_from_document(
      yaml_to_json(embedded_config(resolved.spec->defaults_file), defaults_name), defaults_name);

  SettingsLayer merged =
      merge_layers({builtin_defaults(), pipeline_defaults, config_file, command_line});
  merged.erase("config");
  resolved.request = request_from_settings(merged);
  if (command_line.contains("config")) resolved.request.settings["config"] = command_line["config"];
  check_components(*resolved.spec, resolved.index);
  resolved.spec->validate(resolved.request, resolved.index);
  resolved.latent_shape = resolved.spec->latent_shape(resolved.request, resolved.index);
  return resolved;
}

json dry_run_json(const ResolvedGenerate& resolved) {
  json components = json::object();
  for (const auto& [name, entry] : resolved.index.components) {
    components[name] = {{"class", entry.class_name},
                        {"library", entry.library},
                        {"path", entry.path.string()},
                        {"attention_backend", nullptr},
                        {"attention_backend_source", nullptr}};
  }
  return {{"pipeline", resolved.index.class_name},
          {"model_path", resolved.index.root.string()},
          {"request", resolved.request.settings},
          {"latent_shape", resolved.latent_shape},
          {"components", components},
          {"attention_backend_config", resolved.request.attention_backend_config}};
}

int run_generate(const std::vector<std::string>& arguments) {
  ResolvedGenerate resolved = resolve_generate(arguments);
  if (resolved.request.dry_run) {
    std::cout << dry_run_json(resolved).dump(2) << std::endl;
    return 0;
  }
  fail(
      "generate: the {} pipeline is not built yet in this version; --dry-run shows the resolved "
      "request",
      resolved.index.class_name);
}

std::string generate_help() {
  std::string text =
      "Usage: mmgen generate --model-path DIR --prompt TEXT [options]\n\n"
      "Settings come from, highest first: these flags, --config FILE, the pipeline's defaults, "
      "built-in defaults.\n"
      "Per component: --<component>-path DIR replaces a component's folder;\n"
      "               --component-attention-backends.<component> NAME sets one component's "
      "attention backend.\n\n"
      "Options:\n";
  for (const auto& option : generate_options()) {
    std::string flag = "  --" + std::string(option.name);
    if (option.type != OptionType::Flag) flag += " VALUE";
    if (flag.size() < 36) flag.resize(36, ' ');
    text += flag + " " + std::string(option.help);
    if (!option.builtin_default.is_null() && option.type != OptionType::Flag)
      text += " [default: " +
              (option.builtin_default.is_string() ? option.builtin_default.get<std::string>()
                                                  : option.builtin_default.dump()) +
              "]";
    text += "\n";
  }
  return text;
}

}  // namespace mmgen::cli
