// ggml's quantized blocks (core/gguf_quants.h) expanded on the GPU: what lets a GGUF transformer
// keep its q8_0 ... q6_k matrices on the GPU as stored and expand each one just before its product
// (ops::linear), so the GPU holds the quantized model and one expanded matrix at a time.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace mmgen::cuda {

// The block types (core/dtype.h's Q8_0 ... Q6_K; the .cu files are C++17 and do not include it).
enum class GgufBlock { Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K };

// `count` blocks of `type` (each `block_bytes` holding `block_values` values: core/dtype.h's
// dtype_size and dtype_block_values) at `blocks` into their values at `out`: float32, or bf16
// (out_bf16, each float32 value rounded to nearest even). The float32 values are
// gguf::dequantize's to the bit (the same operations, rounded one at a time, never fused).
void dequantize_blocks(GgufBlock type, int block_bytes, int block_values, const void* blocks,
                       int64_t count, void* out, bool out_bf16, cudaStream_t stream = nullptr);

}  // namespace mmgen::cuda
