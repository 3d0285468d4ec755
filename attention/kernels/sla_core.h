// SLA (Sparse-Linear Attention) as SGLang's sla_attn / sage_sla_attn backends run it, which is
// the `main` / TurboDiffusion form of the algorithm (not the SLA-1 branch):
//   block map: k̃ = k − mean over tokens of k; pq = mean of q over each query block (block_q rows,
//              the last partial), pk = mean of k̃ over each key block (block_k rows);
//              score = pq · pkᵀ (no scale); each query block keeps the kept_blocks() highest;
//   sparse:    softmax attention of each query block over its kept key blocks (block-sparse core);
//   linear:    φ applied along head_dim to q and k (softmax | elu + 1 | relu), over ALL keys:
//              o_l = φ(q)(φ(k)ᵀ v) / (1e-5 + φ(q) · Σ φ(k));
//   output:    o_s + proj_l(o_l), proj_l a [D, D] linear layer shared by the heads of a layer.
// proj_l is zero-initialised in SLA, so a layer without trained weights is pure block-sparse
// attention; mmgen skips the linear branch then. SageSLA runs the sparse branch with INT8 Q·K
// (attention/kernels/sla_quant.h).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string_view>
#include <vector>

#include "attention/backend.h"
#include "attention/catalogue.h"
#include "attention/kernels/block_sparse.h"
#include "core/tensor.h"

namespace mmgen::attention::sla {

// The --attention-backend-config settings sla_attn and sage_sla_attn share (their catalogue rows'
// schema); only the sparse kernel differs.
std::vector<ConfigKey> config_keys();

enum class FeatureMap { Softmax, Elu, Relu };

struct SlaSettings {
  double topk = 0.1;  // fraction of key blocks kept per query block
  int64_t block_q = 128, block_k = 64;
  FeatureMap feature_map = FeatureMap::Softmax;
  bool int8_qk = false;  // SageSLA: sparse-branch Q·K in INT8

  // From the validated backend config (attention/backend_config.h: every key present).
  static SlaSettings from_json(const nlohmann::json& config, bool int8_qk);
};

// Key blocks each query block keeps: floor(ratio · key_blocks) as upstream computes it, but at
// least 1 (upstream's floor can give 0, which attends nothing) and at most key_blocks.
int64_t kept_blocks(double ratio, int64_t key_blocks);

// The block map of every (batch, head): B·H patterns (index b·H + h) over uniform block_q /
// block_k layouts. q [B, Sq, H, D] and k [B, Sk, H, D] contiguous float32. Ties keep the lower
// key block.
std::vector<BlockSparsePattern> block_map(const Tensor& q, const Tensor& k,
                                          const SlaSettings& settings);

// The linear branch over all keys (see the top of this file). Returns [B, Sq, H, D] float32.
Tensor linear_attention(const Tensor& q, const Tensor& k, const Tensor& v, FeatureMap feature_map);

// out += o_l · weightᵀ + bias per head (weight [D, D], bias [D] or undefined).
void add_projection(Tensor& out, const Tensor& o_l, const Tensor& weight, const Tensor& bias);

// The whole forward. q [B, Sq, H, D], k and v [B, Sk, H, D] float32 (any strides). `weights` may
// be null or lack proj_l (then the linear branch is zero and `name` logs that once).
Tensor sla_forward(std::string_view name, const Tensor& q, const Tensor& k, const Tensor& v,
                   float scale, const SlaSettings& settings, const LayerWeights* weights,
                   AttentionStats* stats);

}  // namespace mmgen::attention::sla
