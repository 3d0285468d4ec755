// The attention-backend selector: every attention layer of every component gets its backend here,
// by one rule. Four levels, highest first:
//   1. forced     force_attention_backend(name) / ForcedAttentionBackend guard (library code);
//   2. component  --component-attention-backends (text_encoder=torch_native,transformer=fa);
//   3. cli / env  --attention-backend NAME, else the MMGEN_ATTENTION_BACKEND variable;
//   4. auto       by platform, GPU architecture, dtype, head size and the kernels compiled in.
// The choice then meets the layer's allowed set:
//   - DiT self-attention takes any DiT-family backend;
//   - DiT cross-attention, VAE and image-encoder attention are dense: a sparse choice uses fa
//     there (torch_sdpa where fa cannot run), recorded as a fallback;
//   - text encoders take the paged family: a DiT name from levels 1 and 3 maps to its paged
//     counterpart (fa -> fa3, torch_sdpa -> torch_native) or falls back to auto with a warning;
//     a component override that does not fit is an error.
// A backend that cannot run here follows the catalogue's fallback (sage_attn -> fa -> torch_sdpa);
// with none, an explicit choice is an error that says why, except on auxiliary layers (text
// encoders, VAE, cross-attention) chosen globally, which fall back to auto.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "attention/catalogue.h"

namespace mmgen::attention {

// ------------------------------------------------------------------ level 1: global force

// Forces every layer selected from now on to `name` (validated: a name of either family).
void force_attention_backend(const std::string& name);
void clear_forced_attention_backend();
std::optional<std::string> forced_attention_backend();

// Forces a backend for its lifetime and restores whatever was forced before (nothing, or an outer
// guard's backend) when it ends, also when an exception passes through.
class ForcedAttentionBackend {
 public:
  explicit ForcedAttentionBackend(const std::string& name);
  ~ForcedAttentionBackend();
  ForcedAttentionBackend(const ForcedAttentionBackend&) = delete;
  ForcedAttentionBackend& operator=(const ForcedAttentionBackend&) = delete;

 private:
  std::optional<std::string> previous_;
};

// ------------------------------------------------------------------ names from other tools

// The backend a name means. Catalogue names and their aliases pass through (lower-cased,
// trimmed). Names people bring from other tools become the backend they mean here, and `note` (when
// given) gets one line saying which: diffusers' attention backends (attention_dispatch.py's
// AttentionBackendName: native, flash, _flash_3_hub, sage, ...) and the habitual sdpa, flash_attn,
// flash_attention_2. A name of another tool with no counterpart here (xformers, flex, ...) and
// an unknown name are Errors, prefixed with `where`, that say what to use instead.
std::string resolve_backend_name(const std::string& name, const std::string& where,
                                 std::string* note = nullptr);

// ------------------------------------------------------------------ level 2: component overrides

// component name (as in model_index.json) -> backend name (lower case, as given).
using ComponentOverrides = std::map<std::string, std::string>;

// Parses --component-attention-backends: null (none), a string "a=b,c=d" or '{"a": "b"}', or an
// object (a config file's mapping, or the dotted flags --component-attention-backends.<name>).
// Keys: '-' becomes '_'. Values must be backend names of either family. Which components exist
// is checked against the model by the selection below.
// Other tools' names become ours (resolve_backend_name); `notes` (when given) collects the lines
// saying so.
ComponentOverrides parse_component_attention_backends(
    const nlohmann::json& spec, const std::string& where = "--component-attention-backends",
    std::vector<std::string>* notes = nullptr);

// ------------------------------------------------------------------ selection

// Config: --attention-backend's level, set in a --config file rather than on the command line.
enum class Source { Forced, Component, Cli, Config, Env, Auto };
// "forced", "component", "cli", "config", "env", "auto"
std::string_view source_name(Source source);

// What a component is, for attention: which layers it has and which family they take.
enum class ComponentRole { Dit, TextEncoder, Dense, None };
enum class LayerKind { SelfAttention, CrossAttention, Attention };
std::string_view role_name(ComponentRole role);  // "dit", "text_encoder", "dense", "none"
std::string_view layer_name(LayerKind kind);     // "self_attention", "cross_attention", "attention"

// Guesses the role from the model_index.json name and class: transformer* -> Dit,
// text_encoder* -> TextEncoder, vae* / image_encoder* -> Dense, tokenizers, schedulers and
// processors -> None (no attention).
ComponentRole component_role(const std::string& name, const std::string& class_name);

struct ComponentAttention {
  std::string name;
  ComponentRole role = ComponentRole::None;
  int64_t head_size = 0;  // 0: unknown (not checked)
  // A DiT: whether it has cross-attention layers (a single-stream transformer, whose text tokens
  // join the self-attention, has none and gets no cross-attention choice).
  bool cross_attention = true;
  // A DiT: why the sparse backends cannot run its self-attention; empty when they can. Any
  // sparse choice for it is then an Error that says so.
  std::string sparse_refusal;
  // A text encoder: the kind of attention its layers have. Only backends of that kind run it, and
  // auto picks one (dual_chunk_flash_attn for dual chunk attention).
  ModelAttention model_attention = ModelAttention::Plain;
};

struct SelectionLevels {
  std::optional<std::string> forced;  // level 1; read from force_attention_backend by default
  ComponentOverrides overrides;       // level 2
  std::optional<std::string> cli;     // level 3
  bool cli_from_config = false;       // `cli` came from a --config file (source Config)
  std::optional<std::string> env;     // level 3, used when `cli` is absent
  std::vector<std::string> notes;     // other tools' names translated (resolve_backend_name)
};

// Level 1 from the global force, the rest from the arguments; an empty env value counts as unset.
// The cli and env names are resolved (resolve_backend_name): an unknown one is an Error here,
// naming `cli_where` (the flag, or the config file's key that gave it).
SelectionLevels selection_levels(const ComponentOverrides& overrides,
                                 const std::optional<std::string>& cli,
                                 const std::optional<std::string>& env,
                                 std::string_view cli_where = "--attention-backend");

struct LayerChoice {
  LayerKind kind = LayerKind::Attention;
  std::string backend;   // what runs
  std::string fallback;  // why `backend` is not what was asked for; empty when it is
};

struct ComponentChoice {
  std::string component;
  ComponentRole role = ComponentRole::None;
  Source source = Source::Auto;
  std::string requested;            // the name as given at `source`; empty for auto
  std::string override_key;         // the override entry used (transformer for transformer_2)
  std::vector<LayerChoice> layers;  // empty for components without attention
  bool has_attention() const { return !layers.empty(); }
  // The main layer's choice: self-attention for a DiT, the only layer otherwise.
  const LayerChoice& primary() const { return layers.front(); }
};

// Selects the backends of one component. Throws Error for a choice that cannot be honoured.
ComponentChoice select_component(const ComponentAttention& component, const SelectionLevels& levels,
                                 const Machine& machine = this_machine());

// Checks override keys against the model's components (`with_attention`: present components that
// have attention layers; `absent`: listed as [null, null]; `without_attention`: e.g. tokenizer).
void check_override_components(const ComponentOverrides& overrides,
                               const std::vector<std::string>& with_attention,
                               const std::vector<std::string>& without_attention,
                               const std::vector<std::string>& absent,
                               const std::string& where = "--component-attention-backends");

}  // namespace mmgen::attention
