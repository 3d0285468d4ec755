// Writes GGUF files (version 3, alignment 32) that ggml-based tools and the `gguf` Python package
// read: metadata (strings, integers, floats, booleans and arrays of them) and tensors stored as
// f32, f16, bf16, q8_0 (quantized here as ggml's reference quantize_row_q8_0 does: per block of
// 32, scale max|x|/127 in f16, values rounded half away from zero) or q4_k (see quantize_q4_k).
// Tensors of more than four dimensions are flattened to two and their shape kept in
// `comfy.gguf.orig_shape.<name>`, as ComfyUI-GGUF's converter does.
#pragma once

#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/gguf_quants.h"
#include "core/tensor.h"

namespace mmgen::gguf {

struct TensorToWrite {
  std::string name;
  Tensor values;  // any float dtype, host; undefined when `load` gives them
  GgmlType type = GgmlType::F32;
  // Instead of `values`: their shape, and a call that gives them when the tensor is written, so a
  // checkpoint larger than memory streams through one tensor at a time.
  Shape shape;
  std::function<Tensor()> load;
};

// q8_0 blocks of `count` float32 values (a multiple of 32) into `out` (count / 32 · 34 bytes).
void quantize_q8_0(const float* values, int64_t count, std::byte* out);

// q4_k super-blocks of `count` float32 values (a multiple of 256) into `out` (count / 256 · 144
// bytes), ggml's layout: per sub-block of 32, x ≈ d·sc·q − dmin·m with q in 0..15 and 6-bit sc
// and m under the super-block's f16 d and dmin. Each sub-block's scale and min come straight from
// its range (max − min(min, 0)) / 15, sc rounded up so the range fits; ggml's quantizer searches
// for the scale and min that minimise the error instead, so its files are somewhat closer.
void quantize_q4_k(const float* values, int64_t count, std::byte* out);

// Writes atomically; refuses a type it cannot write or rows that are not whole blocks. Each
// tensor is converted when it is written: memory holds one tensor's values and bytes at a time.
void write_gguf(const std::filesystem::path& path, const nlohmann::json& metadata,
                const std::vector<TensorToWrite>& tensors);

}  // namespace mmgen::gguf
