#include "models/text_encoders/qwen3_model.h"

#include <cmath>
#include <cstring>
#include <string>
#include <tuple>
#include <utility>

#include "core/error.h"
#include "core/ops.h"
#include "models/text_encoders/qwen3_paged.h"

namespace mmgen::text_encoders {
namespace {

constexpr int64_t kQwen3ParallelMin = int64_t(1) << 16;

// Qwen3ForCausalLM keeps the decoder under `model.`; a bare Qwen3Model has no prefix.
// Qwen2_5_VLForConditionalGeneration's language model is `model.language_model.` in transformers
// 5's module tree, but save_pretrained writes the v4 names back (`model.`, beside `visual.` and
// `lm_head.`), as the Hub's checkpoints have them: both are read.
std::string decoder_prefix(const WeightStore& weights) {
  for (const char* prefix : {"model.language_model.", "model."})
    if (weights.has(std::string(prefix) + "embed_tokens.weight")) return prefix;
  check(weights.has("embed_tokens.weight"),
        "text encoder weights in {} have none of \"model.embed_tokens.weight\", "
        "\"model.language_model.embed_tokens.weight\" or \"embed_tokens.weight\"; is this a "
        "Qwen3 or Qwen2.5-VL checkpoint?",
        weights.origin().string());
  return "";
}

constexpr models::CheckpointKind kQwen3Checkpoint{"text encoder", "Qwen3 or Qwen2.5-VL"};

}  // namespace

Qwen3TextModel::Qwen3TextModel(Qwen3Config config, WeightStore weights)
    : config_(std::move(config)),
      weights_(std::move(weights)),
      rope_(config_.head_dim, config_.rope_theta, config_.rope_factor) {
  state_ = host_state();
}

Qwen3TextModel::Placed Qwen3TextModel::shaped_state() const {
  Placed shaped;
  shaped.prefix = decoder_prefix(weights_);
  shaped.vocab_size = config_.vocab_size;
  shaped.hidden_size = config_.hidden_size;
  shaped.lm_head_stored = weights_.has("lm_head.weight");
  shaped.tied_lm_head = !shaped.lm_head_stored && config_.tie_word_embeddings;
  Layer layer;
  layer.hidden_size = config_.hidden_size;
  layer.intermediate_size = config_.intermediate_size;
  layer.q_width = config_.q_width();
  layer.kv_width = config_.kv_width();
  layer.head_dim = config_.head_dim;
  layer.has_qkv_bias = config_.attention_bias || config_.qkv_bias;
  layer.has_o_bias = config_.attention_bias;
  layer.has_qk_norm = config_.qk_norm;
  shaped.layers.assign(size_t(config_.num_hidden_layers), layer);
  return shaped;
}

Qwen3TextModel::Placed Qwen3TextModel::host_state() const {
  const Placed shaped = shaped_state();
  models::expect_checkpoint(shaped, weights_, "", kQwen3Checkpoint);
  Placed host = models::loaded(shaped, weights_, "", models::Values::AsStored);
  if (host.tied_lm_head) host.lm_head = host.embedding;
  return host;
}

void Qwen3TextModel::Layer::parameters(const models::ParameterVisitor& visit) {
  using models::Role;
  const std::string attention = "self_attn.";
  const int64_t d = hidden_size, ff = intermediate_size;
  visit({"input_layernorm.weight", input_norm, Role::Float32, {d}});
  for (auto [name, weight, bias, rows] : {std::tuple{"q_proj.", &q, &q_bias, q_width},
                                          {"k_proj.", &k, &k_bias, kv_width},
                                          {"v_proj.", &v, &v_bias, kv_width}}) {
    visit({attention + name + "weight", *weight, Role::Product, {rows, d}});
    if (has_qkv_bias) visit({attention + name + "bias", *bias, Role::Float32, {rows}});
  }
  visit({attention + "o_proj.weight", o, Role::Product, {d, q_width}});
  if (has_o_bias) visit({attention + "o_proj.bias", o_bias, Role::Float32, {d}});
  if (has_qk_norm) {
    visit({attention + "q_norm.weight", q_norm, Role::Float32, {head_dim}});
    visit({attention + "k_norm.weight", k_norm, Role::Float32, {head_dim}});
  }
  visit({"post_attention_layernorm.weight", post_attention_norm, Role::Float32, {d}});
  visit({"mlp.gate_proj.weight", gate, Role::Product, {ff, d}});
  visit({"mlp.up_proj.weight", up, Role::Product, {ff, d}});
  visit({"mlp.down_proj.weight", down, Role::Product, {d, ff}});
}

void Qwen3TextModel::Placed::parameters(const models::ParameterVisitor& visit) {
  using models::Role;
  const int64_t d = hidden_size;
  // Rows gathered on the host, as stored.
  visit({prefix + "embed_tokens.weight", embedding, Role::Host, {vocab_size, d}});
  for (size_t i = 0; i < layers.size(); ++i)
    layers[i].parameters(models::nested(visit, prefix + "layers." + std::to_string(i) + "."));
  visit({prefix + "norm.weight", norm, Role::Float32, {d}});
  // Logits on the host.
  if (lm_head_stored) visit({"lm_head.weight", lm_head, Role::Host, {vocab_size, d}});
}

void Qwen3TextModel::list_parameters(const models::ParameterVisitor& visit) const {
  Placed held = state_;
  held.parameters(visit);
}

void Qwen3TextModel::set_device(Device device, DType compute) {
  if (device == Device::CPU) compute = DType::F32;
  check(device == Device::CPU || compute == DType::BF16,
        "GPU text encoder (Qwen3): products, the KV pool and the decode path are bf16 on the GPU, "
        "not {}",
        dtype_name(compute));
  check(device == Device::CPU ||
            (config_.hidden_size % 8 == 0 && config_.intermediate_size % 8 == 0 &&
             config_.q_width() % 8 == 0 && config_.kv_width() % 8 == 0),
        "GPU text encoder (Qwen3): hidden {}, intermediate {}, q width {} and kv width {} must be "
        "multiples of 8; use --device cpu",
        config_.hidden_size, config_.intermediate_size, config_.q_width(), config_.kv_width());
  // Every move starts from the mapped weights: the CPU computes on them as stored (the same
  // numbers as a model that never moved), the GPU converts each once (products to the compute
  // dtype, norms and biases float32).
  models::move_model(
      state_, device, [&](Placed&&) { return host_state(); },
      [&](const Placed& host) {
        return models::placed_state(host, {device, compute});
      });
}

Qwen3TextModel Qwen3TextModel::from_folder(const fs::path& folder) {
  check(fs::is_directory(folder), "text encoder folder {} does not exist", folder.string());
  return Qwen3TextModel(Qwen3Config::from_file(folder / "config.json"),
                        WeightStore::open_folder(folder));
}

std::unique_ptr<DenseCausalAttention> Qwen3TextModel::dense_attention(bool keep_kv) const {
  check(state_.device == Device::CPU,
        "text encoder: the dense causal attention runs on the CPU; on the GPU the model attends "
        "through a paged runner (Qwen3PagedEncoder / Qwen3PagedDecoder)");
  check(!config_.dual_chunk.enabled(),
        "text encoder {}: its config has dual chunk attention, which runs on the paged backend "
        "dual_chunk_flash_attn (Qwen3PagedEncoder / Qwen3PagedDecoder), not the dense one",
        weights_.origin().string());
  return std::make_unique<DenseCausalAttention>(
      config_.num_hidden_layers, config_.num_key_value_heads, config_.head_dim, keep_kv);
}

Tensor Qwen3TextModel::embed(const std::vector<int64_t>& ids) const {
  const int64_t count = int64_t(ids.size()), d = config_.hidden_size;
  for (int64_t id : ids)
    check(id >= 0 && id < config_.vocab_size,
          "text encoder: token id {} is outside the vocabulary [0, {}); the tokenizer does not "
          "match the text encoder",
          id, config_.vocab_size);
  Tensor x = Tensor::empty({count, d});
  float* out = x.data<float>();
  // Only the rows used are converted: the table stays mapped as stored.
#pragma omp parallel for schedule(static) if (count * d >= kQwen3ParallelMin)
  for (int64_t t = 0; t < count; ++t) {
    const Tensor row = state_.embedding.select(0, ids[size_t(t)]).to(DType::F32);
    std::memcpy(out + t * d, row.raw(), size_t(d) * sizeof(float));
  }
  return x;
}

// Projections, per-head q/k RMSNorm (before RoPE, as transformers' Qwen3Attention; Qwen2.5-VL has
// none), RoPE, the
// attention call, and the output projection. Products read the compute dtype (the CPU: float32,
// so every .to(state_.compute) below is a no-op there); q and k are normalised and rotated in
// float32 and rounded once for attention, v comes out of its product in the compute dtype.
Qwen3TextModel::ForwardRope Qwen3TextModel::forward_rope(
    const std::vector<int64_t>& positions) const {
  const attention::paged::DualChunk& dca = config_.dual_chunk;
  if (!dca.enabled()) return {rope_.tables(positions, state_.device), {}};
  std::vector<int64_t> keys, queries;
  for (int64_t position : positions) {
    keys.push_back(dca.key_position(position));
    const auto rotations = dca.query_positions(position);
    queries.insert(queries.end(), {rotations.intra, rotations.succ, rotations.inter});
  }
  return {rope_.tables(keys, state_.device), rope_.tables(queries, state_.device)};
}

Tensor Qwen3TextModel::self_attention(int64_t index, const Tensor& x, const ForwardRope& rope,
                                      CausalAttention& attention) const {
  const Layer& layer = state_.layers[size_t(index)];
  const int64_t tokens = x.size(0), head_dim = config_.head_dim;
  const Tensor normed = ops::rms_norm(x, layer.input_norm, config_.rms_norm_eps, state_.compute);
  Tensor q = ops::linear(normed, layer.q, layer.q_bias, DType::F32)
                 .view({tokens, config_.num_attention_heads, head_dim});
  Tensor k = ops::linear(normed, layer.k, layer.k_bias, DType::F32)
                 .view({tokens, config_.num_key_value_heads, head_dim});
  if (config_.qk_norm) {  // Qwen3; the Qwen2 family rotates the projections as they are
    q = ops::rms_norm(q, layer.q_norm, config_.rms_norm_eps);
    k = ops::rms_norm(k, layer.k_norm, config_.rms_norm_eps);
  }
  const Tensor v = ops::linear(normed, layer.v, layer.v_bias, state_.compute)
                       .view({tokens, config_.num_key_value_heads, head_dim});
  ops::rope_half_(k, rope.keys.cos, rope.keys.sin);
  if (config_.dual_chunk.enabled()) {
    // Three copies of each token's query, rotated at its intra, succ and inter positions: the
    // [T, 3·Hq, D] q of a dual chunk layer.
    q = ops::repeat_rows(q, 3).view({3 * tokens, config_.num_attention_heads, head_dim});
    ops::rope_half_(q, rope.queries.cos, rope.queries.sin);
    q = q.view({tokens, 3 * config_.num_attention_heads, head_dim});
  } else {
    ops::rope_half_(q, rope.keys.cos, rope.keys.sin);
  }
  const float scale = float(1.0 / std::sqrt(double(head_dim)));
  const Tensor context = attention.attend(index, q.to(state_.compute), k.to(state_.compute), v,
                                          scale, config_.layer_windows[size_t(index)]);
  return ops::linear(context.view({tokens, config_.q_width()}), layer.o, layer.o_bias, DType::F32);
}

// SwiGLU: down(silu(gate(x)) · up(x)); the activation and the gate in float32, one rounding to
// the compute dtype before down (silu_mul's one pass gives the values silu_, mul_ and the
// conversion gave on either device).
Tensor Qwen3TextModel::mlp(const Layer& layer, const Tensor& x) const {
  const Tensor normed =
      ops::rms_norm(x, layer.post_attention_norm, config_.rms_norm_eps, state_.compute);
  const Tensor hidden =
      ops::silu_mul(ops::linear(normed, layer.gate, Tensor(), DType::F32),
                    ops::linear(normed, layer.up, Tensor(), DType::F32), state_.compute);
  return ops::linear(hidden, layer.down, Tensor(), DType::F32);
}

Tensor Qwen3TextModel::forward_layers(const std::vector<int64_t>& ids, const CausalBatch& batch,
                                      CausalAttention& attention, int64_t layers) const {
  check(layers >= 0 && layers <= config_.num_hidden_layers,
        "text encoder: asked for {} layers of {}", layers, config_.num_hidden_layers);
  check(int64_t(ids.size()) == batch.new_tokens(),
        "text encoder: {} ids for a batch of {} new tokens", ids.size(), batch.new_tokens());
  attention.begin_forward(batch);
  return apply_layers(embed(ids).to(state_.device), batch.positions(), attention, 0, layers);
}

Tensor Qwen3TextModel::apply_layers(Tensor x, const std::vector<int64_t>& positions,
                                    CausalAttention& attention, int64_t begin, int64_t end) const {
  check(0 <= begin && begin <= end && end <= config_.num_hidden_layers,
        "text encoder: layers [{}, {}) of {}", begin, end, config_.num_hidden_layers);
  check(x.dim() == 2 && x.size(0) == int64_t(positions.size()) && x.size(1) == config_.hidden_size,
        "text encoder: hidden rows {} for {} positions", shape_string(x.shape()), positions.size());
  x = x.to(state_.device);
  if (begin == end) return x;
  const ForwardRope rope = forward_rope(positions);  // once for every layer
  for (int64_t i = begin; i < end; ++i) {
    ops::add_(x, self_attention(i, x, rope, attention));
    ops::add_(x, mlp(state_.layers[size_t(i)], x));
  }
  return x;
}

Tensor Qwen3TextModel::final_norm(const Tensor& hidden) const {
  return ops::rms_norm(hidden, state_.norm, config_.rms_norm_eps);
}

Tensor Qwen3TextModel::logits(const Tensor& normed_hidden) const {
  check(has_lm_head(),
        "text encoder {} has no lm_head.weight and does not tie its embeddings; decoding needs a "
        "Qwen3ForCausalLM checkpoint",
        weights_.origin().string());
  return ops::linear(normed_hidden.to(Device::CPU), state_.lm_head);
}

Tensor Qwen3TextModel::hidden_state(const std::vector<int64_t>& ids, int64_t index) const {
  const int64_t count = config_.num_hidden_layers + 1;
  const int64_t resolved = index < 0 ? count + index : index;
  check(resolved >= 0 && resolved < count, "text encoder: hidden_states[{}] of {} does not exist",
        index, count);
  if (resolved == 0) return embed(ids);  // no layer runs
  const int64_t layers = std::min(resolved, count - 1);
  Tensor hidden;
  if (state_.device == Device::CPU && !config_.dual_chunk.enabled()) {
    const auto attention = dense_attention(/*keep_kv=*/false);
    hidden = forward_layers(ids, CausalBatch::fresh({int64_t(ids.size())}), *attention, layers);
  } else {
    // The GPU (and dual chunk attention) attends through a paged runner: a pool of this
    // prompt's size, no cache.
    attention::paged::PagedRunnerOptions options;
    options.device = state_.device;
    options.prefix_cache = false;
    options.max_requests = 1;
    options.max_context_len = std::max<int64_t>(1, int64_t(ids.size()));
    options.pool_tokens = options.max_context_len;
    attention::paged::PagedRunner runner(qwen3_paged_spec(config_, layers, 0), options);
    const attention::paged::ForwardBatch& batch = runner.begin_extend({ids});
    PagedCausalAttention attention(runner);
    hidden = forward_layers(batch.input_ids, causal_batch_of(batch), attention, layers);
    runner.finish();
  }
  return (resolved == count - 1 ? final_norm(hidden) : hidden).to(Device::CPU);
}

}  // namespace mmgen::text_encoders
