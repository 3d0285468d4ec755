#include "generate/backends_command.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <iostream>
#include <set>

#include "attention/backend_config.h"
#include "attention/device_choice.h"
#include "core/error.h"

namespace mmgen::cli {

using json = nlohmann::json;
using namespace attention;

namespace {

std::vector<std::string> platform_names(const std::vector<Platform>& platforms) {
  std::vector<std::string> names;
  for (auto platform : platforms) names.emplace_back(platform_name(platform));
  return names;
}

std::string or_dash(std::string_view text) {
  return text.empty() ? "-" : std::string(text);
}

std::string config_default(const ConfigKey& key) {
  if (key.default_value.is_null())
    return key.required_when.empty() ? "-" : fmt::format("required when {}", key.required_when);
  return key.default_value.is_string() ? key.default_value.get<std::string>()
                                       : key.default_value.dump();
}

json config_json(const BackendInfo& backend) {
  json keys = json::array();
  for (const auto& key : backend.config)
    keys.push_back({{"name", key.name},
                    {"accepts", describe_accepted(key)},
                    {"default", key.default_value},
                    {"aliases", key.aliases},
                    {"required_when", key.required_when.empty() ? json() : json(key.required_when)},
                    {"help", key.help}});
  return keys;
}

}  // namespace

BackendStatus backend_status(const Machine& machine, const BackendInfo& backend) {
  std::vector<std::string> reasons;
  std::set<std::string> visited;
  std::string name(backend.name);
  while (true) {
    visited.insert(name);
    const Availability availability =
        kernel_availability(machine, backend.family, name, machine.dtype, 0);
    if (availability.ok) {
      if (name == backend.name) return {"available", {}, {}};
      return {"fallback", name, fmt::format("{}", fmt::join(reasons, "; "))};
    }
    reasons.push_back(fmt::format("{}: {}", name, availability.reason));
    const BackendInfo* entry = find_backend(backend.family, name);
    if (!entry || entry->fallback.empty() || visited.count(std::string(entry->fallback)))
      return {"unavailable", {}, fmt::format("{}", fmt::join(reasons, "; "))};
    name = std::string(entry->fallback);
  }
}

json backends_json(const Machine& machine) {
  json backends = json::array();
  for (const auto& backend : backend_catalogue()) {
    const BackendStatus status = backend_status(machine, backend);
    backends.push_back(
        {{"name", backend.name},
         {"family", family_name(backend.family)},
         {"summary", backend.summary},
         {"aliases", backend.aliases},
         {"platforms", platform_names(backend.platforms)},
         {"build_needs", backend.build_needs},
         {"gpu_arch", backend.gpu_arch.empty() ? json() : json(backend.gpu_arch)},
         {"dtypes", backend.dtypes},
         {"head_sizes", backend.head_sizes},
         {"page_sizes", backend.page_sizes.empty() ? json() : json(backend.page_sizes)},
         {"sparse", backend.sparse},
         {"extra_weights", backend.extra_weights.empty() ? json() : json(backend.extra_weights)},
         {"per_step_state", backend.per_step_state.empty() ? json() : json(backend.per_step_state)},
         {"fallback", backend.fallback.empty() ? json() : json(backend.fallback)},
         {"paged_counterpart",
          backend.paged_counterpart.empty() ? json() : json(backend.paged_counterpart)},
         {"config", config_json(backend)},
         {"status", status.state},
         {"falls_back_to", status.fallback_to.empty() ? json() : json(status.fallback_to)},
         {"reason", status.reason.empty() ? json() : json(status.reason)}});
  }
  std::vector<std::string> kernels;
  for (const auto& kernel : machine.kernels)
    kernels.push_back(fmt::format("{} {} ({})", family_name(kernel.family), kernel.backend,
                                  platform_name(kernel.platform)));
  auto auto_or_null = [&](Family family) -> json {
    try {
      return auto_backend(machine, family, machine.dtype, 0);
    } catch (const Error&) {
      return nullptr;
    }
  };
  return {{"machine", machine.description},
          {"dtype", machine.dtype},
          {"kernels", kernels},
          {"auto", {{"dit", auto_or_null(Family::Dit)}, {"paged", auto_or_null(Family::Paged)}}},
          {"backends", backends}};
}

std::string backends_text(const Machine& machine) {
  const json info = backends_json(machine);
  std::string text = fmt::format("Attention backends on this machine ({}, {}).\n",
                                 machine.description, machine.dtype);
  for (Family family : {Family::Dit, Family::Paged}) {
    text += family == Family::Dit ? "\nDiT family (diffusion transformers, VAE):\n"
                                  : "\nPaged family (text encoders):\n";
    for (const auto& backend : info["backends"]) {
      if (backend["family"] != family_name(family)) continue;
      std::string line = fmt::format("  {:<25} ", backend["name"].get<std::string>());
      const std::string status = backend["status"];
      if (status == "available")
        line += "available";
      else if (status == "fallback")
        line += fmt::format("falls back to {} ({})", backend["falls_back_to"].get<std::string>(),
                            backend["reason"].get<std::string>());
      else
        line += fmt::format("unavailable ({})", backend["reason"].get<std::string>());
      text += line + "\n";
    }
  }
  auto name_or = [](const json& value) {
    return value.is_null() ? std::string("none") : value.get<std::string>();
  };
  text += fmt::format(
      "\nAuto choice here: {} for diffusion transformers, {} for text encoders.\n"
      "Choose with --attention-backend NAME or --component-attention-backends "
      "component=NAME; details: docs/attention-backends.md.\n",
      name_or(info["auto"]["dit"]), name_or(info["auto"]["paged"]));
  return text;
}

std::string backends_markdown() {
  std::string md =
      "# Attention backends\n\n"
      "<!-- Generated by `mmgen backends --markdown` from the catalogue (DiT family: the "
      "descriptors in attention/backends/<name>/, listed in attention/backends/all.cpp; paged "
      "family: attention/catalogue.cpp); do not edit. -->\n\n"
      "Every attention layer of every component gets its backend from one selector. "
      "`mmgen backends` shows which of these run on your machine and build.\n\n"
      "## Selection\n\n"
      "Four levels, highest first:\n\n"
      "1. **forced**: `force_attention_backend(name)` or a `ForcedAttentionBackend` guard in "
      "library code.\n"
      "2. **component**: `--component-attention-backends text_encoder=torch_native,transformer=fa`"
      ", the same as a JSON object, or `--component-attention-backends.transformer fa`. Keys are "
      "model_index.json component names (`-` reads as `_`); `transformer_2` uses `transformer`'s "
      "entry unless it has its own.\n"
      "3. **cli** / **config** / **env**: `--attention-backend NAME` (reported as `config` when "
      "it is set in a `--config` file), else the environment variable "
      "`MMGEN_ATTENTION_BACKEND`.\n"
      "4. **auto**: the first backend of the platform's preference list whose kernel this build "
      "has and which takes the model's dtype and head size.\n\n"
      "Per layer, the component's allowed set applies:\n\n"
      "- DiT self-attention takes any DiT-family backend.\n"
      "- DiT cross-attention, VAE and image-encoder attention are dense: a sparse choice uses "
      "`fa` there (`torch_sdpa` where `fa` cannot run), reported as a fallback; a component "
      "override naming a sparse backend for a dense component is an error.\n"
      "- Text encoders take the paged family. A DiT name given by levels 1 or 3 maps to its paged "
      "counterpart (`fa` to `fa3`, `torch_sdpa` to `torch_native`) or falls back to auto with a "
      "warning; a component override that is not a paged backend is an error.\n"
      "- A backend that cannot run here (no kernel for the run's device, GPU architecture, dtype "
      "or head size) uses its fallback below (`sage_attn` to `fa` to `torch_sdpa`), and the log "
      "and `--dry-run` say so; without one, an explicit choice is refused with the reason. This "
      "is the one rule on every device: the sparse backends have no fallback on purpose (dense "
      "attention would change the result), so on a GPU this build has no kernels for (not "
      "sm90) `--attention-backend sla_attn` is refused while `--attention-backend sage_attn` "
      "runs `fa` with a warning.\n"
      "- What the plan chooses is what runs, on the GPU too: with `--device cuda`, dense layers "
      "planned as `fa` run the FlashAttention kernel and those planned as `torch_sdpa` the plain "
      "reference kernel.\n\n"
      "`--dry-run` shows, per component, `attention_backend`, `attention_backend_source` "
      "(forced, component, cli, config, env, auto), `attention_backend_fallback` and every "
      "layer's choice; `attention_backend_config` holds the validated settings, which the "
      "output's metadata records too.\n\n"
      "Backend settings from a `--config` file that the backends chosen on the command line do "
      "not take (VSA's `sparsity` beside `--attention-backend fa`) are left out with one "
      "warning; given with `--attention-backend-config` on the command line they are an "
      "error.\n\n";

  md +=
      "## DiT family\n\n"
      "Diffusion attention over [batch, seq, heads, head_dim]. `fa3` and `fa4` are aliases of "
      "`fa` here: the platform decides the FlashAttention version.\n\n"
      "| Backend | Aliases | Platforms | Build needs | GPU arch | Dtypes | Head sizes | Sparse | "
      "Extra weights | Per-step state | Fallback | Paged counterpart |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& b : backend_catalogue()) {
    if (b.family != Family::Dit) continue;
    md += fmt::format("| `{}` | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n", b.name,
                      or_dash(fmt::format("{}", fmt::join(b.aliases, ", "))),
                      fmt::join(platform_names(b.platforms), ", "), b.build_needs,
                      or_dash(b.gpu_arch), fmt::join(b.dtypes, ", "), b.head_sizes,
                      b.sparse ? "yes" : "no", or_dash(b.extra_weights), or_dash(b.per_step_state),
                      b.fallback.empty() ? "-" : fmt::format("`{}`", b.fallback),
                      b.paged_counterpart.empty() ? "-" : fmt::format("`{}`", b.paged_counterpart));
  }
  for (const auto& b : backend_catalogue())
    if (b.family == Family::Dit) md += fmt::format("\n- `{}`: {}.", b.name, b.summary);
  md += "\n\n";

