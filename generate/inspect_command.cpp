#include "generate/inspect_command.h"

#include <fmt/format.h>

#include <algorithm>
#include <iostream>

#include "core/error.h"
#include "core/system_memory.h"
#include "generate/generate_command.h"
#include "generate/memory_check.h"
#include "pipeline/component_loras.h"
#include "pipeline/model_inventory.h"

namespace mmgen::cli {

using json = nlohmann::json;

namespace {

struct InspectArguments {
  std::vector<std::string> generate;  // passed to resolve_generate
  bool json = false;
};

InspectArguments split_arguments(const std::vector<std::string>& arguments) {
  InspectArguments result;
  bool has_prompt = false;
  for (const auto& argument : arguments) {
    if (argument == "--json") {
      result.json = true;
      continue;
    }
    check(argument != "--dry-run",
          "inspect: --dry-run belongs to generate; inspect never loads "
          "weights anyway");
    if (argument == "--prompt" || argument.starts_with("--prompt=") ||
        argument == "--prompt-file-path" || argument.starts_with("--prompt-file-path="))
      has_prompt = true;
    result.generate.push_back(argument);
  }
  const auto given = [&](const char* flag) {
    return std::any_of(arguments.begin(), arguments.end(), [&](const std::string& a) {
      return a == flag || a.starts_with(std::string(flag) + "=");
    });
  };
  check(given("--model-path") || given("--config"),
        "inspect: no model; pass --model-path DIR (a folder with model_index.json)");
  // The prompt does not change the memory a request needs; inspect does not ask for one.
  if (!has_prompt) result.generate.insert(result.generate.end(), {"--prompt", ""});
  return result;
}

// "1.42 B", "8.31 M", "12.5 K", "512".
std::string format_count(int64_t count) {
  const double value = double(count);
  if (count >= 1'000'000'000) return fmt::format("{:.2f} B", value / 1e9);
  if (count >= 1'000'000) return fmt::format("{:.2f} M", value / 1e6);
  if (count >= 1'000) return fmt::format("{:.1f} K", value / 1e3);
  return std::to_string(count);
}

std::string pad(std::string text, size_t width) {
  if (text.size() < width) text.resize(width, ' ');
  return text + " ";
}

}  // namespace

json inspect_json(const std::vector<std::string>& arguments) {
  const InspectArguments split = split_arguments(arguments);
  const ResolvedGenerate resolved = resolve_generate(split.generate);
  const ModelInventory inventory = take_inventory(resolved.index);
  json report = inventory_json(inventory);
  report["diffusers_version"] = resolved.index.diffusers_version;
  for (auto& [name, component] : report["components"].items()) {
    const json attention = resolved.attention.component_json(name);
    component["attention_backend"] = attention["attention_backend"];
    component["attention_backend_source"] = attention["attention_backend_source"];
    if (resolved.index.has(name) && !resolved.index.component(name).loras.empty())
      component["loras"] = loras_json(resolved.index.component(name));
  }
  json request = resolved.request.settings;
  for (const char* key : {"prompt", "negative_prompt", "dry_run", "prompt_file_path"})
    request.erase(key);
  report["request"] = request;
  report["latent_shape"] = resolved.latent_shape;
  const MemoryCheck memory = check_request_memory(*resolved.spec, resolved.request, resolved.index,
                                                  inventory, available_memory());
  report["memory"] = memory.estimate.to_json();
  report["available_memory_bytes"] =
      memory.available ? json(memory.available->bytes) : json(nullptr);
  report["available_memory_source"] =
      memory.available ? json(memory.available->source) : json(nullptr);
  report["memory_fits"] = memory.available ? json(memory.fits()) : json(nullptr);
  report["memory_suggestions"] = memory.suggestions;
  // What the GPU keeps of the weights with --device cuda (what --max-gpu-memory is held against).
  report["gpu_weights"] =
      gpu_weights_json(*resolved.spec, resolved.request, resolved.index, inventory);
  return report;
}

int run_inspect(const std::vector<std::string>& arguments) {
  const json report = inspect_json(arguments);
  if (std::find(arguments.begin(), arguments.end(), "--json") != arguments.end()) {
    std::cout << report.dump(2) << std::endl;
    return 0;
  }
  std::string out = fmt::format("{} at {} (diffusers {})\n", report["pipeline"].get<std::string>(),
                                report["model_path"].get<std::string>(),
                                report["diffusers_version"].get<std::string>());
  // Columns as wide as their longest entry (FLUX's text_encoder_2, the scheduler's class).
  size_t name_width = 13, class_width = 26;
  for (const auto& [name, c] : report["components"].items()) {
    name_width = std::max(name_width, name.size());
    class_width = std::max(class_width, c["class"].get<std::string>().size());
  }
  out += fmt::format("{}{}{}{}{}{}{}{}\n", pad("component", name_width), pad("class", class_width),
                     pad("parameters", 11), pad("dtypes", 9), pad("on disk", 10), pad("mapped", 10),
                     pad("as f32", 10), "attention");
  for (const auto& [name, c] : report["components"].items()) {
    const bool weights = c["parameters"].get<int64_t>() > 0;
    std::string dtypes;
    for (const auto& [dtype, count] : c["dtypes"].items())
      dtypes += (dtypes.empty() ? "" : "+") + dtype;
    std::string attention = "-";
    if (!c["attention_backend"].is_null())
      attention = fmt::format("{} ({})", c["attention_backend"].get<std::string>(),
                              c["attention_backend_source"].get<std::string>());
    out += fmt::format("{}{}{}{}{}{}{}{}\n", pad(name, name_width),
                       pad(c["class"].get<std::string>(), class_width),
                       pad(weights ? format_count(c["parameters"].get<int64_t>()) : "-", 11),
                       pad(dtypes.empty() ? "-" : dtypes, 9),
                       pad(format_bytes(c["on_disk_bytes"].get<uint64_t>()), 10),
                       pad(weights ? format_bytes(c["tensor_bytes"].get<uint64_t>()) : "-", 10),
                       pad(weights ? format_bytes(c["float32_bytes"].get<uint64_t>()) : "-", 10),
                       attention);
  }
  out += fmt::format("{}{}{}{}{}\n", pad("total", name_width), pad("", class_width),
                     pad(format_count(report["parameters"].get<int64_t>()), 11), pad("", 9),
                     format_bytes(report["on_disk_bytes"].get<uint64_t>()));
  // A component given as one file: which file, its layout, and what the key mapping did.
  for (const auto& [name, c] : report["components"].items()) {
    if (!c.contains("weights_file")) continue;
    const json& file = c["weights_file"];
    std::string mapping =
        fmt::format("{} of {} keys renamed", file["mapped_keys"].dump(), c["tensors"].dump());
    if (file["split_keys"].get<size_t>() > 0)
      mapping += fmt::format(", {} of them cut by rows from {} fused tensors",
                             file["split_keys"].dump(), file["fused_tensors"].dump());
    if (!file["prefix_removed"].get<std::string>().empty())
      mapping += fmt::format(" (prefix {} removed)", file["prefix_removed"].get<std::string>());
    for (size_t i = 0; i < file["examples"].size(); ++i)
      mapping += fmt::format("{}{} -> {}", i == 0 ? ", e.g. " : "; ",
                             file["examples"][i]["stored"].get<std::string>(),
                             file["examples"][i]["model"].get<std::string>());
    out +=
        fmt::format("{}: file {} ({}, {} layout): {}\n", name, file["path"].get<std::string>(),
                    file["format"].get<std::string>(), file["layout"].get<std::string>(), mapping);
  }
  // Each LoRA a component takes: its file, what it names, and how it applies.
  for (const auto& [name, c] : report["components"].items()) {
    if (!c.contains("loras")) continue;
    for (const json& lora : c["loras"]) {
      std::string ranks;
      for (const json& rank : lora["ranks"]) ranks += (ranks.empty() ? "" : ",") + rank.dump();
      out += fmt::format(
          "{}: LoRA {} ({} names, sha256 {}...): {} layer(s), rank {}, scale {}, "
          "mode {}\n",
          name, lora["path"].get<std::string>(), lora["format"].get<std::string>(),
          lora["sha256"].get<std::string>().substr(0, 12), lora["layers"].dump(),
          ranks.empty() ? "-" : ranks, lora["scale"].dump(), lora["mode"].get<std::string>());
    }
  }
  const json& r = report["request"];
  const json& m = report["memory"];
  out += fmt::format(
      "\nrequest: {}x{}, {} frame(s), {} steps, max_sequence_length {}{} (latents {})\n",
      r["width"].dump(), r["height"].dump(), r["num_frames"].dump(),
      r["num_inference_steps"].dump(), r["max_sequence_length"].dump(),
      r["vae_tiling"].get<bool>() ? ", --vae-tiling" : "", report["latent_shape"].dump());
  auto bytes = [&](const char* key) { return format_bytes(m[key].get<uint64_t>()); };
  out += fmt::format(
      "memory:  {} in all = weights {} + runtime {} + the largest stage, {}\n"
      "         (text encoding {}, denoising {}, VAE decode {} + video {})\n",
      bytes("total_bytes"), bytes("weights_bytes"), bytes("overhead_bytes"),
      m["largest_stage"].get<std::string>(), bytes("text_encoding_bytes"), bytes("denoising_bytes"),
      bytes("vae_decode_bytes"), bytes("output_bytes"));
  if (report["available_memory_bytes"].is_null()) {
    out += "free:    unknown on this machine\n";
  } else {
    out += fmt::format("free:    {} ({}): {}\n",
                       format_bytes(report["available_memory_bytes"].get<uint64_t>()),
                       report["available_memory_source"].get<std::string>(),
                       report["memory_fits"].get<bool>() ? "fits" : "does NOT fit");
    if (!report["memory_fits"].get<bool>()) {
      std::string flags;
      for (const auto& s : report["memory_suggestions"])
        flags += (flags.empty() ? "" : " or ") + s.get<std::string>();
      out += "         would fit: " +
             (flags.empty() ? std::string("nothing; the weights alone are too large") : flags) +
             "\n";
    }
  }
  if (!report["gpu_weights"].is_null()) {
    const json& g = report["gpu_weights"];
    auto gpu = [&](const char* key) { return format_bytes(g[key].get<uint64_t>()); };
    out += fmt::format(
        "gpu:     weights {} resident at once with --device cuda{} (text encoder {}, transformer "
        "{}{}, VAE at most {}; activations not counted)\n",
        gpu("resident_bytes"),
        g["offload"] == "blocks"   ? ", one stage at a time and the blocks streamed (--gpu-offload)"
        : g["offload"] == "stages" ? ", one stage at a time (--gpu-offload)"
                                   : "",
        gpu("text_encoder_bytes"), gpu("transformer_bytes"),
        // A pipeline that cannot stream its blocks has no streamed figure.
        g["transformer_streamed_bytes"].get<uint64_t>() > 0
            ? fmt::format(", {} with its blocks streamed", gpu("transformer_streamed_bytes"))
            : std::string(),
        gpu("vae_bytes"));
  }
  std::cout << out;
  return 0;
}

std::string inspect_help() {
  return "Usage: mmgen inspect --model-path DIR [generate options] [--json]\n\n"
         "Reads model_index.json, the component configs and the safetensors headers (no weights)\n"
         "and prints the pipeline, each component's class, parameters, dtypes, size on disk,\n"
         "size mapped in memory and as float32, and the attention backend it would get; then\n"
         "the memory the request described by the other flags needs (weights, text encoding,\n"
         "denoising, VAE decode and the output video) against the free memory, and what would\n"
         "fit when it does not. Every `mmgen generate` option is accepted (--prompt is not\n"
         "needed). --json prints the same as one JSON object.\n";
}

}  // namespace mmgen::cli
