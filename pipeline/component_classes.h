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
};

const std::vector<ComponentClass>& component_classes();
// The class called `name`, or null when mmgen has none.
const ComponentClass* find_component_class(const std::string& name);
// The names of the classes of one kind, in table order.
std::vector<std::string> component_class_names(ComponentKind kind);
// "scheduler", "text encoder", "VAE", ...; `plural` gives "schedulers", ...
std::string kind_name(ComponentKind kind, bool plural = false);

}  // namespace mmgen
