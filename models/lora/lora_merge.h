// LoRAs merged into a model's weights at load (the merge mode): each changed weight is read
// once, W + Σ s·(alpha / rank)·(up · down) computed in float32 and stored back in the weight's
// stored dtype, as diffusers' fuse_lora does, and the model then reads a WeightStore in which
// those weights replace the checkpoint's (WeightStore::with_replaced). Nothing else changes: the
// CPU forward, the GPU placement and the byte counts read the merged weights as they read any.
#pragma once

#include <string>
#include <vector>

#include "core/safetensors.h"
#include "models/lora/lora_file.h"
#include "models/parameters.h"

namespace mmgen::lora {

struct ScaledLora {
  const LoraFile* file = nullptr;
  double scale = 1.0;
};

// `base` with `loras` merged. `tree` is the model's parameter list (models/parameters.h): every
// layer a LoRA changes must be a product there (its weight [out, in] matching up · down) and a
// bias delta's bias must be listed too; otherwise Error, one line naming the file, its key and
// the model's tensor, before anything is merged. `model` names the model in that line
// ("WanTransformer3DModel"). A base stored as GGUF blocks or FP8 is refused (the runtime mode,
// which leaves the base as it is, is not built yet).
WeightStore merge_loras(const WeightStore& base, const models::ParameterList& tree,
                        const std::vector<ScaledLora>& loras, const std::string& model);

}  // namespace mmgen::lora
