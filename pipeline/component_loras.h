// A component's LoRAs (ComponentEntry::loras, from --lora-path / --lora-scale / --lora-mode), read
// and applied to its weights as it loads (models/lora/): the one place a pipeline's models get
// them, so every model with a parameter list (models/parameters.h) takes LoRAs in the names its
// checkpoint uses, and a model whose original release names its layers otherwise (Wan) says how
// through `Model::lora_module_name`.
#pragma once

#include <nlohmann/json.hpp>

#include "core/safetensors.h"
#include "models/lora/lora_file.h"
#include "models/parameters.h"
#include "pipeline/model_index.h"

namespace mmgen {

// `loras` given to the index's components, each file checked to be there and be a .safetensors
// file, and hashed (LoraUse::sha256): each goes to every component its keys are for that the
// pipeline applies LoRAs to (PipelineSpec::lora_components: FLUX's CLIP text encoder too), the
// others' keys left out (what is in the file is read when each component loads). Error, one line,
// otherwise. Returns one warning line per file's keys for a component the pipeline applies no LoRA
// to.
std::vector<std::string> attach_loras(ModelIndex& index, const std::vector<lora::LoraUse>& loras,
                                      lora::LoraMode mode = lora::LoraMode::Auto);

// `weights` with `entry.loras` applied in entry.lora_mode (lora_merge.h), each file logged with its
// format, the layers it changes and what was left out. Throws Error, one line, for a file that
// cannot be read or does not fit the model `tree` lists.
WeightStore with_loras(const ComponentEntry& entry, const WeightStore& weights,
                       const models::ParameterList& tree, const lora::ModuleNames& original_names);

// The LoRAs given to `entry`, read from their files (no model needed: layers as each file names
// them, a fused layer counted once): per file its path, SHA-256, bytes, format, layer count,
// ranks and scale, and the keys left out; [] when it has none. What --dry-run and inspect show.
nlohmann::json loras_json(const ComponentEntry& entry);

// What the output's metadata records of the `requested` LoRAs, in order, once attach_loras gave
// them to `index`: each file's name, SHA-256 (the one attach_loras took) and scale.
nlohmann::json loras_metadata(const ModelIndex& index, const std::vector<lora::LoraUse>& requested);

}  // namespace mmgen
