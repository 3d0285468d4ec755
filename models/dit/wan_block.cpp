#include "models/dit/wan_block.h"

#include <algorithm>

#include "core/error.h"
#include "core/ops.h"
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
  w.q_weight = load_linear_weight(store, prefix + "to_q.weight");
  w.q_bias = load_weight(store, prefix + "to_q.bias");
  w.k_weight = load_linear_weight(store, prefix + "to_k.weight");
  w.k_bias = load_weight(store, prefix + "to_k.bias");
  w.v_weight = load_linear_weight(store, prefix + "to_v.weight");
  w.v_bias = load_weight(store, prefix + "to_v.bias");
  w.out_weight = load_linear_weight(store, prefix + "to_out.0.weight");
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
// self-attention), both in the compute dtype, through the projections, q/k RMSNorm across heads
// and, for self-attention, RoPE. Returns the output projection [B, S, D] float32.
Tensor attend(const Tensor& queries, const Tensor& context, const WanAttentionWeights& w,
              const WanTransformerConfig& config, const WanRopeTables* rope, DType compute,
              const WanAttentionCall& call) {
  const int64_t batch = queries.size(0), q_len = queries.size(1), kv_len = context.size(1);
  const int64_t dim = config.inner_dim(), heads = config.num_attention_heads,
                head_dim = config.attention_head_dim;
  const Tensor cos = rope ? rope->cos : Tensor(), sin = rope ? rope->sin : Tensor();
  Tensor attended;
  {
    Tensor q = ops::linear(queries, w.q_weight, w.q_bias, compute);
    ops::rms_norm_rope_(q, w.norm_q, config.eps, cos, sin, head_dim);
    Tensor k = ops::linear(context, w.k_weight, w.k_bias, compute);
    ops::rms_norm_rope_(k, w.norm_k, config.eps, cos, sin, head_dim);
    Tensor v = ops::linear(context, w.v_weight, w.v_bias, compute);
    WanAttentionCall with_input = call;
    if (!call.is_cross) with_input.attention_input = &queries;
    attended = wan_attention(q.view({batch, q_len, heads, head_dim}),
                             k.view({batch, kv_len, heads, head_dim}),
                             v.view({batch, kv_len, heads, head_dim}), with_input);
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
  w.ffn_in_weight = load_linear_weight(store, prefix + "ffn.net.0.proj.weight");
  w.ffn_in_bias = load_weight(store, prefix + "ffn.net.0.proj.bias");
  w.ffn_out_weight = load_linear_weight(store, prefix + "ffn.net.2.weight");
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

WanBlockWeights WanBlockWeights::placed(Device device, DType compute) const {
  // A product's weight in the compute dtype; its bias in the product's output dtype (compute
  // where the next op reads it, float32 where it joins the residual stream).
  const auto product = [&](const Tensor& t) { return t.to(compute).to(device); };
  const auto f32 = [&](const Tensor& t) { return t.defined() ? t.to(device) : t; };
  const auto attention = [&](const WanAttentionWeights& a) {
    WanAttentionWeights p;
    p.q_weight = product(a.q_weight), p.q_bias = product(a.q_bias);
    p.k_weight = product(a.k_weight), p.k_bias = product(a.k_bias);
    p.v_weight = product(a.v_weight), p.v_bias = product(a.v_bias);
    p.out_weight = product(a.out_weight), p.out_bias = f32(a.out_bias);
    p.norm_q = f32(a.norm_q), p.norm_k = f32(a.norm_k);
    return p;
  };
  WanBlockWeights p;
  p.self_attention = attention(self_attention);
  p.cross_attention = attention(cross_attention);
  p.norm2_weight = f32(norm2_weight), p.norm2_bias = f32(norm2_bias);
  p.ffn_in_weight = product(ffn_in_weight), p.ffn_in_bias = product(ffn_in_bias);
  p.ffn_out_weight = product(ffn_out_weight), p.ffn_out_bias = f32(ffn_out_bias);
  p.modulation = modulation;  // read on the host
  return p;
}

void run_wan_block(Tensor& x, const Tensor& text, const WanModulation& m,
                   const WanBlockWeights& weights, const WanTransformerConfig& config,
                   const WanRopeTables& rope, DType compute, const WanAttentionCall& call) {
  const int64_t batch = x.size(0), tokens = x.size(1), dim = x.size(2);
  const int64_t rows = batch * tokens;

  // 1. Self-attention, gated residual.
  {
    const Tensor normed =
        ops::modulated_layer_norm(x, m.shift, m.scale_plus_one, config.eps, compute);
    WanAttentionCall self_call = call;
    self_call.is_cross = false;
    const Tensor out =
        attend(normed, normed, weights.self_attention, config, &rope, compute, self_call);
    ops::add_gated_(x, out, m.gate);
  }

  // 2. Cross-attention to the text, plain residual (no gate).
  {
    const Tensor normed =
        config.cross_attn_norm
            ? ops::layer_norm(x, config.eps, weights.norm2_weight, weights.norm2_bias, compute)
            : x.to(compute);
    WanAttentionCall cross_call = call;
    cross_call.is_cross = true;
    const Tensor out =
        attend(normed, text, weights.cross_attention, config, nullptr, compute, cross_call);
    ops::add_gated_(x, out);
  }

  // 3. Feed-forward (GELU, tanh form), gated residual. On the CPU over chunks of rows, so the
  // hidden activation stays bounded; the GPU takes all rows at once.
  const int64_t chunk_rows = x.is_cpu() ? std::min(rows, kFfnChunkRows) : rows;
  const Tensor flat = x.view({rows, dim});
  for (int64_t start = 0; start < rows; start += chunk_rows) {
    Tensor rows_in = flat.slice(0, start, std::min(rows, start + chunk_rows));
    const Tensor normed =
        ops::modulated_layer_norm(rows_in, m.ffn_shift, m.ffn_scale_plus_one, config.eps, compute);
    const Tensor hidden = ops::linear(normed, weights.ffn_in_weight, weights.ffn_in_bias, compute,
                                      Activation::GeluTanh);
    ops::add_gated_(rows_in, ops::linear(hidden, weights.ffn_out_weight, weights.ffn_out_bias),
                    m.ffn_gate);
  }
}

}  // namespace mmgen::dit
