// The CUDA implementations of the device-neutral ops (core/ops.h): core/ops.cpp calls these when
// an op's input lives on the GPU. Same contracts as the CPU ops, plus what the GPU adds: products
// read bf16 (or float32 in the exact mode) activations and weights of the same dtype, and may
// write bf16 for the next product.
#pragma once

#include <vector>

#include "core/activation.h"
#include "core/low_rank.h"
#include "core/tensor.h"

namespace mmgen::cuda::ops {

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias, DType out,
              Activation activation);
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias, DType out);
std::vector<Tensor> linear_each(const Tensor& x, const std::vector<Tensor>& weights, DType out);
// y += (x · downᵀ) · upᵀ (core/low_rank.h): the second product accumulates into y in its
// epilogue (y bf16 or float32, contiguous).
void add_low_rank_(Tensor& y, const Tensor& x, const LowRankUpdate& update);
Tensor layer_norm(const Tensor& x, float eps, const Tensor& weight, const Tensor& bias, DType out);
Tensor modulated_layer_norm(const Tensor& x, const Tensor& shift, const Tensor& scale_plus_one,
                            float eps, DType out);
void add_gated_(Tensor& x, const Tensor& y, const Tensor& gate);
Tensor add_gated_layer_norm_(Tensor& x, const Tensor& y, const Tensor& gate, float eps,
                             const Tensor& scale, const Tensor& shift, DType out);
void add_rms_norm_gated_(Tensor& x, const Tensor& y, const Tensor& weight, float eps,
                         const Tensor& gate);
Tensor add_rms_norm_gated_norm_(Tensor& x, const Tensor& y, const Tensor& weight, float eps,
                                const Tensor& gate, const Tensor& next_weight, float next_eps,
                                DType out);
void rms_norm_rope_(Tensor& x, const Tensor& weight, float eps, const Tensor& cos,
                    const Tensor& sin, int64_t head_dim, int64_t rows_per_position);
void rope_half_(Tensor& x, const Tensor& cos, const Tensor& sin);
Tensor rms_norm(const Tensor& x, const Tensor& weight, float eps, DType out);
// float32 in and out; weight and bias float32 [C] on the GPU, or undefined.
Tensor group_norm(const Tensor& x, int64_t groups, float eps, const Tensor& weight,
                  const Tensor& bias, bool silu);
void activate_(Tensor& x, Activation activation);
void add_(Tensor& x, const Tensor& y);
void mul_(Tensor& x, const Tensor& y);
// gate and up bf16 or float32 on the GPU; out bf16 or float32.
Tensor silu_mul(const Tensor& gate, const Tensor& up, DType out);
Tensor fold_scale_gate(const Tensor& modulation, const Tensor& norms);  // float32 on the GPU
void scale_(Tensor& x, float factor);
Tensor repeat_rows(const Tensor& x, int64_t times);
Tensor random_uniform(const Shape& shape, DType dtype, uint64_t seed, float scale);

}  // namespace mmgen::cuda::ops
