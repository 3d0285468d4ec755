// The Wan transformer's checkpoint: the key layouts it comes in and what its checks call it (the
// tensors' names and shapes are the weight structures', models/parameters.h).
#pragma once

#include <string>

#include "core/safetensors.h"
#include "models/key_layout.h"
#include "models/parameters.h"

namespace mmgen::dit {

// What the checks' errors call a Wan transformer checkpoint (models::expect_checkpoint).
inline constexpr models::CheckpointKind kWanCheckpoint{"transformer", "Wan text-to-video"};

// A checkpoint in the original Wan release's names (blocks.0.self_attn.q.weight, head.head.weight,
// as the community's Wan GGUF files keep them) under diffusers' names, as diffusers'
// convert_wan_to_diffusers.py renames them (norm3 and norm2 swap places); a diffusers checkpoint
// is returned as it is.
WeightStore with_diffusers_names(const WeightStore& store);
// One tensor's name of the original release in diffusers' names (a name it does not know, as it
// is): "blocks.0.self_attn.q.weight" -> "blocks.0.attn1.to_q.weight".
std::string wan_diffusers_name(const std::string& name);
// The same for a layer's name, as a LoRA file in the original names gives it (lora/lora_file.h):
// "blocks.0.self_attn.q" -> "blocks.0.attn1.to_q", "head.head" -> "proj_out".
std::string wan_lora_module_name(const std::string& original);

// The layouts a Wan transformer checkpoint comes in: diffusers', and the original release's
// (the official Wan2.1 repositories, ComfyUI's repackaged files, the community's GGUF files).
const std::vector<KeyLayout>& wan_transformer_layouts();

}  // namespace mmgen::dit
