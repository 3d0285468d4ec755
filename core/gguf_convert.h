// `mmgen convert`: a component's weights (safetensors, one file or shards) into one GGUF file.
// Weight matrices take the asked type; what stays float32 follows the community's converters
// (ComfyUI-GGUF's convert.py, stable-diffusion.cpp): vectors (biases, norm weights), small tensors
// (1024 values or fewer), rows that are not whole quantization blocks, and the tensors a model
// reads at high precision whatever the checkpoint holds (norms, modulation tables, the time and
// text embedders and the patch embedding). Names are kept as stored: mmgen reads diffusers'
// names and the original releases' alike.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "core/gguf_quants.h"
#include "core/safetensors.h"

namespace mmgen::gguf {

// Whether `name` (of `shape`) stays in its precision whatever the asked type: not a matrix, 1024
// values or fewer, or a part the model reads at high precision (norms, modulation tables, the
// time and text embedders, the patch embedding). mmgen convert's FP8 output keeps the same ones.
bool keeps_precision(const std::string& name, const Shape& shape);

// The type `name` (of `shape`) is written as when `wanted` is asked for.
GgmlType converted_type(const std::string& name, const Shape& shape, GgmlType wanted);

// "q8_0", "q4_k", "f16", "bf16", "f32" → the type; anything else is refused in one line naming
// them.
GgmlType parse_convert_type(const std::string& text);

struct ConversionSummary {
  int64_t tensors = 0, converted = 0;  // converted: written as the asked type
  int64_t fallback = 0;                // written as q8_0 instead of q4_k (rows of 32-blocks)
  uint64_t bytes_in = 0, bytes_out = 0;
};

// Writes every tensor of `weights` to `out` (atomically; one tensor in memory at a time) with
// `metadata` and general.file_type / general.quantization_version set for `wanted`.
ConversionSummary convert_to_gguf(const WeightStore& weights, const std::filesystem::path& out,
                                  GgmlType wanted, nlohmann::json metadata);

}  // namespace mmgen::gguf
