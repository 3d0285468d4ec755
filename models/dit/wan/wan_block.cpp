#include "models/dit/wan/wan_block.h"

#include <algorithm>
#include <tuple>

#include "core/error.h"
#include "core/ops.h"
#include "models/dit/wan/wan_weights.h"

namespace mmgen::dit {
namespace {

// Token rows per feed-forward chunk: bounds the [rows, ffn_dim] hidden activation (147 MB for the
// 1.3B model's 8960) while keeping the GEMMs large enough to run at full speed.
constexpr int64_t kFfnChunkRows = 4096;

std::string wan_block_prefix(int64_t layer) {
  return "blocks." + std::to_string(layer) + ".";
}

// Attention of `queries` [B, S, D] over `context` [B, L, D] (the queries themselves for
// self-attention), both in the compute dtype, through the projections, q/k RMSNorm across heads
// and, for self-attention, RoPE. Returns the output projection [B, S, D] in `compute`.
Tensor attend(const Tensor& queries, const Tensor& context, const WanAttentionWeights& w,
              const WanTransformerConfig& config, const WanRopeTables* rope, DType compute,
              const attention::Call& call) {
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
    attention::Call with_input = call;
    if (!call.is_cross) with_input.attention_input = &queries;
    attended = attention::attend(q.view({batch, q_len, heads, head_dim}),
                                 k.view({batch, kv_len, heads, head_dim}),
                                 v.view({batch, kv_len, heads, head_dim}), with_input);
  }  // q, k, v released before the output projection allocates
  return ops::linear(attended.view({batch, q_len, dim}), w.out_weight, w.out_bias, compute);
}

}  // namespace

WanBlockWeights WanBlockWeights::shaped(const WanTransformerConfig& config) {
  WanBlockWeights w;
  w.dim = w.self_attention.dim = w.cross_attention.dim = config.inner_dim();
  w.ffn_dim = config.ffn_dim;
  w.cross_attn_norm = config.cross_attn_norm;
  return w;
}

WanBlockWeights WanBlockWeights::load(const WeightStore& store, int64_t layer,
                                      const WanTransformerConfig& config) {
  return models::loaded(shaped(config), store, wan_block_prefix(layer));
}

void check_block_weights(const WeightStore& store, int64_t layer,
                         const WanTransformerConfig& config) {
  models::expect_checkpoint(WanBlockWeights::shaped(config), store, wan_block_prefix(layer),
                            kWanCheckpoint);
}

void WanAttentionWeights::parameters(const models::ParameterVisitor& visit) {
  using models::Role;
  // A product's bias in the compute dtype: every product writes it, the branches' outputs too
  // (they join the float32 residual stream in the op after them).
  for (auto [name, weight, bias] : {std::tuple{"to_q.", &q_weight, &q_bias},
                                    {"to_k.", &k_weight, &k_bias},
                                    {"to_v.", &v_weight, &v_bias},
                                    {"to_out.0.", &out_weight, &out_bias}}) {
    visit({std::string(name) + "weight", *weight, Role::Product, {dim, dim}});
    visit({std::string(name) + "bias", *bias, Role::Compute, {dim}});
  }
  visit({"norm_q.weight", norm_q, Role::Float32, {dim}});
  visit({"norm_k.weight", norm_k, Role::Float32, {dim}});
}

void WanBlockWeights::parameters(const models::ParameterVisitor& visit) {
  using models::Role;
  self_attention.parameters(models::nested(visit, "attn1."));
  cross_attention.parameters(models::nested(visit, "attn2."));
  if (cross_attn_norm) {
    visit({"norm2.weight", norm2_weight, Role::Float32, {dim}});
    visit({"norm2.bias", norm2_bias, Role::Float32, {dim}});
  }
  visit({"ffn.net.0.proj.weight", ffn_in_weight, Role::Product, {ffn_dim, dim}});
  visit({"ffn.net.0.proj.bias", ffn_in_bias, Role::Compute, {ffn_dim}});
  visit({"ffn.net.2.weight", ffn_out_weight, Role::Product, {dim, ffn_dim}});
  visit({"ffn.net.2.bias", ffn_out_bias, Role::Compute, {dim}});
  visit({"scale_shift_table", modulation, Role::Host, {1, 6, dim}});  // read on the host
}

WanBlockWeights WanBlockWeights::placed(const models::PlacementRule& rule) const {
  WanBlockWeights p = models::placed(*this, rule);
  p.inputs = rule.fp8_products ? DType::F8E4M3Rows : rule.compute;
  return p;
}

std::vector<Tensor*> WanBlockWeights::device_tensors() {
  std::vector<Tensor*> tensors;
  parameters([&](const models::Parameter& p) {
    if (p.role != models::Role::Host) tensors.push_back(&p.tensor);
  });
  return tensors;
}

