#include "models/text_encoders/clip_text_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <tuple>
#include <utility>

#include "attention/catalogue.h"
#include "core/error.h"
#include "core/ops.h"

namespace mmgen::text_encoders {
namespace {

namespace paged = attention::paged;

// OpenAI's quick GELU, x·sigmoid(1.702·x), is silu(1.702·x) / 1.702: built from the ops every
// device has.
constexpr float kQuickGelu = 1.702f;

constexpr models::CheckpointKind kClipCheckpoint{"text encoder", "CLIP"};

Tensor as_int64(const Tensor& ids) {
  check(ids.dtype() == DType::I64 || ids.dtype() == DType::I32,
        "CLIP text encoder: input_ids must be int64 or int32, got {}", dtype_name(ids.dtype()));
  return ids.to(DType::I64).contiguous();
}

}  // namespace

ClipTextModel::ClipTextModel(ClipTextConfig config, WeightStore weights)
    : config_(std::move(config)), weights_(std::move(weights)) {
  prefix_ = weights_.has("text_model.embeddings.token_embedding.weight") ? "text_model." : "";
  state_ = host_state();
  attention_backend_ = attention::auto_backend(attention::this_machine(), attention::Family::Paged,
                                               "fp32", config_.head_dim());
}

ClipTextModel ClipTextModel::from_folder(const fs::path& folder) {
  const fs::path config_path = folder / "config.json";
  check(fs::exists(config_path), "text encoder folder {} has no config.json", folder.string());
  return ClipTextModel(ClipTextConfig::from_file(config_path), WeightStore::open_folder(folder));
}

ClipTextModel::Placed ClipTextModel::shaped_state(const ClipTextConfig& config) {
  Placed shaped;
  shaped.vocab_size = config.vocab_size;
  shaped.positions = config.max_position_embeddings;
  shaped.hidden_size = config.hidden_size;
  shaped.layers.assign(size_t(config.num_hidden_layers),
                       Layer{config.hidden_size, config.intermediate_size});
  return shaped;
}

ClipTextModel::Placed ClipTextModel::host_state() const {
  const Placed shaped = shaped_state(config_);
  models::expect_checkpoint(shaped, weights_, prefix_, kClipCheckpoint);
  return models::loaded(shaped, weights_, prefix_);  // norms, biases, positions: float32
}

void ClipTextModel::Layer::parameters(const models::ParameterVisitor& visit) {
  using models::Role;
  const int64_t d = hidden_size, ff = intermediate_size;
  for (auto [name, norm] : {std::pair{"layer_norm1.weight", &norm1_weight},
                            {"layer_norm1.bias", &norm1_bias},
                            {"layer_norm2.weight", &norm2_weight},
                            {"layer_norm2.bias", &norm2_bias}})
    visit({name, *norm, Role::Float32, {d}});
  for (auto [name, weight, bias, rows, columns] :
       {std::tuple{"self_attn.q_proj.", &q, &q_bias, d, d},
        {"self_attn.k_proj.", &k, &k_bias, d, d},
        {"self_attn.v_proj.", &v, &v_bias, d, d},
        {"self_attn.out_proj.", &out, &out_bias, d, d},
        {"mlp.fc1.", &fc1, &fc1_bias, ff, d},
        {"mlp.fc2.", &fc2, &fc2_bias, d, ff}}) {
    visit({std::string(name) + "weight", *weight, Role::Product, {rows, columns}});
    visit({std::string(name) + "bias", *bias, Role::Float32, {rows}});
  }
}

void ClipTextModel::Placed::parameters(const models::ParameterVisitor& visit) {
  using models::Role;
  const int64_t d = hidden_size;
  // The embeddings are gathered on the host: the token table's rows as stored, one at a time.
  visit({"embeddings.token_embedding.weight", token_embedding, Role::Table, {vocab_size, d}});
  visit({"embeddings.position_embedding.weight", position_embedding, Role::Host, {positions, d}});
  for (size_t i = 0; i < layers.size(); ++i)
    layers[i].parameters(models::nested(visit, "encoder.layers." + std::to_string(i) + "."));
  visit({"final_layer_norm.weight", final_norm_weight, Role::Float32, {d}});
  visit({"final_layer_norm.bias", final_norm_bias, Role::Float32, {d}});
}

uint64_t ClipTextModel::gpu_weight_bytes(const ClipTextConfig& config, DType compute) {
  return models::shaped_resident_bytes(shaped_state(config), {Device::CUDA, compute});
}

void ClipTextModel::set_attention_backend(const std::string& name, int64_t page_size) {
  check(page_size >= 1, "--page-size must be at least 1, got {}", page_size);
  paged::make_paged_backend(name, state_.device);  // throws where this build cannot run it
  attention_backend_ = name;
  page_size_ = page_size;
  runner_.reset();
}

void ClipTextModel::list_parameters(const models::ParameterVisitor& visit) const {
  Placed held = state_;
  held.parameters(models::nested(visit, prefix_));
}

void ClipTextModel::set_device(Device device, DType compute, const std::string& attention_backend) {
  if (device == Device::CPU) compute = DType::F32;
  check(device == Device::CPU || compute == DType::BF16 || compute == DType::F32,
        "GPU text encoder: products read bf16 or float32, not {}", dtype_name(compute));
  const std::string backend = attention_backend.empty() ? attention_backend_ : attention_backend;
  paged::make_paged_backend(backend, device);
  attention_backend_ = backend;
  runner_.reset();
  // Back on the host starts again from the weights as stored; the GPU keeps products in the
  // compute dtype and the rest float32, uploaded once.
  models::move_model(
      state_, device, [&](Placed&&) { return host_state(); },
      [&](const Placed& host) {
        return models::placed_state(host, {device, compute});
      });
}

Tensor ClipTextModel::embed(const Tensor& ids) const {
  const int64_t batch = ids.size(0), length = ids.size(1), d = config_.hidden_size;
  const int64_t vocab = config_.vocab_size;
  const int64_t* id = ids.data<int64_t>();
  Tensor x = Tensor::empty({batch * length, d});
  float* out = x.data<float>();
  const float* positions = state_.position_embedding.data<float>();
  for (int64_t t = 0; t < batch * length; ++t) {
    check(id[t] >= 0 && id[t] < vocab,
          "CLIP text encoder: token id {} is outside the vocabulary [0, {}); the tokenizer does "
          "not match the text encoder",
          id[t], vocab);
    // Only the rows used are converted: the table stays mapped as stored.
    const Tensor row = state_.token_embedding.select(0, id[t]).to(DType::F32);
    const float* token = row.data<float>();
    const float* position = positions + (t % length) * d;
    for (int64_t i = 0; i < d; ++i) out[t * d + i] = token[i] + position[i];
  }
  return x;
}

paged::PagedRunner& ClipTextModel::runner_for(int64_t requests, int64_t length) const {
  if (!runner_ || requests > runner_requests_ || length > runner_length_) {
    paged::PagedModelSpec spec;
    spec.num_layers = config_.num_hidden_layers;
    spec.num_q_heads = config_.num_attention_heads;
    spec.num_kv_heads = config_.num_attention_heads;
    spec.head_dim = config_.head_dim();
    spec.scaling = float(1.0 / std::sqrt(double(config_.head_dim())));
    spec.type = paged::AttentionType::Decoder;  // causal
    paged::PagedRunnerOptions options;
    options.backend = attention_backend_;
    options.device = state_.device;
    options.page_size = page_size_;
    options.prefix_cache = false;  // every forward is a fresh prefill: nothing is kept
    options.max_requests = requests;
    options.max_context_len = length;
    options.pool_tokens = requests * (length + page_size_);
    runner_ = std::make_unique<paged::PagedRunner>(std::move(spec), std::move(options));
    runner_requests_ = requests;
    runner_length_ = length;
  }
  return *runner_;
}

// The one place the model calls attention: a causal layer of the runner's current prefill.
Tensor ClipTextModel::self_attention(int64_t index, const Layer& layer, const Tensor& x,
                                     paged::PagedRunner& runner) const {
  const int64_t tokens = x.size(0), d = config_.hidden_size;
  const Tensor normed = ops::layer_norm(x, config_.layer_norm_eps, layer.norm1_weight,
                                        layer.norm1_bias, state_.compute);
  const Tensor context =
      runner.attention(index, ops::linear(normed, layer.q, layer.q_bias, state_.compute),
                       ops::linear(normed, layer.k, layer.k_bias, state_.compute),
                       ops::linear(normed, layer.v, layer.v_bias, state_.compute));
  return ops::linear(context.reshape({tokens, d}), layer.out, layer.out_bias);
}

Tensor ClipTextModel::mlp(const Layer& layer, const Tensor& x) const {
  const Tensor normed = ops::layer_norm(x, config_.layer_norm_eps, layer.norm2_weight,
                                        layer.norm2_bias, state_.compute);
  Tensor hidden = ops::linear(normed, layer.fc1, layer.fc1_bias);  // float32
  switch (config_.activation) {
    case ClipActivation::QuickGelu:
      ops::scale_(hidden, kQuickGelu);
      ops::silu_(hidden);
      ops::scale_(hidden, 1.0f / kQuickGelu);
      break;
    case ClipActivation::Gelu:
      ops::activate_(hidden, Activation::Gelu);
      break;
    case ClipActivation::GeluTanh:
      ops::activate_(hidden, Activation::GeluTanh);
      break;
  }
  return ops::linear(hidden.to(state_.compute), layer.fc2, layer.fc2_bias);
}

std::vector<int64_t> ClipTextModel::pooled_positions(const Tensor& input_ids) const {
  const Tensor ids = as_int64(input_ids);
  check(ids.dim() == 2, "CLIP text encoder: input_ids must be [batch, tokens], got {}",
        shape_string(ids.shape()));
  const int64_t batch = ids.size(0), length = ids.size(1);
  std::vector<int64_t> positions(size_t(batch), 0);
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t* row = ids.data<int64_t>() + b * length;
    if (config_.pools_at_argmax()) {
      positions[size_t(b)] = std::max_element(row, row + length) - row;  // the first maximum
    } else {
      const int64_t* eos = std::find(row, row + length, config_.eos_token_id);
      positions[size_t(b)] = eos == row + length ? 0 : eos - row;
    }
  }
  return positions;
}

