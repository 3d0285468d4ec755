// `mmgen convert --type fp8_e4m3`: a component's weights into one safetensors file in ComfyUI's
// scaled-FP8 layout (core/scaled_fp8.h), which ComfyUI and mmgen both read: each weight matrix
// as e4m3 with one float32 scale `<layer>.scale_weight` (max |w| / 448), a `scaled_fp8` marker,
// and every other tensor as stored (the ones gguf::keeps_precision names). Names stay as stored.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>

#include "core/safetensors.h"

namespace mmgen::fp8 {

struct ConversionSummary {
  int64_t tensors = 0, converted = 0;  // converted: written as e4m3
  uint64_t bytes_in = 0, bytes_out = 0;
};

// Writes every tensor of `weights` to `out` (atomically; one tensor in memory at a time).
ConversionSummary convert_to_fp8(const WeightStore& weights, const std::filesystem::path& out,
                                 std::map<std::string, std::string> metadata);

// The name of the scale ComfyUI's loader looks for beside weight `name`.
std::string scale_name_of(const std::string& name);

}  // namespace mmgen::fp8
