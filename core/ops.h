// The building blocks the models are written in, one call for every device: an op runs where its
// input lives (a CUDA build sends GPU tensors to core/cuda/ops_cuda.h). On the CPU inputs are
// contiguous float32 unless a function says otherwise, and weights may be stored in bf16/f16 and
// are converted as they are used, so a model's resident memory stays close to its checkpoint's
// size. On the GPU products read bf16 activations and weights (float32 in the exact mode) and
// accumulate in float32; norms and element-wise ops work in float32.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "core/activation.h"
#include "core/tensor.h"

namespace mmgen::ops {

// y[..., out] = x[..., in] · weightᵀ + bias, with weight [out, in] (any float dtype), bias [out] or
// undefined. GEMM through Eigen (OpenMP-parallel).
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());
// The same with the result in `out` (the dtype the next op reads: bf16 for a GPU product's input;
// float32 for the residual stream). The CPU computes in float32 and converts.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias, DType out);
// The same with `activation` applied to the result (on the GPU in the product's epilogue, where
// cuBLASLt has it: the tanh GELU; elsewhere in float32 before the conversion to `out`).
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias, DType out,
              Activation activation);

// x · wᵢᵀ for each of `weights` (no bias), each result as `out`: the projections that read one
// input (attention's q/k/v, a SwiGLU's w1/w3). The numbers are linear's, weight by weight. On the
// GPU, bf16 weights of one shape that lie one after another in memory (stack_weights) run as one
// batched product: one launch, fewer partial waves of tiles than one product each.
std::vector<Tensor> linear_each(const Tensor& x, const std::vector<Tensor>& weights, DType out);
// `weights` (one shape [out, in]) converted to `dtype` and copied one after another into one
// allocation on `device`; returns the views of it, in order (what linear_each batches on the GPU).
std::vector<Tensor> stack_weights(const std::vector<Tensor>& weights, DType dtype, Device device);

// c[m, n] = a[m, k] · b[k, n] (row-major, contiguous float32).
void gemm(const float* a, const float* b, float* c, int64_t m, int64_t k, int64_t n);
// c[m, n] = a[m, k] · bᵀ with b [n, k].
void gemm_bt(const float* a, const float* b, float* c, int64_t m, int64_t k, int64_t n);

// Normalisations over the last dimension. `weight` / `bias` may be undefined (no affine part).
Tensor layer_norm(const Tensor& x, float eps, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor());
// The same with the result in `out` (GPU: float32 x, affine weight and bias required, bf16 out).
Tensor layer_norm(const Tensor& x, float eps, const Tensor& weight, const Tensor& bias, DType out);
// y = x / sqrt(mean(x²) + eps) · weight (torch.nn.RMSNorm / T5LayerNorm).
Tensor rms_norm(const Tensor& x, const Tensor& weight, float eps, DType out = DType::F32);
// torch.nn.GroupNorm over channels-first x [N, C, *] (contiguous float32): the C channels split
// into `groups` groups of C / groups, each normalised over its channels and positions, then
// y = x̂ · weight[c] + bias[c] (both [C], or undefined for no affine part), and SiLU after when
// `silu` (the VAE's norm-then-activation, in one pass). core/group_norm.cpp on the CPU,
// core/cuda/group_norm.cu on the GPU (float32 weight and bias there).
Tensor group_norm(const Tensor& x, int64_t groups, float eps, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), bool silu = false);

// In-place activations (float32).
void activate_(Tensor& x, Activation activation);
void silu_(Tensor& x);
// silu_ over n floats in place, on the calling thread: for kernels that apply it to the rows they
// just wrote (group_norm), with silu_'s values to the bit.
void silu_values(float* values, int64_t n);
void gelu_tanh_(Tensor& x);             // 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))
void add_(Tensor& x, const Tensor& y);  // same shape
void mul_(Tensor& x, const Tensor& y);  // same shape
// silu(gate) · up (same shapes), the SwiGLU gate in one pass, as `out` (float32 or bf16). The CPU
// computes exactly silu_ then mul_ on float32 and converts; the GPU reads bf16 or float32 and
// computes in float32, so the two products of a feed-forward can be written in bf16 and read once.
Tensor silu_mul(const Tensor& gate, const Tensor& up, DType out = DType::F32);
void scale_(Tensor& x, float factor);
// adaLN's (scale, gate) pairs folded for a residual block: `modulation` [..., 2·k, dim] float32
// holds k pairs of rows (scale, gate) per group, `norms` [..., k, dim] float32 the pre-norm weights
// the scales apply to (same leading dimensions, same device). Returns modulation's shape with each
// scale row norm·(1 + scale) and each gate row tanh(gate), float32, on their device: folding a
// timestep's modulation into the norms where the products that made it ran.
Tensor fold_scale_gate(const Tensor& modulation, const Tensor& norms);
// The operand checks fold_scale_gate makes on every device (one line naming the shapes on a
// mismatch): returns {groups, pairs, dim}.
std::array<int64_t, 3> fold_scale_gate_layout(const Tensor& modulation, const Tensor& norms);

