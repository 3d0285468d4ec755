// The layers FLUX and Qwen-Image share (both MMDiT transformers in diffusers' layout): a linear
// layer and an adaLN product, and in a block the adaLN modulation, the q/k projection with its
// per-head RMSNorm and rotation, and the tanh-GELU MLP.
//
// The double-stream block built from them, which both models run, is mmdit_joint_block.h; each
// model names its own tensors (checked and loaded through models/parameters.h).
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
  int64_t out = 0, in = 0;
  Tensor weight, bias;
  static FluxLinear shaped(int64_t out, int64_t in) { return {out, in, {}, {}}; }
  void parameters(const models::ParameterVisitor& visit);  // "weight", "bias"
};

// A loaded adaLN product whose chunks `scales` (of `chunks`, each [dim]) are scales: 1 added to
// their bias (a copy, never the mapped file's bytes) so that the product gives 1 + scale.
void mmdit_add_one_to_scales(FluxLinear& product, int64_t chunks,
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
