#include "generate/generate_command.h"

#include <omp.h>
#include <spdlog/spdlog.h>

#include <iostream>

#include "core/error.h"
#include "generate/options.h"
#include "generate/settings.h"
#include "pipeline/output.h"
#include "pipeline/progress.h"

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
  // Batch generation from a prompt file is not built yet; say so rather than run an empty prompt.
  check(!upper.contains("prompt-file-path"),
        "--prompt-file-path: batch generation is not available in this version of generate; pass "
        "--prompt TEXT (mmgen encode --prompt-file-path FILE encodes a file of prompts)");
  check(upper.contains("prompt"), "generate: no prompt; pass --prompt TEXT");

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
  resolved.attention = attention::plan_attention(resolved.index, resolved.request);
  return resolved;
}

json dry_run_json(const ResolvedGenerate& resolved) {
  json components = json::object();
  for (const auto& [name, entry] : resolved.index.components) {
    json component = {
        {"class", entry.class_name}, {"library", entry.library}, {"path", entry.path.string()}};
    component.update(resolved.attention.component_json(name));
    components[name] = component;
  }
  return {{"pipeline", resolved.index.class_name},
          {"model_path", resolved.index.root.string()},
          {"request", resolved.request.settings},
          {"latent_shape", resolved.latent_shape},
          {"components", components},
          {"attention_backend_config", resolved.attention.config_json()}};
}

namespace {

// What a finished output records about how it was made.
json output_settings(const ResolvedGenerate& resolved) {
  json settings = resolved.request.settings;
  settings.erase("dry_run");
  settings["pipeline"] = resolved.index.class_name;
  settings["generator"] = "mmgen 0.1.0";
  return settings;
}

void apply_runtime_settings(const Request& request) {
  spdlog::set_level(spdlog::level::from_str(request.log_level));
  if (request.threads > 0) omp_set_num_threads(int(request.threads));
  check(request.device != "cuda",
        "--device cuda: this build has no CUDA support; use --device cpu");
}

int run_resolved(const ResolvedGenerate& resolved) {
  const Request& request = resolved.request;
  apply_runtime_settings(request);
  const fs::path path = output_file_path(request);
  spdlog::info("{} on {}: {}x{}, {} frame(s), {} steps, guidance {}, seed {}",
               resolved.index.class_name, resolved.index.root.string(), request.width,
               request.height, request.num_frames, request.num_inference_steps,
               request.guidance_scale, request.seed);
  attention::log_attention_plan(resolved.attention);
  const Tensor frames = resolved.spec->generate(request, resolved.index, resolved.attention);
  Progress write("write", 1);
  for (const auto& written :
       write_frames(frames, request.output_format, path, output_settings(resolved), request.fps))
    spdlog::info("wrote {}", written.string());
  write.finish();
  return 0;
}

}  // namespace

int run_generate(const std::vector<std::string>& arguments) {
  ResolvedGenerate resolved = resolve_generate(arguments);
  if (resolved.request.dry_run) {
    std::cout << dry_run_json(resolved).dump(2) << std::endl;
    return 0;
  }
  return run_resolved(resolved);
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
