// Z-Image transformer checkpoints in the original release's layout (Tongyi-MAI's own files and
// ComfyUI's repackaged ones): `x_embedder` and `final_layer` without diffusers' per-patch-size
// `all_…2-1` keys, `attention.qkv` with q, k and v fused, `attention.out`, `attention.q_norm`.
// This maps them onto diffusers' ZImageTransformer2DModel names as diffusers' single-file loader
// converts them (the fused matrix split by rows, as views: WeightStore::with_row_pieces).
#pragma once

#include <string>
#include <vector>

#include "core/safetensors.h"
#include "models/key_layout.h"
#include "models/lora/lora_file.h"

namespace mmgen::dit {

WeightStore zimage_from_original_names(const WeightStore& store);

// A LoRA layer in the original names ("layers.0.attention.out", "layers.0.attention.qkv") as the
// diffusers modules it changes (the fused qkv's rows split into to_q, to_k and to_v of width
// `dim`); empty for a name that is already diffusers'.
std::vector<lora::LoraTarget> zimage_lora_targets(const std::string& original, int64_t dim);

// The layouts a Z-Image transformer checkpoint comes in: diffusers' and the original release's.
const std::vector<KeyLayout>& zimage_transformer_layouts();

}  // namespace mmgen::dit
