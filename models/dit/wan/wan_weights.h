// Reading the Wan transformer's tensors from a WeightStore: presence and shape checks with
// messages that name the tensor and the checkpoint, and float32 access.
#pragma once

#include <string>

#include "core/safetensors.h"
#include "models/key_layout.h"
#include "models/parameters.h"

namespace mmgen::dit {

// A tensor the config implies (models::expect_parameter), for a Wan text-to-video transformer.
void expect_weight(const WeightStore& store, const std::string& name, const Shape& shape);

// The tensor as float32 (converted from bf16/f16 when stored so; a view when already float32).
Tensor load_weight(const WeightStore& store, const std::string& name);
// A linear layer's weight as stored (float32, bfloat16, float16, or a GGUF file's q8_0 blocks):
// the CPU product converts it as it packs it, so a bf16 or q8_0 checkpoint is never expanded
// whole; placing it on the GPU expands it (Tensor::to).
Tensor load_linear_weight(const WeightStore& store, const std::string& name);

// A checkpoint in the original Wan release's names (blocks.0.self_attn.q.weight, head.head.weight,
// as the community's Wan GGUF files keep them) under diffusers' names, as diffusers'
// convert_wan_to_diffusers.py renames them (norm3 and norm2 swap places); a diffusers checkpoint
// is returned as it is.
WeightStore with_diffusers_names(const WeightStore& store);

// The layouts a Wan transformer checkpoint comes in: diffusers', and the original release's
// (the official Wan2.1 repositories, ComfyUI's repackaged files, the community's GGUF files).
const std::vector<KeyLayout>& wan_transformer_layouts();

}  // namespace mmgen::dit
