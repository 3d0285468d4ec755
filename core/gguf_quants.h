// The tensor types of GGUF files (ggml's): their block sizes and bytes, and each one's
// dequantization to float32, written from the public format (ggml's gguf.md and the block layouts
// of ggml-common.h) and checked bit for bit against the `gguf` Python package's dequantize
// (tests/gguf_test.cpp, tests/data/gguf/make_fixture.py). Quantized weights are read through
// these, block by block (issue 23).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "core/dtype.h"

namespace mmgen::gguf {

// ggml_type values as the files store them.
enum class GgmlType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  BF16 = 30,
};

struct GgmlTypeInfo {
  std::string_view name;  // "q8_0", as ggml names it
  int64_t block = 1;      // elements per block
  size_t bytes = 0;       // bytes per block
};

// The type's layout, or null for a type mmgen does not read (named by its number).
const GgmlTypeInfo* ggml_type_info(uint32_t type);

// The tensor dtype whose elements are this type's blocks (core/dtype.h), or nullopt for the
// types that are not blocks (f32, f16, bf16); and back.
std::optional<DType> block_dtype(GgmlType type);
GgmlType ggml_type_of_blocks(DType dtype);

// `count` elements (a multiple of the type's block) at `blocks` → float32 at `out`.
void dequantize(GgmlType type, const std::byte* blocks, float* out, int64_t count);

}  // namespace mmgen::gguf
