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
// How linear_fp8's operands are scaled: one float per tensor, or one per row of x (m) and one per
// row of w (n), cuBLASLt's outer-vector scaling (quantize_e4m3_rows writes both).
enum class Fp8Scales { PerTensor, PerRow };
// linear_bf16 on FP8 operands (Hopper's e4m3 tensor-core products, twice bf16's rate): y[i, j] =
// act(x_scale · w_scale · (x[m, k] · w[n, k]ᵀ)[i, j] + bias[j]) with x and w e4m3 row-major and
// their scales in device memory (one float each, or x_scale[i] and w_scale[j] with PerRow;
// core/cuda/fp8.h); fp32 accumulation; bias and y in the output's dtype. k must be a multiple of
// 16 and n of 8.
void linear_fp8(const void* x, const float* x_scale, const void* w, const float* w_scale,
                const void* bias, void* y, int64_t m, int64_t n, int64_t k, GemmOutput output,
                cudaStream_t stream = nullptr, GemmActivation activation = GemmActivation::None,
                Fp8Scales scales = Fp8Scales::PerTensor);
// `batch` products of one x with weights laid one after another, no bias: y[b] = x · w[b]ᵀ with
// w [batch, n, k] and y [batch, m, n] contiguous. One strided-batched cuBLASLt call (x read with
// stride 0): Z-Image's q/k/v or w1/w3 as one launch, fewer partial waves than one call each.
void linear_bf16_batched(const void* x, const void* w, void* y, int64_t m, int64_t n, int64_t k,
                         int64_t batch, GemmOutput output, cudaStream_t stream = nullptr);

// A bf16 row-major operand of matmul_bf16: element (i, j) at data[i·row_stride + j], or, when
// `transposed`, at data[j·row_stride + i] (what is stored is the operand's transpose); product b of
// a batch starts b·batch_stride elements further on. Strided views let a product read one head of
// a [tokens, heads·D] activation in place.
struct MatrixOperand {
  const void* data = nullptr;
  int64_t row_stride = 0;
  int64_t batch_stride = 0;
  bool transposed = false;
};
// What matmul_bf16's epilogue adds to the product, in fp32 before y's rounding: a matrix of y's
// layout and dtype (`accumulate`, may be y itself), and a bias per column of y in y's dtype
// (cuBLASLt takes no float32 bias with a bf16 y here), the same for every product of the batch.
// Null: nothing.
struct MatmulEpilogue {
  const void* accumulate = nullptr;
  const void* bias = nullptr;
};
// y[b] = a[b] · b[b] (+ the epilogue) for b < batch: a is m x k, b is k x n, y is m x n row-major
// (row stride y_row_stride, product b at y + b·y_batch_stride elements), bf16 or float32; fp32
// accumulation, one strided-batched cuBLASLt call.
void matmul_bf16(const MatrixOperand& a, const MatrixOperand& b, void* y, int64_t y_row_stride,
                 int64_t y_batch_stride, int64_t m, int64_t n, int64_t k, int64_t batch,
                 GemmOutput output, cudaStream_t stream = nullptr,
                 const MatmulEpilogue& epilogue = {});

}  // namespace mmgen::cuda
