// Opening a component's weights, once for every pipeline: from its folder (safetensors, shards, or
// one GGUF) or from the one file --<component>-path names, in whichever key layout the model
// reads (models/key_layout.h), mapped onto the model's names. `mmgen inspect` shows the mapping.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/safetensors.h"
#include "pipeline/model_index.h"

namespace mmgen {

struct ComponentWeights {
  WeightStore store;   // under the names the model loads
  std::string layout;  // "diffusers", "original Wan", ...; empty where the class lists none
  std::string prefix;  // a prefix every stored key had and the mapping took off, or empty
  size_t mapped = 0;   // keys whose stored name differs from the model's
  size_t split = 0;    // of them, keys cut by rows from a fused tensor (FLUX's q, k, v)
  size_t fused = 0;    // the fused tensors they were cut from
  // A few (stored, model) pairs: plain renames and, where there is one, a cut.
  std::vector<std::pair<std::string, std::string>> examples;
};

// A file whose keys match none of the class's layouts is refused in one line naming a key that
// each layout would have; a folder's weights are handed on as they are then (the model names the
// first missing tensor).
ComponentWeights open_component_weights(const ComponentEntry& entry);
WeightStore component_weight_store(const ComponentEntry& entry);

}  // namespace mmgen