// `shape` of values uniform in [−scale, scale) from a counter hash of (seed, index), made on
// `device` (random benchmark checkpoints); float32 or bf16, the same numbers on every device.
Tensor random_uniform(const Shape& shape, DType dtype, Device device, uint64_t seed, float scale);

// The row-wise ops of a DiT block (core/row_ops.cpp on the CPU). Rows are x's last dimension.
// out = LayerNorm(x, no affine) · scale_plus_one + shift per row: a block's timestep modulation
// (1 already added to the scale); shift and scale are `dim` float32 values on x's device.
Tensor modulated_layer_norm(const Tensor& x, const Tensor& shift, const Tensor& scale_plus_one,
                            float eps, DType out = DType::F32);
// x += y · gate (gate: `dim` float32 values broadcast over rows), or x += y when gate is
// undefined. float32.
void add_gated_(Tensor& x, const Tensor& y, const Tensor& gate = Tensor());
// x += y · gate (gate undefined: x += y), then returns LayerNorm(x, no affine) · scale + shift per
// row as `out`: a DiT block's residual update and the next pre-norm (scale and shift: a
// modulation's 1 + scale and shift, or an affine norm's weight and bias; `dim` float32 values on
// x's device). On the CPU y is float32 and this is add_gated_ then modulated_layer_norm; on the
// GPU (y float32 or bf16, out bf16) one pass, x read once.
Tensor add_gated_layer_norm_(Tensor& x, const Tensor& y, const Tensor& gate, float eps,
                             const Tensor& scale, const Tensor& shift, DType out);
// x += RMSNorm(y) · weight · gate (gate undefined: no gate), x float32 [rows, dim]: a block's
// post-norm joining the residual. On the CPU y is float32 and this is rms_norm then add_gated_;
// on the GPU (y float32 or bf16) one pass, the normed rows never written out.
void add_rms_norm_gated_(Tensor& x, const Tensor& y, const Tensor& weight, float eps,
                         const Tensor& gate = Tensor());
// add_rms_norm_gated_(x, y, weight, eps, gate), then returns rms_norm(x, next_weight, next_eps,
// out): a block's residual update and the next pre-norm. On the CPU the two ops; on the GPU
// (out bf16) one pass, x read once instead of twice.
Tensor add_rms_norm_gated_norm_(Tensor& x, const Tensor& y, const Tensor& weight, float eps,
                                const Tensor& gate, const Tensor& next_weight, float next_eps,
                                DType out);
// Interleaved-pair rotary embedding in place: pair j of every head of row r turns (x1, x2) into
// (x1·cos − x2·sin, x1·sin + x2·cos), cos and sin float32 [tokens, head_dim / 2] with row r using
// table row r mod tokens (rows are [batch, tokens] flattened). CPU only; the GPU fuses it below.
void rope_(Tensor& x, const Tensor& cos, const Tensor& sin, int64_t head_dim,
           int64_t rows_per_position = 1);
// Rotate-half rotary embedding in place (Qwen3 / Llama, transformers' apply_rotary_pos_emb): x
// [tokens, heads, head_dim] contiguous float32, dimension i pairs with i + head_dim / 2 and
// (a, b) becomes (a·cos − b·sin, b·cos + a·sin), cos and sin float32 [tokens, head_dim / 2] on
// x's device (row t for token t). Float32 on both devices: the GPU rounds q and k to bf16 once,
// after the rotation.
void rope_half_(Tensor& x, const Tensor& cos, const Tensor& sin);
// x = RMSNorm(x) · weight per row, in place, then rope_ when cos is defined: q/k normalisation
// across heads (float32 on the CPU; bf16, the product's output, on the GPU, in one pass).
// Row r takes table row (r / rows_per_position) % tables: a model normalising each head alone
// views q as one row per head and passes heads here, so its tables hold one row per token.
void rms_norm_rope_(Tensor& x, const Tensor& weight, float eps, const Tensor& cos = Tensor(),
                    const Tensor& sin = Tensor(), int64_t head_dim = 0,
                    int64_t rows_per_position = 1);
// x [rows, ...] contiguous → [rows·times, ...]: row r·times + j is x's row r, each row repeated
// `times` times in a block (the three rotations of a dual chunk attention query start as three
// copies). Any dtype, on x's device.
Tensor repeat_rows(const Tensor& x, int64_t times);
// A weight as float32 (in parallel for bf16): the stored tensor when it already is.
Tensor weight_to_f32(const Tensor& weight);

// float32 weights: the stored tensor when it already is, else a converted copy.
Tensor as_f32(const Tensor& x);

}  // namespace mmgen::ops
