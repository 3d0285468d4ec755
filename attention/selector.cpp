#include "attention/selector.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <mutex>
#include <set>

#include "core/error.h"
#include "core/json.h"
#include "core/text.h"

namespace mmgen::attention {

using json = nlohmann::json;

namespace {

std::string trim(std::string_view text) {
  size_t begin = text.find_first_not_of(" \t\r\n");
  if (begin == std::string_view::npos) return {};
  size_t end = text.find_last_not_of(" \t\r\n");
  return std::string(text.substr(begin, end - begin + 1));
}

std::string lower(std::string_view text) {
  std::string out;
  for (char c : text) out += char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string join_notes(const std::string& a, const std::string& b) {
  if (a.empty()) return b;
  if (b.empty()) return a;
  return a + "; " + b;
}

struct ForeignName;
const std::vector<ForeignName>& foreign_names();

// "unknown attention backend" with both vocabularies and a did-you-mean (a misspelt name of
// another tool suggests the backend it means: flash_atn -> fa).
[[noreturn]] void fail_unknown_backend(const std::string& what, const std::string& name);

// Names from other tools: diffusers' AttentionBackendName values (src/diffusers/models/
// attention_dispatch.py), PyTorch's and flash-attn's names, transformers' attn_implementation
// values. `backend` is ours (empty: none here), `what` says what the name is.
struct ForeignName {
  std::string_view name;
  std::string_view backend;
  std::string_view what;
};

const std::vector<ForeignName>& foreign_names() {
  static const std::vector<ForeignName> names = {
      {"flash", "fa", "diffusers' flash (FlashAttention 2)"},
      {"flash_hub", "fa", "diffusers' flash_hub (FlashAttention 2 from the Hub)"},
      {"flash_varlen", "fa", "diffusers' flash_varlen (FlashAttention 2, variable length)"},
      {"flash_varlen_hub", "fa", "diffusers' flash_varlen_hub (FlashAttention 2)"},
      {"_flash_3", "fa", "diffusers' _flash_3 (FlashAttention 3)"},
      {"_flash_varlen_3", "fa", "diffusers' _flash_varlen_3 (FlashAttention 3)"},
      {"_flash_3_hub", "fa", "diffusers' _flash_3_hub (FlashAttention 3 from the Hub)"},
      {"_flash_3_varlen_hub", "fa", "diffusers' _flash_3_varlen_hub (FlashAttention 3)"},
      {"_flash_varlen_3_hub", "fa", "diffusers' _flash_varlen_3_hub (FlashAttention 3)"},
      {"flash_attn", "fa", "flash_attn (the FlashAttention package)"},
      {"flash_attention", "fa", "flash_attention (FlashAttention)"},
      {"flash_attention_2", "fa", "transformers' flash_attention_2 (FlashAttention 2)"},
      {"flash_attention_3", "fa", "transformers' flash_attention_3 (FlashAttention 3)"},
      {"native", "torch_sdpa", "diffusers' native (torch scaled_dot_product_attention)"},
      {"_native_math", "torch_sdpa", "diffusers' _native_math (torch SDPA, math kernel)"},
      {"_native_efficient", "torch_sdpa",
       "diffusers' _native_efficient (torch SDPA, memory-efficient kernel)"},
      {"_native_flash", "torch_sdpa", "diffusers' _native_flash (torch SDPA, flash kernel)"},
      {"_native_cudnn", "torch_sdpa", "diffusers' _native_cudnn (torch SDPA, cuDNN kernel)"},
      {"sdpa", "torch_sdpa", "sdpa (torch scaled_dot_product_attention)"},
      {"scaled_dot_product_attention", "torch_sdpa", "torch scaled_dot_product_attention"},
      {"sage", "sage_attn", "diffusers' sage (SageAttention, INT8 Q and K)"},
      {"sage_hub", "sage_attn", "diffusers' sage_hub (SageAttention)"},
      {"sage_varlen", "sage_attn", "diffusers' sage_varlen (SageAttention)"},
      {"_sage_qk_int8_pv_fp8_cuda", "sage_attn",
       "diffusers' _sage_qk_int8_pv_fp8_cuda (SageAttention with an FP8 P·V)"},
      {"_sage_qk_int8_pv_fp8_cuda_sm90", "sage_attn",
       "diffusers' _sage_qk_int8_pv_fp8_cuda_sm90 (SageAttention with an FP8 P·V)"},
      {"_sage_qk_int8_pv_fp16_cuda", "sage_attn",
       "diffusers' _sage_qk_int8_pv_fp16_cuda (SageAttention with a 16-bit P·V: "
       "--attention-backend-config pv_dtype=bf16 asks sage_attn for its bf16 one on the GPU)"},
      {"_sage_qk_int8_pv_fp16_triton", "sage_attn",
       "diffusers' _sage_qk_int8_pv_fp16_triton (SageAttention with a 16-bit P·V: "
       "--attention-backend-config pv_dtype=bf16 asks sage_attn for its bf16 one on the GPU)"},
      {"sageattention", "sage_attn", "sageattention (SageAttention)"},
      {"xformers", "",
       "diffusers' xformers (xformers' memory-efficient attention) has no backend here; fa "
       "computes "
       "the same exact attention (torch_sdpa too)"},
      {"flex", "",
       "diffusers' flex (PyTorch FlexAttention) has no diffusion-transformer backend here; use fa "
       "or "
       "torch_sdpa (text encoders have a paged flex_attention)"},
      {"_native_npu", "",
       "diffusers' _native_npu runs on Ascend NPUs, which mmgen's diffusion transformers do not; "
       "use "
       "fa or torch_sdpa"},
      {"_native_xla", "",
       "diffusers' _native_xla runs on TPUs (XLA), which mmgen does not; use fa or torch_sdpa"},
      {"eager", "",
       "transformers' eager attention is plain matmul-softmax-matmul; use torch_sdpa (diffusion "
       "transformers) or torch_native (text encoders), which compute the same"},
  };
  return names;
}

[[noreturn]] void fail_unknown_backend(const std::string& what, const std::string& name) {
  std::vector<std::string> all = backend_names(Family::Dit, true);
  for (const auto& n : backend_names(Family::Paged)) all.push_back(n);
  for (const ForeignName& foreign : foreign_names())
    if (!foreign.backend.empty()) all.emplace_back(foreign.name);
  std::string nearest = nearest_name(lower(name), all);
  for (const ForeignName& foreign : foreign_names())
    if (foreign.name == nearest)
      nearest = fmt::format("{}, which is {} here", nearest, foreign.backend);
  fail("{}: unknown attention backend '{}'{}; DiT backends: {}; paged backends (text encoders): {}",
       what, name, nearest.empty() ? std::string() : fmt::format(" (did you mean {}?)", nearest),
       fmt::join(backend_names(Family::Dit), ", "), fmt::join(backend_names(Family::Paged), ", "));
}

std::mutex& force_mutex() {
  static std::mutex mutex;
  return mutex;
}
std::optional<std::string>& forced_slot() {
  static std::optional<std::string> forced;
  return forced;
}

void set_forced(std::optional<std::string> value) {
  std::lock_guard<std::mutex> lock(force_mutex());
  forced_slot() = std::move(value);
}

std::string validated_name(const std::string& name, const std::string& what) {
  return resolve_backend_name(name, what);
}

// "transformer_2" -> "transformer": SGLang lets a numbered component inherit its base's override.
std::string base_component(const std::string& name) {
  const size_t underscore = name.rfind('_');
  if (underscore == std::string::npos || underscore + 1 == name.size()) return {};
  for (size_t i = underscore + 1; i < name.size(); ++i)
    if (!std::isdigit(static_cast<unsigned char>(name[i]))) return {};
  return name.substr(0, underscore);
}

// A backend of `family` or what its catalogue fallbacks lead to; `note` says what happened.
struct Attempt {
  bool ok = false;
  std::string backend;
  std::string note;
};

Attempt run_or_fall_back(const Machine& machine, Family family, std::string name,
                         std::string_view dtype, int64_t head_size) {
  Attempt attempt;
  std::set<std::string> visited;
  while (true) {
    visited.insert(name);
    const Availability availability = kernel_availability(machine, family, name, dtype, head_size);
    if (availability.ok) {
      attempt.ok = true;
      attempt.backend = name;
      return attempt;
    }
    attempt.note =
        join_notes(attempt.note, fmt::format("{} cannot run here ({})", name, availability.reason));
    const BackendInfo* entry = find_backend(family, name);
    if (!entry || entry->fallback.empty() || visited.count(std::string(entry->fallback)))
      return attempt;
    name = std::string(entry->fallback);
    attempt.note += fmt::format(", so its fallback {} is used", name);
  }
}

// How the choice was given, for error messages.
std::string origin(const ComponentChoice& choice) {
  switch (choice.source) {
    case Source::Forced:
      return fmt::format("forced attention backend {}", text_for_message(choice.requested));
    case Source::Component:
      return fmt::format("--component-attention-backends {}={}",
                         text_for_message(choice.override_key), text_for_message(choice.requested));
    case Source::Cli:
      return fmt::format("--attention-backend {}", text_for_message(choice.requested));
    case Source::Config:
      return fmt::format("attention_backend {} (--config file)",
                         text_for_message(choice.requested));
    case Source::Env:
      return fmt::format("MMGEN_ATTENTION_BACKEND={}", text_for_message(choice.requested));
    case Source::Auto:
      return "auto";
  }
  return "?";
}

std::vector<std::string> dense_dit_names() {
  std::vector<std::string> names;
  for (const auto& entry : backend_catalogue())
    if (entry.family == Family::Dit && !entry.sparse) names.emplace_back(entry.name);
  return names;
}

LayerChoice select_dit_self_attention(const ComponentChoice& choice,
                                      const ComponentAttention& component, const Machine& machine) {
  LayerChoice layer{LayerKind::SelfAttention, {}, {}};
  if (choice.source == Source::Auto) {
    layer.backend = auto_backend(machine, Family::Dit, machine.dtype, component.head_size);
    return layer;
  }
  const BackendInfo* entry = find_backend(Family::Dit, choice.requested);
  if (!entry)
    fail(
        "{}: {} is a paged backend (for text encoders), but {} is a diffusion transformer and "
        "takes a DiT backend: {}{}",
        origin(choice), choice.requested, component.name,
        fmt::join(backend_names(Family::Dit), ", "),
        choice.source == Source::Component
            ? std::string()
            : "; to choose a text encoder's backend use --component-attention-backends "
              "text_encoder=NAME");
  check(!entry->sparse || component.sparse_refusal.empty(),
        "{}: {} is sparse, and {} cannot run sparse attention: {}; choose a dense backend ({})",
        origin(choice), entry->name, component.name, component.sparse_refusal,
        fmt::join(dense_dit_names(), ", "));
  const Attempt attempt = run_or_fall_back(machine, Family::Dit, std::string(entry->name),
                                           machine.dtype, component.head_size);
  check(attempt.ok,
        "{}: {} cannot use it: {}; choose another backend (`mmgen backends` lists "
        "what runs here)",
        origin(choice), component.name, attempt.note);
  layer.backend = attempt.backend;
  layer.fallback = attempt.note;
  return layer;
}

// Dense layers: DiT cross-attention, VAE and image-encoder attention.
LayerChoice select_dense(const ComponentChoice& choice, const ComponentAttention& component,
                         LayerKind kind, const Machine& machine) {
  LayerChoice layer{kind, {}, {}};
  const auto use_auto = [&](const std::string& note) {
    layer.backend = auto_backend(machine, Family::Dit, machine.dtype, component.head_size);
    layer.fallback = join_notes(note, fmt::format("using auto: {}", layer.backend));
    return layer;
  };
  if (choice.source == Source::Auto) {
    layer.backend = auto_backend(machine, Family::Dit, machine.dtype, component.head_size);
    return layer;
  }
  // An explicit override of a dense component must fit; global choices adapt.
  const bool strict = choice.source == Source::Component && choice.role == ComponentRole::Dense;
  const std::string what = kind == LayerKind::CrossAttention
                               ? "cross-attention"
                               : fmt::format("{}'s attention", component.name);
  const BackendInfo* entry = find_backend(Family::Dit, choice.requested);
  if (!entry) {
    check(!strict,
          "{}: {} is a paged backend (for text encoders); {} is dense and takes one of: {}",
          origin(choice), choice.requested, what, fmt::join(dense_dit_names(), ", "));
    return use_auto(fmt::format("{} is a paged backend (for text encoders)", choice.requested));
  }
  std::string target(entry->name), note;
  if (entry->sparse) {
    check(!strict, "{}: {} is sparse but {} is dense; choose one of: {}", origin(choice),
          entry->name, what, fmt::join(dense_dit_names(), ", "));
    note = fmt::format("{} is sparse and {} is dense, so fa is used", entry->name, what);
    target = "fa";
  }
  const Attempt attempt =
      run_or_fall_back(machine, Family::Dit, target, machine.dtype, component.head_size);
  note = join_notes(note, attempt.note);
  if (attempt.ok) {
    layer.backend = attempt.backend;
    layer.fallback = note;
    return layer;
  }
  check(!strict,
        "{}: {} cannot use it: {}; choose another backend (`mmgen backends` lists what "
        "runs here)",
        origin(choice), component.name, note);
  return use_auto(note);
}

// Why `entry` cannot run `component`'s kind of attention; empty when it can.
std::string model_refusal(const BackendInfo& entry, const ComponentAttention& component) {
  if (entry.model_attention == component.model_attention) return {};
  return fmt::format("{} runs only models with {} attention and {}'s is {}", entry.name,
                     model_attention_name(entry.model_attention), component.name,
                     model_attention_name(component.model_attention));
}

// Auto for a text encoder: the platform's preference for plain attention, else the one design
// of the model's kind.
std::string auto_paged(const ComponentAttention& component, const Machine& machine) {
  if (component.model_attention == ModelAttention::Plain)
    return auto_backend(machine, Family::Paged, machine.dtype, component.head_size);
  std::vector<std::string> names, notes;
  for (const BackendInfo& entry : backend_catalogue()) {
    if (entry.family != Family::Paged || entry.model_attention != component.model_attention)
      continue;
    const Availability availability =
        kernel_availability(machine, Family::Paged, entry.name, machine.dtype, component.head_size);
    if (availability.ok) return std::string(entry.name);
    notes.push_back(fmt::format("{}: {}", entry.name, availability.reason));
  }
  fail("{} has {} attention, and no backend for it runs here ({})", component.name,
       model_attention_name(component.model_attention), fmt::join(notes, "; "));
}

LayerChoice select_paged(const ComponentChoice& choice, const ComponentAttention& component,
                         const Machine& machine) {
  LayerChoice layer{LayerKind::Attention, {}, {}};
  if (choice.source == Source::Auto) {
    layer.backend = auto_paged(component, machine);
    return layer;
  }
  const BackendInfo* paged = find_backend(Family::Paged, choice.requested);
  if (choice.source == Source::Component) {
    if (!paged) {
      const BackendInfo* dit = find_backend(Family::Dit, choice.requested);
      const std::string hint =
          dit && !dit->paged_counterpart.empty()
              ? fmt::format("; its paged counterpart is {}: use {}={}", dit->paged_counterpart,
                            choice.override_key, dit->paged_counterpart)
              : std::string();
      fail("{}: {} is a text encoder and takes a paged backend ({}); {} is a DiT backend{}",
           origin(choice), component.name, fmt::join(backend_names(Family::Paged), ", "),
           choice.requested, hint);
    }
    const std::string refusal = model_refusal(*paged, component);
    check(refusal.empty(), "{}: {} cannot use it: {}; choose another backend", origin(choice),
          component.name, refusal);
    const Attempt attempt = run_or_fall_back(machine, Family::Paged, std::string(paged->name),
                                             machine.dtype, component.head_size);
    check(attempt.ok,
          "{}: {} cannot use it: {}; choose another backend (`mmgen backends` lists "
          "what runs here)",
          origin(choice), component.name, attempt.note);
    layer.backend = attempt.backend;
    layer.fallback = attempt.note;
    return layer;
  }
  // A global choice: the paged name itself, a DiT name's paged counterpart, or auto.
  std::string target, note;
  if (paged) {
    target = paged->name;
  } else if (const BackendInfo* dit = find_backend(Family::Dit, choice.requested);
             dit && !dit->paged_counterpart.empty()) {
    target = dit->paged_counterpart;
    note = fmt::format("{} maps to {} for text encoders", dit->name, target);
  } else {
    note = fmt::format("{} is a DiT backend without a paged counterpart", choice.requested);
  }
  if (!target.empty()) {
    if (std::string refusal = model_refusal(*find_backend(Family::Paged, target), component);
        !refusal.empty()) {
      layer.backend = auto_paged(component, machine);
      layer.fallback = join_notes(join_notes(note, refusal),
                                  fmt::format("text encoders use auto: {}", layer.backend));
      return layer;
    }
    const Attempt attempt =
        run_or_fall_back(machine, Family::Paged, target, machine.dtype, component.head_size);
    if (attempt.ok) {
      layer.backend = attempt.backend;
      layer.fallback = attempt.note.empty() ? std::string() : join_notes(note, attempt.note);
      return layer;
    }
    note = join_notes(note, attempt.note);
  }
  layer.backend = auto_paged(component, machine);
  layer.fallback = join_notes(note, fmt::format("text encoders use auto: {}", layer.backend));
  return layer;
}

}  // namespace

// ------------------------------------------------------------------ names from other tools

std::string resolve_backend_name(const std::string& name, const std::string& where,
                                 std::string* note) {
  const std::string normalized = lower(trim(name));
  if (is_known_backend(normalized)) return normalized;
  std::string dashless = normalized;  // flash-attn, flash-attention-2
  std::replace(dashless.begin(), dashless.end(), '-', '_');
  for (const ForeignName& foreign : foreign_names()) {
    if (foreign.name != dashless) continue;
    check(!foreign.backend.empty(), "{}: {}", where, foreign.what);
    if (note) *note = fmt::format("{}: {} is {} here", where, foreign.what, foreign.backend);
    return std::string(foreign.backend);
  }
  fail_unknown_backend(where, name);
}

// ------------------------------------------------------------------ force

void force_attention_backend(const std::string& name) {
  set_forced(validated_name(name, "force_attention_backend"));
}

void clear_forced_attention_backend() {
  set_forced(std::nullopt);
}

std::optional<std::string> forced_attention_backend() {
  std::lock_guard<std::mutex> lock(force_mutex());
  return forced_slot();
}

ForcedAttentionBackend::ForcedAttentionBackend(const std::string& name) {
  const std::string validated = validated_name(name, "ForcedAttentionBackend");
  std::lock_guard<std::mutex> lock(force_mutex());
  previous_ = forced_slot();
  forced_slot() = validated;
}

ForcedAttentionBackend::~ForcedAttentionBackend() {
  set_forced(previous_);
}

// ------------------------------------------------------------------ overrides

ComponentOverrides parse_component_attention_backends(const json& spec, const std::string& where,
                                                      std::vector<std::string>* notes) {
  ComponentOverrides overrides;
  if (spec.is_null()) return overrides;
  auto add = [&](std::string key, const std::string& value, const std::string& item) {
    key = trim(key);
    std::replace(key.begin(), key.end(), '-', '_');
    check(!key.empty(), "{}: '{}' has no component name; write component=backend", where, item);
    check(!trim(value).empty(), "{}: '{}' has no backend; write component=backend", where, item);
    std::string note;
    const std::string name = resolve_backend_name(value, fmt::format("{} {}", where, key), &note);
    if (notes && !note.empty()) notes->push_back(note);
    check(overrides.emplace(key, name).second, "{}: component '{}' is given twice; give it once",
          where, key);
  };
  if (spec.is_object()) {
    for (auto it = spec.begin(); it != spec.end(); ++it) {
      check(it->is_string(), "{}: {} must be a backend name, got {}", where, it.key(), it->dump());
      add(it.key(), it->get<std::string>(), it.key());
    }
    return overrides;
  }
  check(spec.is_string(), "{}: expected component=backend pairs or a JSON object, got {}", where,
        spec.dump());
  const std::string text = trim(spec.get<std::string>());
  if (text.empty()) return overrides;
  if (text.front() == '{') {
    const json object =
        parse_json(text, where, "check the quotes and braces", /*unique_keys=*/true);
    check(object.is_object(), "{}: expected a JSON object of component: backend", where);
    return parse_component_attention_backends(object, where, notes);
  }
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    const std::string item = trim(std::string_view(text).substr(start, comma - start));
    start = comma + 1;
    if (item.empty()) continue;
    const size_t equals = item.find('=');
    check(equals != std::string::npos,
          "{}: '{}' is not component=backend (e.g. text_encoder=torch_native,transformer=fa)",
          where, item);
    add(item.substr(0, equals), item.substr(equals + 1), item);
  }
  return overrides;
}

void check_override_components(const ComponentOverrides& overrides,
                               const std::vector<std::string>& with_attention,
                               const std::vector<std::string>& without_attention,
                               const std::vector<std::string>& absent, const std::string& where) {
  auto contains = [](const std::vector<std::string>& list, const std::string& name) {
    return std::find(list.begin(), list.end(), name) != list.end();
  };
  for (const auto& [component, backend] : overrides) {
    if (contains(with_attention, component)) continue;
    check(!contains(without_attention, component),
          "{}: {} has no attention layers; components with attention: {}", where, component,
          fmt::join(with_attention, ", "));
    check(!contains(absent, component),
          "{}: {} is not part of this model (model_index.json lists it as [null, null]); "
          "components with attention: {}",
          where, component, fmt::join(with_attention, ", "));
    const std::string nearest = nearest_name(component, with_attention);
    fail("{}: unknown component '{}'{}; this model's components with attention: {}", where,
         component, nearest.empty() ? std::string() : fmt::format(" (did you mean {}?)", nearest),
         fmt::join(with_attention, ", "));
  }
}

// ------------------------------------------------------------------ selection

std::string_view source_name(Source source) {
  switch (source) {
    case Source::Forced:
      return "forced";
    case Source::Component:
      return "component";
    case Source::Cli:
      return "cli";
    case Source::Config:
      return "config";
    case Source::Env:
      return "env";
    case Source::Auto:
      return "auto";
  }
  return "?";
}

std::string_view role_name(ComponentRole role) {
  switch (role) {
    case ComponentRole::Dit:
      return "dit";
    case ComponentRole::TextEncoder:
      return "text_encoder";
    case ComponentRole::Dense:
      return "dense";
    case ComponentRole::None:
      return "none";
  }
  return "?";
}

std::string_view layer_name(LayerKind kind) {
  switch (kind) {
    case LayerKind::SelfAttention:
      return "self_attention";
    case LayerKind::CrossAttention:
      return "cross_attention";
    case LayerKind::Attention:
      return "attention";
  }
  return "?";
}

ComponentRole component_role(const std::string& name, const std::string& class_name) {
  const std::string cls = lower(class_name);
  for (const char* word : {"tokenizer", "scheduler", "processor", "featureextractor"})
    if (cls.find(word) != std::string::npos) return ComponentRole::None;
  for (const char* prefix :
       {"tokenizer", "scheduler", "feature_extractor", "image_processor", "processor"})
    if (name.starts_with(prefix)) return ComponentRole::None;
  if (name.starts_with("transformer")) return ComponentRole::Dit;
  if (name.starts_with("text_encoder")) return ComponentRole::TextEncoder;
  if (name.starts_with("vae") || name.starts_with("image_encoder") ||
      cls.find("autoencoder") != std::string::npos)
    return ComponentRole::Dense;
  if (cls.find("transformer") != std::string::npos) return ComponentRole::Dit;
  return ComponentRole::Dense;  // unknown kinds: dense attention is always valid
}

SelectionLevels selection_levels(const ComponentOverrides& overrides,
                                 const std::optional<std::string>& cli,
                                 const std::optional<std::string>& env,
                                 std::string_view cli_where) {
  SelectionLevels levels;
  levels.forced = forced_attention_backend();
  levels.overrides = overrides;
  const auto resolve = [&](const std::string& name, const std::string& where) {
    std::string note;
    std::string resolved = resolve_backend_name(name, where, &note);
    if (!note.empty()) levels.notes.push_back(note);
    return resolved;
  };
  if (cli && !trim(*cli).empty())
    levels.cli = resolve(*cli, fmt::format("{} {}", cli_where, text_for_message(trim(*cli))));
  if (env && !trim(*env).empty())
    levels.env =
        resolve(*env, fmt::format("MMGEN_ATTENTION_BACKEND={}", text_for_message(trim(*env))));
  return levels;
}

ComponentChoice select_component(const ComponentAttention& component, const SelectionLevels& levels,
                                 const Machine& machine) {
  ComponentChoice choice;
  choice.component = component.name;
  choice.role = component.role;
  if (component.role == ComponentRole::None) return choice;

  auto override_for = [&](const std::string& name) -> const std::string* {
    auto it = levels.overrides.find(name);
    if (it == levels.overrides.end()) return nullptr;
    choice.override_key = name;
    return &it->second;
  };
  const std::string* override_value = override_for(component.name);
  if (!override_value && !base_component(component.name).empty())
    override_value = override_for(base_component(component.name));

  if (levels.forced) {
    choice.source = Source::Forced;
    choice.requested = *levels.forced;
  } else if (override_value) {
    choice.source = Source::Component;
    choice.requested = *override_value;
  } else if (levels.cli) {
    choice.source = levels.cli_from_config ? Source::Config : Source::Cli;
    choice.requested = *levels.cli;
  } else if (levels.env) {
    choice.source = Source::Env;
    choice.requested = *levels.env;
  }
  if (choice.source != Source::Auto) {
    choice.requested = resolve_backend_name(choice.requested, origin(choice));
  }

  switch (component.role) {
    case ComponentRole::Dit:
      choice.layers.push_back(select_dit_self_attention(choice, component, machine));
      if (component.cross_attention)
        choice.layers.push_back(
            select_dense(choice, component, LayerKind::CrossAttention, machine));
      break;
    case ComponentRole::Dense:
      choice.layers.push_back(select_dense(choice, component, LayerKind::Attention, machine));
      break;
    case ComponentRole::TextEncoder:
      choice.layers.push_back(select_paged(choice, component, machine));
      break;
    case ComponentRole::None:
      break;
  }
  return choice;
}

}  // namespace mmgen::attention
