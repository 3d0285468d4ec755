// The layers FLUX and Qwen-Image share (both MMDiT transformers in diffusers' layout): loading a
// checked linear layer and an adaLN product, and in a block the adaLN modulation, the q/k
// projection with its per-head RMSNorm and rotation, and the tanh-GELU MLP.
//
// The double-stream block built from them, which both models run, is mmdit_joint_block.h; each
// model names its own tensors, and the checks' errors name the model a checkpoint was read as.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "core/tensor.h"
#include "models/dit/flux/flux_rope.h"
#include "models/parameters.h"

namespace mmgen::dit {

// diffusers builds these models' LayerNorms and q/k RMSNorms with eps 1e-6.
inline constexpr float kMMDiTEps = 1e-6f;

// A linear layer: the weight [out, in] as stored (the CPU) or placed, the bias float32 [out]
// (named for FLUX, the first model that used it).
struct FluxLinear {
  Tensor weight, bias;
  void parameters(const models::ParameterVisitor& visit);  // "weight", "bias"
};

// Checks a checkpoint's tensors against the shapes its config.json implies, each failure one line
// naming the tensor, the checkpoint and, for a missing tensor, the model it was read as.
struct MMDiTWeightCheck {
  const WeightStore& store;
  const char* model;  // "FLUX", "Qwen-Image": "(or is not a <model> transformer)"

  // A float tensor (f32, bf16, f16 or f8_e4m3) of `shape`.
  void tensor(const std::string& name, const Shape& shape) const;
  // name.weight [out, in] and name.bias [out].
  void linear(const std::string& name, int64_t out, int64_t in) const;
};

// A tensor converted to float32 (norms, biases).
Tensor mmdit_f32(const WeightStore& store, const std::string& name);
// name.weight as stored (contiguous), name.bias float32.
FluxLinear mmdit_linear(const WeightStore& store, const std::string& name);
// An adaLN product whose chunks `scales` (of `chunks`, each [dim]) are scales: 1 is added to their
// bias (a copy, never the mapped file's bytes) so the product gives 1 + scale.
FluxLinear mmdit_adaln_linear(const WeightStore& store, const std::string& name, int64_t chunks,
                              std::initializer_list<int64_t> scales);

// The adaLN product for one item: [chunks, dim] float32 (1 is already in the scales' bias).
// `conditioning` is SiLU(temb) [1, dim] in the compute dtype.
Tensor mmdit_modulation(const FluxLinear& w, const Tensor& conditioning, int64_t chunks);

// The attention's head layout: `heads` heads of `head_dim` channels.
struct MMDiTHeads {
  int64_t heads = 0, head_dim = 0;
};

// q or k of one stream: its projection in `compute`, then per-head RMSNorm and the rotation of its
// rows (the attention processors' order: norm_q, then the rotary embedding). [rows, dim].
Tensor mmdit_rotated(const Tensor& normed, const FluxLinear& projection, const Tensor& norm,
                     const FluxRopeTables& rope, MMDiTHeads layout, DType compute);

// [rows, dim] as [1, rows, heads, head_dim], what the attention reads.
Tensor mmdit_as_heads(const Tensor& x, MMDiTHeads layout);

// FeedForward(activation_fn="gelu-approximate") of one stream: out(GELU_tanh(in(x))), float32 for
// the gated residual update.
Tensor mmdit_mlp(const Tensor& normed, const FluxLinear& in, const FluxLinear& out, DType compute);

// `parts` (each [rows, dim] of one dtype, on one device) one after another: [Σ rows, dim].
Tensor mmdit_stack_rows(const std::vector<Tensor>& parts);

}  // namespace mmgen::dit
