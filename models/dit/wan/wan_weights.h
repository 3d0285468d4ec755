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

// The layouts a Wan transformer checkpoint comes in: diffusers', and the original release's
// (the official Wan2.1 repositories, ComfyUI's repackaged files, the community's GGUF files).
const std::vector<KeyLayout>& wan_transformer_layouts();

}  // namespace mmgen::dit
