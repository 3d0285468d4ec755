#include "models/dit/wan_block.h"

#include <algorithm>
#include <vector>

#include "core/error.h"
#include "core/ops.h"
#include "models/dit/wan_kernels.h"
#include "models/dit/wan_weights.h"

namespace mmgen::dit {
namespace {

// Token rows per feed-forward chunk: bounds the [rows, ffn_dim] hidden activation (147 MB for the
// 1.3B model's 8960) while keeping the GEMMs large enough to run at full speed.
constexpr int64_t kFfnChunkRows = 4096;

std::string block_prefix(int64_t layer) {
  return "blocks." + std::to_string(layer) + ".";
}

WanAttentionWeights load_attention(const WeightStore& store, const std::string& prefix) {
  WanAttentionWeights w;
  w.q_weight = load_weight(store, prefix + "to_q.weight");
  w.q_bias = load_weight(store, prefix + "to_q.bias");
  w.k_weight = load_weight(store, prefix + "to_k.weight");
  w.k_bias = load_weight(store, prefix + "to_k.bias");
  w.v_weight = load_weight(store, prefix + "to_v.weight");
  w.v_bias = load_weight(store, prefix + "to_v.bias");
  w.out_weight = load_weight(store, prefix + "to_out.0.weight");
  w.out_bias = load_weight(store, prefix + "to_out.0.bias");
  w.norm_q = load_weight(store, prefix + "norm_q.weight");
  w.norm_k = load_weight(store, prefix + "norm_k.weight");
  return w;
}

void check_attention(const WeightStore& store, const std::string& prefix, int64_t dim) {
  for (const char* name : {"to_q", "to_k", "to_v", "to_out.0"}) {
    expect_weight(store, prefix + name + ".weight", {dim, dim});
    expect_weight(store, prefix + name + ".bias", {dim});
  }
  expect_weight(store, prefix + "norm_q.weight", {dim});
  expect_weight(store, prefix + "norm_k.weight", {dim});
}

// Attention of `queries` [B, S, D] over `context` [B, L, D] (the queries themselves for
// self-attention), through the projections, q/k RMSNorm across heads and, for self-attention,
// RoPE. Returns the output projection [B, S, D].
Tensor attend(const Tensor& queries, const Tensor& context, const WanAttentionWeights& w,
              const WanTransformerConfig& config, const WanRope* rope,
              const WanAttentionCall& call) {
  const int64_t batch = queries.size(0), q_len = queries.size(1), kv_len = context.size(1);
  const int64_t dim = config.inner_dim(), heads = config.num_attention_heads,
                head_dim = config.attention_head_dim;
  Tensor attended;
  {
    Tensor q = ops::linear(queries, w.q_weight, w.q_bias);
    rms_norm_rows_(q.data<float>(), batch * q_len, dim, w.norm_q.data<float>(), config.eps);
    Tensor k = ops::linear(context, w.k_weight, w.k_bias);
    rms_norm_rows_(k.data<float>(), batch * kv_len, dim, w.norm_k.data<float>(), config.eps);
    Tensor v = ops::linear(context, w.v_weight, w.v_bias);
    q = q.view({batch, q_len, heads, head_dim});
    k = k.view({batch, kv_len, heads, head_dim});
    v = v.view({batch, kv_len, heads, head_dim});
    if (rope) {
      rope->apply_(q, call.grid_t, call.grid_h, call.grid_w);
      rope->apply_(k, call.grid_t, call.grid_h, call.grid_w);
    }
    WanAttentionCall with_input = call;
    if (!call.is_cross) with_input.attention_input = &queries;
    attended = wan_attention(q, k, v, with_input);
  }  // q, k, v released before the output projection allocates
  return ops::linear(attended.view({batch, q_len, dim}), w.out_weight, w.out_bias);
}

}  // namespace

WanBlockWeights WanBlockWeights::load(const WeightStore& store, int64_t layer,
                                      const WanTransformerConfig& config) {
  const std::string prefix = block_prefix(layer);
  WanBlockWeights w;
  w.self_attention = load_attention(store, prefix + "attn1.");
  w.cross_attention = load_attention(store, prefix + "attn2.");
  if (config.cross_attn_norm) {
    w.norm2_weight = load_weight(store, prefix + "norm2.weight");
    w.norm2_bias = load_weight(store, prefix + "norm2.bias");
  }
  w.ffn_in_weight = load_weight(store, prefix + "ffn.net.0.proj.weight");
  w.ffn_in_bias = load_weight(store, prefix + "ffn.net.0.proj.bias");
  w.ffn_out_weight = load_weight(store, prefix + "ffn.net.2.weight");
  w.ffn_out_bias = load_weight(store, prefix + "ffn.net.2.bias");
  w.modulation = load_weight(store, prefix + "scale_shift_table");
  return w;
}

void check_block_weights(const WeightStore& store, int64_t layer,
                         const WanTransformerConfig& config) {
  const std::string prefix = block_prefix(layer);
  const int64_t dim = config.inner_dim();
  check_attention(store, prefix + "attn1.", dim);
  check_attention(store, prefix + "attn2.", dim);
  if (config.cross_attn_norm) {
    expect_weight(store, prefix + "norm2.weight", {dim});
    expect_weight(store, prefix + "norm2.bias", {dim});
  }
  expect_weight(store, prefix + "ffn.net.0.proj.weight", {config.ffn_dim, dim});
  expect_weight(store, prefix + "ffn.net.0.proj.bias", {config.ffn_dim});
  expect_weight(store, prefix + "ffn.net.2.weight", {dim, config.ffn_dim});
  expect_weight(store, prefix + "ffn.net.2.bias", {dim});
  expect_weight(store, prefix + "scale_shift_table", {1, 6, dim});
}

void run_wan_block(Tensor& x, const Tensor& text, const float* timestep_proj,
                   const WanBlockWeights& weights, const WanTransformerConfig& config,
                   const WanRope& rope, const WanAttentionCall& call) {
  const int64_t batch = x.size(0), tokens = x.size(1), dim = x.size(2);
  const int64_t rows = batch * tokens;

  // (shift, scale, gate, c_shift, c_scale, c_gate) = scale_shift_table + timestep_proj, in this
  // order; the scales are used as (1 + scale).
  std::vector<float> modulation(size_t(6 * dim));
  const float* table = weights.modulation.data<float>();
  for (int64_t i = 0; i < 6 * dim; ++i) modulation[size_t(i)] = table[i] + timestep_proj[i];
  const float* shift = modulation.data();
  const float* gate = modulation.data() + 2 * dim;
  const float* ffn_shift = modulation.data() + 3 * dim;
  const float* ffn_gate = modulation.data() + 5 * dim;
  std::vector<float> scale_plus_one(static_cast<size_t>(dim)),
      ffn_scale_plus_one(static_cast<size_t>(dim));
  for (int64_t i = 0; i < dim; ++i) {
    scale_plus_one[size_t(i)] = 1.0f + modulation[size_t(dim + i)];
    ffn_scale_plus_one[size_t(i)] = 1.0f + modulation[size_t(4 * dim + i)];
  }
  float* residual = x.data<float>();

  // 1. Self-attention, gated residual.
  {
    Tensor normed = Tensor::empty(x.shape());
    modulated_layer_norm(residual, normed.data<float>(), rows, dim, shift, scale_plus_one.data(),
                         config.eps);
    WanAttentionCall self_call = call;
    self_call.is_cross = false;
    Tensor out = attend(normed, normed, weights.self_attention, config, &rope, self_call);
    add_gated_(residual, out.data<float>(), rows, dim, gate);
  }

  // 2. Cross-attention to the text, plain residual (no gate).
  {
    Tensor normed = config.cross_attn_norm
                        ? ops::layer_norm(x, config.eps, weights.norm2_weight, weights.norm2_bias)
                        : x;
    WanAttentionCall cross_call = call;
    cross_call.is_cross = true;
    Tensor out = attend(normed, text, weights.cross_attention, config, nullptr, cross_call);
    add_gated_(residual, out.data<float>(), rows, dim, nullptr);
  }

  // 3. Feed-forward, gated residual, over chunks of rows so the hidden activation stays bounded.
  const int64_t chunk_rows = std::min(rows, kFfnChunkRows);
  Tensor normed = Tensor::empty({chunk_rows, dim});
  for (int64_t start = 0; start < rows; start += chunk_rows) {
    const int64_t count = std::min(chunk_rows, rows - start);
    float* rows_in = residual + start * dim;
    modulated_layer_norm(rows_in, normed.data<float>(), count, dim, ffn_shift,
                         ffn_scale_plus_one.data(), config.eps);
    Tensor hidden =
        ops::linear(normed.slice(0, 0, count), weights.ffn_in_weight, weights.ffn_in_bias);
    ops::gelu_tanh_(hidden);
    Tensor out = ops::linear(hidden, weights.ffn_out_weight, weights.ffn_out_bias);
    add_gated_(rows_in, out.data<float>(), count, dim, ffn_gate);
  }
}

}  // namespace mmgen::dit
