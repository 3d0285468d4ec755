// Element types a tensor can hold, with their safetensors / numpy spellings and the explicit
// half-precision conversions the kernels use.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

namespace mmgen {

// F8E4M3: e4m3 values as a safetensors file stores them (F8_E4M3; ComfyUI's FP8 checkpoints),
// one byte each, with no scale; WeightStore applies a file's scales when it reads them.
// F8E4M3Rows: e4m3 values (one byte each; the OCP FP8 format Hopper's tensor cores read) with one
// float32 scale per row (the last dimension), a value being e4m3 · its row's scale; the scales
// follow the values in the same allocation, from the first 16-byte boundary after them
// (row_scales_offset). What an FP8 product with per-row scales reads: a weight with one scale per
// output channel, activations with one per token. Whole tensors only: views keep every row.
// Q8_0 ... Q6_K: ggml's quantized blocks (core/gguf_quants.h), for weights read from GGUF files.
// One element is one block (32 values; 256 for the K-quants Q4_K, Q5_K, Q6_K), so a quantized
// matrix [n, k] is a tensor [n, k / block]; only the CPU product reads it as it is, and to()
// expands it (to [n, k]).
enum class DType {
  F32,
  F64,
  BF16,
  F16,
  I64,
  I32,
  I8,
  U8,
  Bool,
  F8E4M3,
  F8E4M3Rows,
  Q8_0,
  Q4_0,
  Q4_1,
  Q5_0,
  Q5_1,
  Q4_K,
  Q5_K,
  Q6_K
};

size_t dtype_size(DType dtype);
std::string_view dtype_name(DType dtype);  // "f32", "bf16", ...
// safetensors header spelling ("F32", "BF16", ...). nullopt for a name we do not know.
std::optional<DType> dtype_from_safetensors(std::string_view name);
std::string_view dtype_safetensors_name(DType dtype);
bool dtype_is_floating(DType dtype);
// Values per element: a quantized block's count (32 or 256), 1 for every other type.
int64_t dtype_block_values(DType dtype);
bool dtype_is_blocks(DType dtype);

inline float bf16_to_f32(uint16_t bits) {
  return std::bit_cast<float>(uint32_t(bits) << 16);
}

// Round to nearest even, as torch does; NaN stays NaN.
inline uint16_t f32_to_bf16(float value) {
  uint32_t bits = std::bit_cast<uint32_t>(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return uint16_t((bits >> 16) | 0x40);
  uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return uint16_t((bits + rounding) >> 16);
}

// Where an F8E4M3Rows tensor of `values` values keeps its row scales, in bytes from its start.
inline size_t row_scales_offset(int64_t values) {
  return (size_t(values) + 15) / 16 * 16;
}

// e4m3 by rounding to nearest even, saturated at ±448 (the bits), and the value of bits: the
// host's reference for the GPU's __nv_cvt_float_to_fp8(..., __NV_SATFINITE, __NV_E4M3).
uint8_t f32_to_e4m3(float value);
float e4m3_to_f32(uint8_t bits);
constexpr float kE4m3Largest = 448.0f;

float f16_to_f32(uint16_t bits);
uint16_t f32_to_f16(float value);

}  // namespace mmgen
