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

// Q8_0: ggml's q8_0 blocks (an f16 scale and 32 int8 values, 34 bytes), for weights read from
// GGUF files. One element is one block, so a q8_0 matrix [n, k] is a tensor [n, k / 32]; only the
// CPU product reads it as it is, and to() expands it (to [n, k]).
enum class DType { F32, F64, BF16, F16, I64, I32, I8, U8, Bool, Q8_0 };

size_t dtype_size(DType dtype);
std::string_view dtype_name(DType dtype);  // "f32", "bf16", ...
// safetensors header spelling ("F32", "BF16", ...). nullopt for a name we do not know.
std::optional<DType> dtype_from_safetensors(std::string_view name);
std::string_view dtype_safetensors_name(DType dtype);
bool dtype_is_floating(DType dtype);

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

float f16_to_f32(uint16_t bits);
uint16_t f32_to_f16(float value);

}  // namespace mmgen
