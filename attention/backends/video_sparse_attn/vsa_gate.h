// The gate of Video Sparse Attention's coarse branch. In VSA-trained checkpoints each block has a
// `to_gate_compress` Linear(dim, dim) (no activation) applied to the attention INPUT, the
// norm1-modulated hidden states that to_q/to_k/to_v read (FastVideo's WanTransformerBlock_VSA),
// not to q, k or v. The layer hands video_sparse_attn that input with the call
// (AttentionContext::attention_input) and the backend computes the gate with vsa_gate(); a caller
// may instead pass a computed gate in the call's LayerWeights under kVsaGateKey (the tests do).
#pragma once

#include <cstdint>

#include "attention/backend.h"
#include "core/tensor.h"

namespace mmgen::attention {

// LayerWeights key of the computed gate: [B, S, H, D] or [B, S, H·D] float32, tokens in the same
// order as q.
inline constexpr const char* kVsaGateKey = "gate";
// LayerWeights keys of the projection itself (as the checkpoint names them after the block prefix).
inline constexpr const char* kVsaGateWeightKey = "to_gate_compress.weight";
inline constexpr const char* kVsaGateBiasKey = "to_gate_compress.bias";

// to_gate_compress(attention_input) reshaped to [B, S, heads, dim / heads]; attention_input is
// [B, S, dim]. Returns an undefined tensor when `weights` has no to_gate_compress.weight (then the
// gate is zero and VSA's output is its fine branch alone).
Tensor vsa_gate(const LayerWeights& weights, const Tensor& attention_input, int64_t heads);

}  // namespace mmgen::attention
