// The float32 CPU building blocks the models are written in. Inputs are contiguous float32 unless
// a function says otherwise; weights may be stored in bf16/f16 and are converted as they are used,
// so a model's resident memory stays close to its checkpoint's size.
#pragma once

#include "core/tensor.h"

namespace mmgen::ops {

// y[..., out] = x[..., in] · weightᵀ + bias, with weight [out, in] (any float dtype), bias [out] or
// undefined. GEMM through Eigen (OpenMP-parallel).
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

// c[m, n] = a[m, k] · b[k, n] (row-major, contiguous float32).
void gemm(const float* a, const float* b, float* c, int64_t m, int64_t k, int64_t n);
// c[m, n] = a[m, k] · bᵀ with b [n, k].
void gemm_bt(const float* a, const float* b, float* c, int64_t m, int64_t k, int64_t n);

// Normalisations over the last dimension. `weight` / `bias` may be undefined (no affine part).
Tensor layer_norm(const Tensor& x, float eps, const Tensor& weight = Tensor(), const Tensor& bias = Tensor());
// y = x / sqrt(mean(x²) + eps) · weight (torch.nn.RMSNorm / T5LayerNorm).
Tensor rms_norm(const Tensor& x, const Tensor& weight, float eps);

// In-place activations.
void silu_(Tensor& x);
void gelu_tanh_(Tensor& x);  // 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))
void add_(Tensor& x, const Tensor& y);  // same shape
void mul_(Tensor& x, const Tensor& y);  // same shape
void scale_(Tensor& x, float factor);

// float32 weights: the stored tensor when it already is, else a converted copy.
Tensor as_f32(const Tensor& x);

}  // namespace mmgen::ops
