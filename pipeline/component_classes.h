// Every component class mmgen can load, by the name model_index.json gives it ("name": [library,
// ClassName]), with its kind. A pipeline (pipeline/registry.h) says which of these classes each of
// its components may be; anything else is refused before any weights are read.
#pragma once

#include <string>
#include <vector>

namespace mmgen {

enum class ComponentKind { Scheduler, Tokenizer, TextEncoder, Transformer, Vae };

struct ComponentClass {
  std::string name;  // diffusers' / transformers' class name: "AutoencoderKLWan"
  ComponentKind kind;
  std::string library;  // where model_index.json says it comes from: "diffusers", "transformers"
  std::string builds;   // the mmgen type loaded from it: "vae::WanVaeDecoder"
  // Transformers: what the attention selector must know of their layers beyond the role.
  struct DitTraits {
    bool cross_attention = true;  // false: the caption joins the self-attention instead
    // Why the sparse backends are refused for it; empty where they are wired.
    std::string sparse_refusal;
  } dit;
  // general.architecture in a GGUF file `mmgen convert` writes, as ComfyUI-GGUF and
  // stable-diffusion.cpp name the model; empty: the class name in lower case.
  std::string gguf_architecture;
};

const std::vector<ComponentClass>& component_classes();
// The class called `name`, or null when mmgen has none.
const ComponentClass* find_component_class(const std::string& name);
// The names of the classes of one kind, in table order.
std::vector<std::string> component_class_names(ComponentKind kind);
// "scheduler", "text encoder", "VAE", ...; `plural` gives "schedulers", ...
std::string kind_name(ComponentKind kind, bool plural = false);

}  // namespace mmgen
