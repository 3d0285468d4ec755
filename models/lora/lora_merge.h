// LoRAs applied to a model's weights at load, in either mode (lora_file.h's LoraMode).
// Merge: each changed weight is read once, W + Σ s·(alpha / rank)·(up · down) computed in
// float32 and stored back in the weight's stored dtype, as diffusers' fuse_lora does, and the
// model then reads a WeightStore in which those weights replace the checkpoint's
// (WeightStore::with_replaced). Runtime: each changed matrix carries one low-rank update, the
// LoRAs' down matrices stacked and their scaled up matrices side by side
// (WeightStore::with_low_rank, core/low_rank.h), and its products add it as they run. Bias
// deltas are merged in both (a bias is never quantized). Nothing else changes: the CPU forward,
// the GPU placement and the byte counts read these weights as they read any.
#pragma once

#include <set>
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
// ("WanTransformer3DModel"). A base stored as GGUF blocks or FP8 is refused (the runtime mode
// leaves it as it is).
WeightStore merge_loras(const WeightStore& base, const models::ParameterList& tree,
                        const std::vector<ScaledLora>& loras, const std::string& model);

// The same checks, then `loras` as runtime updates (bias deltas merged).
WeightStore with_runtime_loras(const WeightStore& base, const models::ParameterList& tree,
                               const std::vector<ScaledLora>& loras, const std::string& model);

// Merge or Runtime for `mode` (Auto: Runtime when a matrix the LoRAs change is stored FP8 or as
// GGUF blocks, which a merge would have to requantize).
// The modules whose matrix `tree` lists as a product's (or as a host table a product reads):
// the layers a LoRA may change ("blocks.0.attn1.to_q").
std::set<std::string> linear_modules(const models::ParameterList& tree);

LoraMode resolved_mode(LoraMode mode, const WeightStore& base,
                       const std::vector<ScaledLora>& loras);

}  // namespace mmgen::lora