  md +=
      "## Paged family\n\n"
      "LLM-style attention over a paged KV cache, used by text encoders. The page-size column "
      "says whether the kernel runs natively with pages larger than one token; every backend "
      "accepts larger pages by treating them as slots.\n\n"
      "| Backend | Platforms | Build needs | GPU arch | Dtypes | Head sizes | Page sizes |\n"
      "|---|---|---|---|---|---|---|\n";
  for (const auto& b : backend_catalogue()) {
    if (b.family != Family::Paged) continue;
    md += fmt::format("| `{}` | {} | {} | {} | {} | {} | {} |\n", b.name,
                      fmt::join(platform_names(b.platforms), ", "), b.build_needs,
                      or_dash(b.gpu_arch), fmt::join(b.dtypes, ", "), b.head_sizes, b.page_sizes);
  }
  for (const auto& b : backend_catalogue())
    if (b.family == Family::Paged) md += fmt::format("\n- `{}`: {}.", b.name, b.summary);
  md += "\n\n";

  md +=
      "## `--attention-backend-config`\n\n"
      "SPEC is, in this order: an existing `.json`, `.yaml` or `.yml` file (another extension is "
      "an error); a JSON object; or `key=value[,key=value]` pairs, where `true`/`false` are "
      "booleans, integers and floats (with sign and exponent) are numbers, `[a,b,c]` is a list, "
      "a quoted value may contain commas and a dotted key (`moba_config.st_topk=3`) nests. The "
      "settings are checked against the selected DiT backend: an unknown key names the valid "
      "ones, a wrong value names what the key accepts, and defaults are filled in. Backends not "
      "listed take no settings.\n";
  for (const auto& b : backend_catalogue()) {
    if (b.config.empty()) continue;
    md += fmt::format(
        "\n### `{}`\n\n| Key | Accepts | Default | Aliases | Meaning |\n"
        "|---|---|---|---|---|\n",
        b.name);
    for (const auto& key : b.config)
      md += fmt::format("| `{}` | {} | {} | {} | {} |\n", key.name, describe_accepted(key),
                        config_default(key),
                        or_dash(fmt::format("{}", fmt::join(key.aliases, ", "))), key.help);
    if (!b.config_guide.empty()) md += fmt::format("\n{}\n", b.config_guide);
  }
  md +=
      "\nThe V-MoBA settings may also be given as one object, `moba_config` (SGLang's spelling). "
      "The STA mask-strategy file is a JSON object keyed `\"step_layer_head\"` with `[wt, wh, ww]` "
      "windows in tiles; it is loaded and checked against the model's layers and heads and the "
      "run's steps (every step from `skip_time_steps` on) before the run starts. A relative "
      "`mask_strategy_file_path` in a settings file (or in a `--config` file) is read from that "
      "file's folder; given on the command line, from the current folder.\n\n"
      "Leading dense steps (`skip_time_steps` of `sliding_tile_attn`, 15 by default; "
      "`first_full_step` of `vmoba_attn`, 12; `first_times_fp` of `sparse_video_gen_2_attn`) "
      "run full attention: when they cover every step of the run, nothing is sparse, and the "
      "log warns before the run. Each run's log ends the denoising with the share of key blocks "
      "visited and the counts of sparse and dense steps.\n";
  return md;
}

