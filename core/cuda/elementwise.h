// Element-wise kernels behind the device-neutral ops (core/ops.h) and Tensor::to(): dtype
// conversion, activations and products in place, float32 math. Device pointers, default stream.
#pragma once

#include <cstdint>

#include "core/activation.h"

namespace mmgen::cuda {

void f32_to_bf16(const float* from, void* to, int64_t count);
void bf16_to_f32(const void* from, float* to, int64_t count);

void activate_f32(float* x, int64_t count, Activation activation);  // in place
void mul_f32(float* x, const float* y, int64_t count);              // x *= y
void scale_f32(float* x, float factor, int64_t count);              // x *= factor
void add_f32(float* x, const float* y, int64_t count);              // x += y
// out = silu(gate) · up over `count` values, each of the three bf16 (flag set) or float32; float32
// math, one rounding to bf16 at the store.
void silu_mul(const void* gate, bool gate_bf16, const void* up, bool up_bf16, void* out,
              bool out_bf16, int64_t count);
// For `pairs` (scale, gate) row pairs of `dim` float32 values: out scale row = norm · (1 + scale),
// out gate row = tanh(gate); norms holds one row per pair (ops::fold_scale_gate).
void fold_scale_gate(const float* modulation, const float* norms, float* out, int64_t pairs,
                     int64_t dim);
// x[r, c] += bias[c] for rows × dim float32 x.
void add_bias_f32(float* x, const float* bias, int64_t rows, int64_t dim);

}  // namespace mmgen::cuda