ClipTextModel::Output ClipTextModel::forward(const Tensor& input_ids) const {
  const Tensor ids = as_int64(input_ids);
  check(ids.dim() == 2 && ids.size(0) > 0 && ids.size(1) > 0,
        "CLIP text encoder: input_ids must be [batch, tokens] with at least one token, got {}",
        shape_string(ids.shape()));
  const int64_t batch = ids.size(0), length = ids.size(1), d = config_.hidden_size;
  check(length <= config_.max_position_embeddings,
        "CLIP text encoder: {} tokens, more than its {} positions; tokenize with "
        "max_length {} and truncation",
        length, config_.max_position_embeddings, config_.max_position_embeddings);
  Tensor x = embed(ids).to(state_.device);  // the residual stream, float32

  std::vector<std::vector<int64_t>> prompts(static_cast<size_t>(batch));
  for (int64_t b = 0; b < batch; ++b)
    prompts[size_t(b)].assign(ids.data<int64_t>() + b * length,
                              ids.data<int64_t>() + (b + 1) * length);
  paged::PagedRunner& runner = runner_for(batch, length);
  // No prefix cache: the prefill's tokens are the ids in order, request after request.
  runner.begin_extend(prompts);
  try {
    for (size_t l = 0; l < state_.layers.size(); ++l) {
      ops::add_(x, self_attention(int64_t(l), state_.layers[l], x, runner));
      ops::add_(x, mlp(state_.layers[l], x));
    }
  } catch (...) {
    runner.finish();
    throw;
  }
  runner.finish();

  Output output;
  // The GPU's affine LayerNorm writes bf16 only (what the next product reads): there the output
  // is rounded once to bf16, within the GPU's 1e-2 bound.
  output.last_hidden_state =
      ops::layer_norm(x, config_.layer_norm_eps, state_.final_norm_weight, state_.final_norm_bias,
                      state_.device == Device::CPU ? DType::F32 : DType::BF16)
          .to(Device::CPU)
          .to(DType::F32)
          .contiguous()
          .view({batch, length, d});
  output.pooled = Tensor::empty({batch, d});
  const std::vector<int64_t> rows = pooled_positions(ids);
  for (int64_t b = 0; b < batch; ++b)
    std::memcpy(output.pooled.data<float>() + b * d,
                output.last_hidden_state.data<float>() + (b * length + rows[size_t(b)]) * d,
                size_t(d) * sizeof(float));
  return output;
}

ClipTextModel::Output ClipTextModel::forward(
    const std::vector<std::vector<int64_t>>& input_ids) const {
  check(!input_ids.empty() && !input_ids.front().empty(),
        "CLIP text encoder: no prompts, or an empty one");
  const size_t length = input_ids.front().size();
  std::vector<int64_t> packed;
  for (const auto& row : input_ids) {
    check(row.size() == length,
          "CLIP text encoder: prompts of {} and {} tokens; pad them to one length "
          "(encode_padded)",
          length, row.size());
    packed.insert(packed.end(), row.begin(), row.end());
  }
  return forward(Tensor::from_vector({int64_t(input_ids.size()), int64_t(length)}, packed));
}

}  // namespace mmgen::text_encoders
