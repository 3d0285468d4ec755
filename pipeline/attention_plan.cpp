#include "pipeline/attention_plan.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>

#include "attention/backends/descriptor.h"
#include "core/error.h"
#include "pipeline/component_classes.h"

namespace mmgen {

using namespace attention;

using json = nlohmann::json;

namespace {

int64_t integer_field(const json& config, const char* key) {
  if (!config.contains(key) || !config[key].is_number_integer()) return 0;
  return config[key].get<int64_t>();
}

// The component's attention head size from its config; 0 when the config does not say.
int64_t head_size_of(const json& config) {
  for (const char* key : {"attention_head_dim", "d_kv", "head_dim"})
    if (int64_t value = integer_field(config, key); value > 0) return value;
  for (auto [hidden, heads] : {std::pair{"hidden_size", "num_attention_heads"},
                               std::pair{"d_model", "num_heads"}, std::pair{"dim", "n_heads"}}) {
    const int64_t h = integer_field(config, hidden), n = integer_field(config, heads);
    if (h > 0 && n > 0 && h % n == 0) return h / n;
  }
  return 0;
}

// A component's config, or an empty object when it cannot be read (the pipeline's own checks
// report unreadable components; attention only needs hints from it).
json config_or_empty(const ModelIndex& index, const std::string& component) {
  try {
    return index.config(component);
  } catch (const Error&) {
    return json::object();
  }
}

// What the selector must know of a DiT beyond its role: its class's traits
// (pipeline/component_classes.h).
void describe_dit(ComponentAttention& component, const std::string& class_name) {
  if (const ComponentClass* entry = find_component_class(class_name)) {
    component.cross_attention = entry->dit.cross_attention;
    component.sparse_refusal = entry->dit.sparse_refusal;
  }
}

std::optional<std::string> environment_backend() {
  const char* value = std::getenv("MMGEN_ATTENTION_BACKEND");
  if (!value) return std::nullopt;
  return std::string(value);
}

json null_if_empty(const std::string& text) {
  return text.empty() ? json() : json(text);
}

// What the DiT backends of the plan load once per run (sliding_tile_attn: its mask-strategy file),
// each checked against the components that use it; their descriptors say how.
void load_backend_resources(AttentionPlan& plan, const ModelIndex& index, const Request& request) {
  for (const auto& [backend, config] : plan.backend_configs) {
    const BackendDescriptor* descriptor = find_dit_descriptor(backend);
    if (!descriptor || !descriptor->load_resources) continue;
    std::vector<ResourceUse> uses;
    for (const auto& [name, choice] : plan.components) {
      if (choice.role != ComponentRole::Dit || !choice.has_attention() ||
          choice.primary().backend != backend)
        continue;
      const json model = config_or_empty(index, name);
      uses.push_back({.where = index.root.string(),
                      .component = name,
                      .layers = integer_field(model, "num_layers"),
                      .heads = integer_field(model, "num_attention_heads"),
                      .on_gpu = request.device == "cuda"});
    }
    descriptor->load_resources(config, request.num_inference_steps, uses, plan.resources);
  }
  // The backends' notes (which windows STA runs) go to the log of the dry run and of the run.
  plan.notes.insert(plan.notes.end(), plan.resources.notes.begin(), plan.resources.notes.end());
}

}  // namespace

AttentionPlan plan_attention(const ModelIndex& index, const Request& request,
                             const Machine& machine) {
  return plan_attention(index, request, machine, environment_backend());
}

AttentionPlan plan_attention(const ModelIndex& index, const Request& request,
                             const Machine& machine, const std::optional<std::string>& env) {
  std::vector<std::string> notes;
  // A value a --config file gave is reported as its key in that file, not as a flag the user
  // never typed.
  const auto where = [&](const char* option, const char* key) {
    if (!request.from_config_file.count(option)) return fmt::format("--{}", option);
    return fmt::format("{}: {}", request.settings.value("config", std::string("the --config file")),
                       key);
  };
  const ComponentOverrides overrides = parse_component_attention_backends(
      request.component_attention_backends,
      where("component-attention-backends", "component_attention_backends"), &notes);

  std::vector<std::string> with_attention, without_attention;
  std::map<std::string, ComponentAttention> components;
  for (const auto& [name, entry] : index.components) {
    ComponentAttention component{name, component_role(name, entry.class_name), 0};
    if (component.role == ComponentRole::None) {
      without_attention.push_back(name);
    } else {
      with_attention.push_back(name);
      const json config = config_or_empty(index, name);
      component.head_size = head_size_of(config);
      // A text encoder with dual chunk attention (Qwen's 1M-context configs) runs on the dual
      // chunk design only.
      if (component.role == ComponentRole::TextEncoder &&
          config.contains("dual_chunk_attention_config") &&
          !config["dual_chunk_attention_config"].is_null())
        component.model_attention = ModelAttention::DualChunk;
      if (component.role == ComponentRole::Dit) describe_dit(component, entry.class_name);
    }
    components[name] = component;
  }
  check_override_components(overrides, with_attention, without_attention, index.absent);

  SelectionLevels levels = selection_levels(overrides, request.attention_backend, env,
                                            where("attention-backend", "attention_backend"));
  levels.cli_from_config = request.from_config_file.count("attention-backend") > 0;
  AttentionPlan plan;
  plan.notes = notes;
  plan.notes.insert(plan.notes.end(), levels.notes.begin(), levels.notes.end());
  // --device cuda runs the diffusion transformers and the text encoders on the GPU, so their
  // layers are chosen against the GPU's kernels (the text encoders' paged backends: fa3,
  // flashinfer).
  const Machine& gpu_machine = request.device == "cuda" ? machine_for_device("cuda") : machine;
  for (const auto& [name, component] : components) {
    const bool on_gpu =
        component.role == ComponentRole::Dit || component.role == ComponentRole::TextEncoder;
    plan.components[name] = select_component(component, levels, on_gpu ? gpu_machine : machine);
  }

  // The DiT backends the config may speak to: what runs, and what was asked for before a
  // fallback (settings for sage_attn stay valid when it falls back to fa).
  std::vector<std::string> dit_backends;
  auto add_backend = [&](const std::string& name) {
    if (find_backend(Family::Dit, name) &&
        std::find(dit_backends.begin(), dit_backends.end(), name) == dit_backends.end())
      dit_backends.push_back(name);
  };
  std::vector<std::string> dit_order;
  if (plan.components.count("transformer")) dit_order.push_back("transformer");
  for (const auto& [name, choice] : plan.components)
    if (name != "transformer") dit_order.push_back(name);
  for (const auto& name : dit_order) {
    const ComponentChoice& choice = plan.components[name];
    if (choice.role != ComponentRole::Dit || !choice.has_attention()) continue;
    if (plan.main_backend.empty()) plan.main_backend = choice.primary().backend;
    add_backend(choice.primary().backend);
    if (!choice.requested.empty())
      add_backend(normalize_backend_name(Family::Dit, choice.requested));
  }

  plan.num_inference_steps = request.num_inference_steps;
  json settings = parse_backend_config_spec(request.attention_backend_config);
  // Settings from a --config file that the backends chosen on the command line do not take (VSA's
  // beside --attention-backend fa) must not block that choice: they are left out, with a warning.
  const auto from_config = [&](const char* key) { return request.from_config_file.count(key) > 0; };
  const bool chosen_on_command_line =
      (request.attention_backend && !from_config("attention-backend")) ||
      (!request.component_attention_backends.is_null() &&
       !from_config("component-attention-backends"));
  if (from_config("attention-backend-config") && chosen_on_command_line && !dit_backends.empty())
    if (const auto unused = settings_unused_by(settings, dit_backends); !unused.empty()) {
      spdlog::warn(
          "attention: the --config file's attention_backend_config setting(s) {} are not used "
          "by {}, chosen on the command line; ignoring them",
          fmt::join(unused, ", "), fmt::join(dit_backends, " and "));
      for (const auto& key : unused) settings.erase(key);
    }
  if (dit_backends.empty()) {
    check(settings.empty(),
          "--attention-backend-config: this model has no diffusion transformer to apply it to");
    return plan;
  }
  const std::vector<json> configs = validate_backend_configs(settings, dit_backends);
  for (size_t i = 0; i < dit_backends.size(); ++i)
    plan.backend_configs[dit_backends[i]] = configs[i];
  load_backend_resources(plan, index, request);
  return plan;
}

std::optional<AttentionPlan::StepSplit> AttentionPlan::step_split(int64_t steps) const {
  if (main_backend.empty()) return std::nullopt;
  const BackendInfo* info = find_backend(Family::Dit, main_backend);
  if (!info || !info->sparse) return std::nullopt;
  StepSplit split{.backend = main_backend, .sparse = steps};
  const BackendDescriptor* descriptor = find_dit_descriptor(main_backend);
  if (descriptor && descriptor->dense_steps) {
    const DenseSteps dense = descriptor->dense_steps(config_json(), steps);
    split.dense = std::clamp<int64_t>(dense.steps, 0, steps);
    split.sparse = steps - split.dense;
    split.setting = dense.setting;
    split.on_purpose = dense.on_purpose;
  }
  return split;
}

json AttentionPlan::config_json() const {
  if (main_backend.empty()) return nullptr;
  auto it = backend_configs.find(main_backend);
  return it == backend_configs.end() ? json::object() : it->second;
}

json AttentionPlan::component_json(const std::string& component) const {
  json out = {{"attention_backend", nullptr},
              {"attention_backend_source", nullptr},
              {"attention_backend_fallback", nullptr},
              {"attention_backend_requested", nullptr},
              {"attention_layers", nullptr}};
  auto it = components.find(component);
  if (it == components.end() || !it->second.has_attention()) return out;
  const ComponentChoice& choice = it->second;
  out["attention_backend"] = choice.primary().backend;
  out["attention_backend_source"] = std::string(source_name(choice.source));
  out["attention_backend_fallback"] = null_if_empty(choice.primary().fallback);
  out["attention_backend_requested"] = null_if_empty(choice.requested);
  json layers = json::object();
  for (const auto& layer : choice.layers)
    layers[std::string(layer_name(layer.kind))] = {{"backend", layer.backend},
                                                   {"fallback", null_if_empty(layer.fallback)}};
  out["attention_layers"] = layers;
  return out;
}

void log_attention_notes(const AttentionPlan& plan) {
  for (const auto& note : plan.notes) spdlog::info("attention: {}", note);
}

void log_attention_plan(const AttentionPlan& plan) {
  log_attention_notes(plan);
  for (const auto& [name, choice] : plan.components) {
    if (!choice.has_attention()) continue;
    std::vector<std::string> layers;
    for (const auto& layer : choice.layers)
      layers.push_back(choice.layers.size() == 1
                           ? layer.backend
                           : fmt::format("{} for {}", layer.backend, layer_name(layer.kind)));
    const std::string from =
        choice.source == Source::Auto
            ? std::string("auto")
            : fmt::format("{} {}", source_name(choice.source), choice.requested);
    spdlog::info("attention: {} uses {} ({})", name, fmt::join(layers, ", "), from);
    for (const auto& layer : choice.layers)
      if (!layer.fallback.empty())
        spdlog::warn("attention: {} {}: {}", name, layer_name(layer.kind), layer.fallback);
  }
  const auto split = plan.step_split(plan.num_inference_steps);
  if (split && split->sparse == 0 && split->dense > 0 && !split->on_purpose)
    spdlog::warn(
        "attention: {} runs dense in all {} denoising step(s) ({} leaves none sparse), so this "
        "run is as slow as dense attention; lower it in --attention-backend-config or give more "
        "--num-inference-steps",
        split->backend, split->dense, split->setting);
}

const attention::ComponentChoice* planned_component(const AttentionPlan& plan,
                                                    const std::string& component) {
  auto it = plan.components.find(component);
  return it != plan.components.end() && it->second.has_attention() ? &it->second : nullptr;
}

std::string gpu_text_backend(const AttentionPlan& plan, int64_t head_dim,
                             const std::string& component) {
  const attention::Machine& gpu = attention::machine_for_device("cuda");
  auto it = plan.components.find(component);
  if (it != plan.components.end() && it->second.has_attention()) {
    const std::string& name = it->second.primary().backend;
    if (attention::kernel_availability(gpu, attention::Family::Paged, name, gpu.dtype, head_dim).ok)
      return name;
  }
  return attention::auto_backend(gpu, attention::Family::Paged, gpu.dtype, head_dim);
}

}  // namespace mmgen
