// Matrix products on the GPU through cuBLASLt: bf16 operands, fp32 accumulation, the bias added in
// the epilogue, output in bf16 or fp32. Weights are PyTorch's [out_features, in_features].
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace mmgen::cuda {

enum class GemmOutput { BF16, F32 };
// What the epilogue applies after the bias: nothing, or GELU in its tanh form (cuBLASLt's GELU
// epilogue is the tanh approximation, the one Wan's feed-forward uses).
enum class GemmActivation { None, GeluTanh };

// y[m, n] = act(x[m, k] · w[n, k]ᵀ + bias[n]); x, w bf16 row-major; bias (may be null; required
// with an activation) and y in the output's dtype.
void linear_bf16(const void* x, const void* w, const void* bias, void* y, int64_t m, int64_t n,
                 int64_t k, GemmOutput output, cudaStream_t stream = nullptr,
                 GemmActivation activation = GemmActivation::None);
// `batch` products of one x with weights laid one after another, no bias: y[b] = x · w[b]ᵀ with
// w [batch, n, k] and y [batch, m, n] contiguous. One strided-batched cuBLASLt call (x read with
// stride 0): Z-Image's q/k/v or w1/w3 as one launch, fewer partial waves than one call each.
void linear_bf16_batched(const void* x, const void* w, void* y, int64_t m, int64_t n, int64_t k,
                         int64_t batch, GemmOutput output, cudaStream_t stream = nullptr);

}  // namespace mmgen::cuda
