// A checkpoint's key layout: the names diffusers (or transformers) give a model's parameters, or
// an original release's (Wan's `blocks.0.self_attn.q`, BFL's FLUX `double_blocks.0.img_attn.qkv`)
// that the model maps onto the names it loads. Each model lists the layouts it reads beside its
// weights; the pipeline picks one by its marker when it opens a component (component_weights.h).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/safetensors.h"

namespace mmgen {

struct KeyLayout {
  std::string name;    // "diffusers", "original Wan", ...
  std::string marker;  // a key this layout has and the model's other layouts lack
  // The same weights under the model's names; empty for the model's own layout.
  std::function<WeightStore(const WeightStore&)> to_model_names;
  // A layout recognised but not read yet: what to do instead (its checkpoints are refused).
  std::string refusal;
};

}  // namespace mmgen