int run_backends(const std::vector<std::string>& arguments) {
  bool as_json = false, as_markdown = false;
  std::string device = "auto";
  for (size_t i = 0; i < arguments.size(); ++i) {
    const std::string& argument = arguments[i];
    if (argument == "--device") {
      check(i + 1 < arguments.size() && (arguments[i + 1] == "auto" || arguments[i + 1] == "cpu" ||
                                         arguments[i + 1] == "cuda"),
            "backends: --device takes auto, cpu or cuda");
      device = arguments[++i];
    } else if (argument == "--json") {
      as_json = true;
    } else if (argument == "--markdown") {
      as_markdown = true;
    } else if (argument == "--help" || argument == "-h") {
      std::cout << "Usage: mmgen backends [--device auto|cpu|cuda] [--json | --markdown]\n\n"
                   "Lists the attention backends with their status on this machine and build.\n"
                   "  --device    where the models would run (default auto: the GPU when this\n"
                   "              build has CUDA and a supported GPU is present, else the CPU)\n"
                   "  --json      the catalogue and statuses as JSON\n"
                   "  --markdown  docs/attention-backends.md (from the catalogue alone)\n";
      return 0;
    } else {
      fail("backends: unknown argument '{}'; use --json or --markdown", argument);
    }
  }
  check(!(as_json && as_markdown), "backends: use --json or --markdown, not both");
  const DeviceChoice choice = choose_device(device);
  const Machine& machine = machine_for_device(choice.device);
  if (as_markdown) {
    std::cout << backends_markdown();
  } else if (as_json) {
    json info = backends_json(machine);
    info["device"] = {{"device", choice.device}, {"reason", choice.reason}};
    std::cout << info.dump(2) << "\n";
  } else {
    std::cout << fmt::format("Device: {} ({}).\n", choice.device, choice.reason)
              << backends_text(machine);
  }
  return 0;
}

}  // namespace mmgen::cli