std::vector<uint64_t> WanBlockWeights::gpu_tensor_bytes(const WanTransformerConfig& config,
                                                        bool fp8_products, const WeightStore* store,
                                                        int64_t layer) {
  // As placed() makes them: the products' weights in bf16, as e4m3 rows with their scales, or as
  // the GGUF blocks they are stored as; the biases in bf16, the norms in float32.
  const uint64_t d = uint64_t(config.inner_dim()), f = uint64_t(config.ffn_dim);
  const uint64_t kF32 = 4, kBf16 = 2;
  const std::string prefix = wan_block_prefix(layer);
  const auto weight = [&](const std::string& name, uint64_t rows, uint64_t cols) -> uint64_t {
    if (fp8_products) return row_scales_offset(int64_t(rows * cols)) + rows * kF32;
    const DType stored = store ? store->product_dtype(prefix + name) : DType::BF16;
    if (dtype_is_blocks(stored))
      return rows * cols / uint64_t(dtype_block_values(stored)) * dtype_size(stored);
    return rows * cols * kBf16;
  };
  std::vector<uint64_t> bytes;
  for (const char* attention : {"attn1.", "attn2."}) {
    for (const char* projection : {"to_q", "to_k", "to_v", "to_out.0"}) {
      bytes.push_back(weight(std::string(attention) + projection + ".weight", d, d));
      bytes.push_back(d * kBf16);
    }
    bytes.push_back(d * kF32);  // norm_q
    bytes.push_back(d * kF32);  // norm_k
  }
  if (config.cross_attn_norm) {
    bytes.push_back(d * kF32);
    bytes.push_back(d * kF32);
  }
  bytes.push_back(weight("ffn.net.0.proj.weight", f, d));
  bytes.push_back(f * kBf16);
  bytes.push_back(weight("ffn.net.2.weight", d, f));
  bytes.push_back(d * kBf16);
  return bytes;
}

Tensor run_wan_block(Tensor& x, const Tensor& normed, const Tensor& text, const WanModulation& m,
                     const WanNextNorm& next, const WanBlockWeights& weights,
                     const WanTransformerConfig& config, const WanRopeTables& rope, DType compute,
                     const attention::Call& call) {
  const int64_t batch = x.size(0), tokens = x.size(1), dim = x.size(2);
  const int64_t rows = batch * tokens;
  // The branches' outputs come in `compute` (bf16 on the GPU, as diffusers' bf16 modules give
  // them) and join the float32 residual stream in the op that also normalises it for the next
  // branch.

  // 1. Self-attention, gated residual, then the cross-attention's pre-norm.
  Tensor cross_normed;
  {
    attention::Call self_call = call;
    self_call.stack = kWanSelfStack;
    self_call.is_cross = false;
    self_call.text_length = 0;  // the video tokens alone
    const Tensor out =
        attend(normed, normed, weights.self_attention, config, &rope, compute, self_call);
    if (config.cross_attn_norm) {
      cross_normed = ops::add_gated_layer_norm_(x, out, m.gate, config.eps, weights.norm2_weight,
                                                weights.norm2_bias, weights.inputs);
    } else {
      ops::add_gated_(x, out.to(DType::F32), m.gate);
      cross_normed = x.to(compute).to(weights.inputs);
    }
  }

  // 2. Cross-attention to the text, plain residual (no gate), then the feed-forward's pre-norm.
  Tensor ffn_normed;
  {
    attention::Call cross_call = call;
    cross_call.stack = kWanCrossStack;
    cross_call.is_cross = true;
    const Tensor out =
        attend(cross_normed, text, weights.cross_attention, config, nullptr, compute, cross_call);
    cross_normed = Tensor();
    ffn_normed = ops::add_gated_layer_norm_(x, out, Tensor(), config.eps, m.ffn_scale_plus_one,
                                            m.ffn_shift, weights.inputs);
  }

  // 3. Feed-forward (GELU, tanh form), gated residual, then the next pre-norm. On the CPU over
  // chunks of rows, so the hidden activation stays bounded; the GPU takes all rows at once.
  const int64_t chunk_rows = x.is_cpu() ? std::min(rows, kFfnChunkRows) : rows;
  Tensor flat = x.view({rows, dim});
  const Tensor flat_normed = ffn_normed.view({rows, dim});
  const auto feed_forward = [&](int64_t start, int64_t end) {
    const Tensor hidden = ops::linear(flat_normed.slice(0, start, end), weights.ffn_in_weight,
                                      weights.ffn_in_bias, compute, Activation::GeluTanh);
    return ops::linear(hidden, weights.ffn_out_weight, weights.ffn_out_bias, compute);
  };
  if (chunk_rows == rows)
    return ops::add_gated_layer_norm_(flat, feed_forward(0, rows), m.ffn_gate, config.eps,
                                      next.scale, next.shift, next.dtype)
        .view(x.shape());
  for (int64_t start = 0; start < rows; start += chunk_rows) {
    const int64_t end = std::min(rows, start + chunk_rows);
    Tensor rows_in = flat.slice(0, start, end);
    ops::add_gated_(rows_in, feed_forward(start, end), m.ffn_gate);
  }
  ffn_normed = Tensor();
  return ops::modulated_layer_norm(x, next.shift, next.scale, config.eps, next.dtype);
}

}  // namespace mmgen::dit
