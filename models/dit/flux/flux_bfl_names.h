// FLUX.1 checkpoints in Black Forest Labs' own layout (the official flux1-dev / flux1-schnell
// files, ComfyUI's and the community's GGUF files keep it): `double_blocks.N.img_attn.qkv` with
// q, k and v fused, `single_blocks.N.linear1` with q, k, v and the MLP's input fused, `img_in`,
// `time_in.in_layer`, `final_layer.adaLN_modulation.1` with shift before scale. This maps them
// onto diffusers' FluxTransformer2DModel names, as diffusers' single-file loader converts them:
// the fused matrices are split by rows and the final modulation's halves swapped, all as views
// of the stored tensors (WeightStore::with_row_pieces), nothing copied at load.
#pragma once

#include <string>
#include <vector>

#include "core/safetensors.h"
#include "models/key_layout.h"
#include "models/lora/lora_file.h"

namespace mmgen::dit {

WeightStore flux_from_bfl_names(const WeightStore& store);

// A LoRA layer named in BFL's layout ("double_blocks.0.img_attn.qkv", as ComfyUI's and kohya's
// FLUX LoRAs name them) as the diffusers modules it changes, a fused layer's rows split as
// flux_from_bfl_names splits the weights; `dim` is the model's width. Empty for a name that is
// not BFL's.
std::vector<lora::LoraTarget> flux_lora_targets(const std::string& bfl, int64_t dim);

// The layouts a FLUX.1 transformer checkpoint comes in: diffusers' and BFL's.
const std::vector<KeyLayout>& flux_transformer_layouts();

}  // namespace mmgen::dit
