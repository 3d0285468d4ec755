// FP8 (e4m3) operands for Hopper's tensor cores, which multiply them at twice bf16's rate: a
// tensor scaled into e4m3's range as a whole (one float scale per tensor, kept on the device so no
// step waits for the host), and back. Pointers are device memory.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace mmgen::cuda {

// The largest finite e4m3 value.
constexpr float kE4m3Max = 448.0f;

// out[i] = e4m3(x[i] / scale) with scale = max|x| / 448 (1 when x is all zeros), written to
// *scale; rounded to nearest even, saturating at ±448. x is `count` bf16 values (x_bf16) or float32
// ones; `amax` is one float of device scratch the call overwrites. Two passes over x (the maximum,
// then the conversion), no host synchronisation.
void quantize_e4m3(const void* x, bool x_bf16, int64_t count, void* out, float* scale, float* amax,
                   cudaStream_t stream = nullptr);

// One scale per row instead (what an FP8 product with outer-vector scales reads: per-token scales
// for activations, per-output-channel scales for a weight [n, k]): for each of `rows` bf16 rows of
// `cols` values (row r at x + r·row_stride), scales[r] = max|row| / 448 (1 for a row of zeros) and
// out[r·cols + c] = e4m3(x[r][c] / scales[r]), rounded to nearest even, saturating. One CTA per
// row, 16-byte loads; cols must be a multiple of 8 and row_stride too.
void quantize_e4m3_rows(const void* x, int64_t rows, int64_t cols, int64_t row_stride, void* out,
                        float* scales, cudaStream_t stream = nullptr);

// The reverse of quantize_e4m3_rows: out[r·cols + c] = float(q[r·cols + c]) · scales[r], as
// bf16 (out_bf16) or float32.
void dequantize_e4m3_rows(const void* q, const float* scales, int64_t rows, int64_t cols, void* out,
                          bool out_bf16, cudaStream_t stream = nullptr);

// out[i] = float(q[i]) · *scale for `count` e4m3 values: what a product of quantized operands
// multiplies (tests and error measurements).
void dequantize_e4m3(const void* q, const float* scale, int64_t count, float* out,
                     cudaStream_t stream = nullptr);

}  // namespace mmgen::cuda
