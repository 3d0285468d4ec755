#include "models/text_encoders/umt5_encoder.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>

#include "attention/catalogue.h"
#include "core/error.h"
#include "core/ops.h"
#include "core/scaled_fp8.h"
#include "models/text_encoders/t5_relative_position.h"

namespace mmgen::text_encoders {
namespace {

// Below this many elements a loop runs on one thread: waking a team costs more than it saves.
constexpr int64_t kUmt5ParallelMin = int64_t(1) << 16;

constexpr models::CheckpointKind kUmt5Checkpoint{"text encoder", "T5/UMT5"};

// The names of llama.cpp's T5 GGUF files (city96's UMT5-XXL encoders for Wan among them) as
// transformers names them, by the fragment replacements ComfyUI-GGUF's loader makes, in order:
// "enc.blk.3.attn_q.weight" is "encoder.block.3.layer.0.SelfAttention.q.weight".
WeightStore with_transformers_names(const WeightStore& weights) {
  if (!weights.has("enc.blk.0.attn_q.weight")) return weights;
  static const std::pair<const char*, const char*> kFragments[] = {
      {"enc.", "encoder."},
      {".blk.", ".block."},
      {"token_embd", "shared"},
      {"output_norm", "final_layer_norm"},
      {"attn_q", "layer.0.SelfAttention.q"},
      {"attn_k", "layer.0.SelfAttention.k"},
      {"attn_v", "layer.0.SelfAttention.v"},
      {"attn_o", "layer.0.SelfAttention.o"},
      {"attn_norm", "layer.0.layer_norm"},
      {"attn_rel_b", "layer.0.SelfAttention.relative_attention_bias"},
      {"ffn_up", "layer.1.DenseReluDense.wi_1"},
      {"ffn_down", "layer.1.DenseReluDense.wo"},
      {"ffn_gate", "layer.1.DenseReluDense.wi_0"},
      {"ffn_norm", "layer.1.layer_norm"},
  };
  return weights.renamed([](const std::string& stored) {
    std::string name = stored;
    for (const auto& [from, to] : kFragments)
      if (const size_t at = name.find(from); at != std::string::npos)
        name.replace(at, std::string(from).size(), to);
    return name;
  });
}

Tensor as_int64(const Tensor& ids, const char* what) {
  check(ids.dtype() == DType::I64 || ids.dtype() == DType::I32,
        "text encoder: {} must be int64 or int32, got {}", what, dtype_name(ids.dtype()));
  return ids.to(DType::I64);
}

}  // namespace

UMT5Encoder::UMT5Encoder(T5Config config, WeightStore weights)
    : config_(std::move(config)), weights_(with_transformers_names(weights)) {
  state_ = host_state();
  attention_backend_ = attention::auto_backend(attention::this_machine(), attention::Family::Paged,
                                               "fp32", config_.d_kv);
}

UMT5Encoder::Placed UMT5Encoder::shaped_state(const T5Config& config, std::string embedding_name) {
  Placed shaped;
  shaped.d_model = config.d_model;
  shaped.vocab_size = config.vocab_size;
  shaped.embedding_name = std::move(embedding_name);
  for (int64_t i = 0; i < config.num_layers; ++i) {
    Layer layer;
    layer.d_model = config.d_model;
    layer.inner = config.inner_dim();
    layer.d_ff = config.d_ff;
    layer.gated = config.gated;
    // T5 keeps one table, in block 0, for every layer; UMT5 one per layer.
    if (i == 0 || config.per_layer_position_bias())
      layer.position_table_shape = {config.relative_attention_num_buckets, config.num_heads};
    shaped.layers.push_back(std::move(layer));
  }
  return shaped;
}

UMT5Encoder::Placed UMT5Encoder::host_state() const {
  const Placed shaped = shaped_state(
      config_, weights_.has("shared.weight") ? "shared.weight" : "encoder.embed_tokens.weight");
  models::expect_checkpoint(shaped, weights_, "", kUmt5Checkpoint);
  Placed host = models::loaded(shaped, weights_, "", models::Values::AsStored);
  for (Layer& layer : host.layers)  // read as float32 as the bias is built
    if (layer.position_table.defined()) layer.position_table = layer.position_table.to(DType::F32);
  return host;
}

void UMT5Encoder::Layer::parameters(const models::ParameterVisitor& visit) {
  using models::Role;
  const std::string attention = "0.SelfAttention.", dense = "1.DenseReluDense.";
  const int64_t d = d_model;
  visit({"0.layer_norm.weight", attention_norm, Role::Float32, {d}});
  for (auto [name, weight] : {std::pair{"q.weight", &q}, {"k.weight", &k}, {"v.weight", &v}})
    visit({attention + name, *weight, Role::Product, {inner, d}});
  visit({attention + "o.weight", o, Role::Product, {d, inner}});
  // Read on the host as the bias is built.
  if (!position_table_shape.empty())
    visit({attention + "relative_attention_bias.weight", position_table, Role::Host,
           position_table_shape});
  visit({"1.layer_norm.weight", ffn_norm, Role::Float32, {d}});
  visit({dense + (gated ? "wi_0.weight" : "wi.weight"), wi_0, Role::Product, {d_ff, d}});
  if (gated) visit({dense + "wi_1.weight", wi_1, Role::Product, {d_ff, d}});
  visit({dense + "wo.weight", wo, Role::Product, {d, d_ff}});
}

void UMT5Encoder::Placed::parameters(const models::ParameterVisitor& visit) {
  // Rows are gathered on the host, as a product reads them (a GGUF file's blocks stay blocks).
  visit({embedding_name, embedding, models::Role::Table, {vocab_size, d_model}});
  for (size_t i = 0; i < layers.size(); ++i)
    layers[i].parameters(models::nested(visit, "encoder.block." + std::to_string(i) + ".layer."));
  visit({"encoder.final_layer_norm.weight", final_norm, models::Role::Float32, {d_model}});
}

uint64_t UMT5Encoder::gpu_weight_bytes(const T5Config& config, DType compute) {
  return models::shaped_resident_bytes(shaped_state(config, "shared.weight"),
                                       {Device::CUDA, compute});
}

void UMT5Encoder::set_attention_backend(const std::string& name, int64_t page_size) {
  check(page_size >= 1, "--page-size must be at least 1, got {}", page_size);
  attention::paged::make_paged_backend(name,
                                       state_.device);  // throws where this build cannot run it
  attention_backend_ = name;
  page_size_ = page_size;
}

void UMT5Encoder::check_device_support(const Placed& state) const {
  if (state.device == Device::CPU) {
    check(state.compute == DType::F32, "text encoder: the CPU computes in float32, not {}",
          dtype_name(state.compute));
    return;
  }
  check(state.compute == DType::BF16 || state.compute == DType::F32,
        "GPU text encoder: products read bf16 or float32, not {}", dtype_name(state.compute));
  check(config_.d_model % 8 == 0 && config_.d_ff % 8 == 0 && config_.inner_dim() % 8 == 0,
        "GPU text encoder: d_model {}, d_ff {} and heads x d_kv {} must be multiples of 8; use "
        "--device cpu",
        config_.d_model, config_.d_ff, config_.inner_dim());
}

void UMT5Encoder::list_parameters(const models::ParameterVisitor& visit) const {
  Placed held = state_;
  held.parameters(visit);
}

void UMT5Encoder::set_device(Device device, DType compute, const std::string& attention_backend) {
  if (device == Device::CPU) compute = DType::F32;
  Placed target;  // checked before anything moves
  target.device = device;
  target.compute = compute;
  check_device_support(target);
  const std::string backend = attention_backend.empty() ? attention_backend_ : attention_backend;
  attention::paged::make_paged_backend(backend, device);
  attention_backend_ = backend;
  // Back on the host starts again from the weights as stored, so the CPU computes on exactly what
  // it computed on before (random() encoders have no checkpoint: theirs are copied).
  const auto to_host = [&](Placed&& state) {
    if (from_checkpoint_) return host_state();
    state.parameters([](const models::Parameter& p) { p.tensor = p.tensor.to(Device::CPU); });
    state.device = Device::CPU;
    state.compute = DType::F32;
    state.bytes = 0;
    return std::move(state);
  };
  // The GPU keeps products' weights in the compute dtype and norms in float32, uploaded once.
  models::move_model(state_, device, to_host, [&](const Placed& host) {
    return models::placed_state(host, {device, compute});
  });
}

UMT5Encoder UMT5Encoder::random(const T5Config& config, uint64_t seed, Device device) {
  UMT5Encoder encoder;
  encoder.config_ = config;
  encoder.from_checkpoint_ = false;
  // The checkpoint's shapes; no token table (a random encoder encodes given embeddings).
  encoder.state_ = shaped_state(config, "shared.weight");
  encoder.state_.parameters([&](const models::Parameter& p) {
    switch (p.role) {
      case models::Role::Product:
        p.tensor = ops::random_uniform(p.shape, DType::BF16, device, seed++,
                                       1.0f / std::sqrt(float(p.shape.back())));
        break;
      case models::Role::Host:  // the position tables, float32 on the host
        p.tensor = ops::random_uniform(p.shape, DType::F32, Device::CPU, seed++, 1.0f);
        break;
      case models::Role::Table:
        break;
      default:  // the norms
        p.tensor = Tensor::full(p.shape, 1.0f).to(device);
    }
  });
  encoder.state_.device = device;
  encoder.state_.compute = device == Device::CPU ? DType::F32 : DType::BF16;
  encoder.check_device_support(encoder.state_);
  encoder.attention_backend_ = attention::auto_backend(
      attention::this_machine(), attention::Family::Paged, "fp32", config.d_kv);
  if (device != Device::CPU) encoder.state_.bytes = models::parameter_bytes(encoder.state_, device);
  return encoder;
}

UMT5Encoder UMT5Encoder::from_folder(const fs::path& folder) {
  const fs::path config_path = folder / "config.json";
  check(fs::exists(config_path), "text encoder folder {} has no config.json", folder.string());
  return UMT5Encoder(T5Config::from_file(config_path), WeightStore::open_folder(folder));
}

Tensor UMT5Encoder::embed(const Tensor& input_ids) const {
  const Tensor ids = as_int64(input_ids, "input_ids");
  const int64_t count = ids.numel(), d = config_.d_model, vocab = state_.embedding.size(0);
  const int64_t* id = ids.data<int64_t>();
  for (int64_t t = 0; t < count; ++t)
    check(id[t] >= 0 && id[t] < vocab,
          "text encoder: token id {} is outside the vocabulary [0, {}); the tokenizer does not "
          "match the text encoder",
          id[t], vocab);
  Shape shape = ids.shape();
  shape.push_back(d);
  Tensor x = Tensor::empty(shape);
  float* out = x.data<float>();
  // Only the rows used are converted: the table (256k × 4096 for UMT5-XXL) stays mapped as stored.
#pragma omp parallel for schedule(static) if (count * d >= kUmt5ParallelMin)
  for (int64_t t = 0; t < count; ++t) {
    if (state_.embedding.dtype() == DType::F8E4M3Rows) {  // an FP8 checkpoint's table: e4m3 · scale
      const auto* row = reinterpret_cast<const uint8_t*>(state_.embedding.raw()) + id[t] * d;
      const float scale = state_.embedding.row_scales()[id[t]];
      for (int64_t i = 0; i < d; ++i) out[t * d + i] = fp8::e4m3_values()[row[i]] * scale;
      continue;
    }
    const Tensor row = state_.embedding.select(0, id[t]).to(DType::F32);
    std::memcpy(out + t * d, row.raw(), size_t(d) * sizeof(float));
  }
  return x;
}

namespace {

// The layer's relative position bias by key − query offset: values [heads, 2·max_len − 1].
// Each table's relative position bias by key − query offset, [tables, heads, 2·max_len − 1],
// built on the host and moved to `device` in one copy.
Tensor relative_bias_values(const std::vector<const Tensor*>& tables, int64_t max_len,
                            int64_t max_distance, Device device) {
  const int64_t heads = tables.front()->size(1), span = 2 * max_len - 1;
  const std::vector<int64_t> buckets =
      t5_offset_buckets(max_len, tables.front()->size(0), max_distance);
  Tensor values = Tensor::empty({int64_t(tables.size()), heads, span});
  for (size_t l = 0; l < tables.size(); ++l) {
    const Tensor t = tables[l]->to(DType::F32).contiguous();
    const float* table = t.data<float>();  // hoisted: data() checks its dtype on every call
    float* out = values.data<float>() + int64_t(l) * heads * span;
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t o = 0; o < span; ++o) out[h * span + o] = table[buckets[size_t(o)] * heads + h];
  }
  return values.to(device);
}

}  // namespace

// The one place the encoder calls attention: an encoder-only paged layer with T5's bias.
Tensor UMT5Encoder::self_attention(const Layer& layer, const Tensor& x,
                                   const attention::paged::ScoreBias& bias,
                                   attention::paged::PagedAttentionBackend& backend,
                                   const attention::paged::ForwardBatch& batch) const {
  const int64_t tokens = x.size(0);
  const Shape heads_shape = {tokens, config_.num_heads, config_.d_kv};
  const Tensor normed =
      ops::rms_norm(x, layer.attention_norm, config_.layer_norm_epsilon, state_.compute);
  attention::paged::PagedLayer paged;
  paged.num_q_heads = config_.num_heads;
  paged.num_kv_heads = config_.num_heads;
  paged.head_dim = config_.d_kv;
  paged.scaling = 1.0f;  // T5 folds the 1/√d_kv into its initialisation: scores are raw q·k
  paged.type = attention::paged::AttentionType::EncoderOnly;
  paged.bias = &bias;
  // q, k, v in the compute dtype (what attention reads); the projection back in float32.
  const Tensor context =
      backend.forward(ops::linear(normed, layer.q, Tensor(), state_.compute).view(heads_shape),
                      ops::linear(normed, layer.k, Tensor(), state_.compute).view(heads_shape),
                      ops::linear(normed, layer.v, Tensor(), state_.compute).view(heads_shape),
                      paged, batch, false);
  return ops::linear(context.view({tokens, config_.inner_dim()}), layer.o);
}

Tensor UMT5Encoder::feed_forward(const Layer& layer, const Tensor& x) const {
  const Tensor normed =
      ops::rms_norm(x, layer.ffn_norm, config_.layer_norm_epsilon, state_.compute);
  // The activation and the gate in float32; one rounding to the compute dtype before wo.
  Tensor hidden = ops::linear(normed, layer.wi_0);
  ops::activate_(hidden, config_.activation);
  if (config_.gated) ops::mul_(hidden, ops::linear(normed, layer.wi_1));
  return ops::linear(hidden.to(state_.compute), layer.wo);
}

Tensor UMT5Encoder::encode_embeddings(const Tensor& embeddings,
                                      const attention::paged::ForwardBatch& batch) const {
  check(embeddings.dim() == 2 && embeddings.size(0) == batch.num_tokens &&
            embeddings.size(1) == config_.d_model && batch.num_tokens > 0,
        "text encoder: embeddings {} should be [{}, {}]", shape_string(embeddings.shape()),
        batch.num_tokens, config_.d_model);
  // The backend is made once per device and name (a GPU one holds pinned and device buffers).
  if (!backend_ || backend_device_ != state_.device || backend_->name() != attention_backend_) {
    backend_ = attention::paged::make_paged_backend(attention_backend_, state_.device);
    backend_device_ = state_.device;
  }
  attention::paged::PagedAttentionBackend& backend = *backend_;
  backend.init_forward_metadata(batch);
  const int64_t max_len = std::max<int64_t>(1, batch.max_seq_len());
  // Every layer's bias before the first layer runs, in one copy: on the GPU the upload then never
  // waits for queued work. T5 has block 0's only, reused by every layer.
  std::vector<const Tensor*> tables;
  for (const Layer& layer : state_.layers)
    if (layer.position_table.defined()) tables.push_back(&layer.position_table);
  const Tensor bias_values =
      relative_bias_values(tables, max_len, config_.relative_attention_max_distance, state_.device);
  std::vector<attention::paged::RelativePositionBias> biases;
  for (size_t l = 0; l < tables.size(); ++l)
    biases.emplace_back(bias_values.select(0, int64_t(l)), max_len);
  Tensor x = embeddings.to(DType::F32).to(state_.device);  // the residual stream, float32
  if (x.raw() == embeddings.raw()) x = x.clone();          // never write into the caller's tensor
  for (size_t l = 0; l < state_.layers.size(); ++l) {
    const auto& bias = biases[std::min(l, biases.size() - 1)];
    ops::add_(x, self_attention(state_.layers[l], x, bias, backend, batch));
    ops::add_(x, feed_forward(state_.layers[l], x));
  }
  return ops::rms_norm(x, state_.final_norm, config_.layer_norm_epsilon);
}

Tensor UMT5Encoder::encode_packed(const Tensor& ids,
                                  const attention::paged::ForwardBatch& batch) const {
  return encode_embeddings(embed(ids), batch).to(Device::CPU);
}

Tensor UMT5Encoder::forward(const Tensor& input_ids, const Tensor& attention_mask) const {
  check(input_ids.dim() == 2, "text encoder: input_ids must be [batch, tokens], got {}",
        shape_string(input_ids.shape()));
  const int64_t batch_size = input_ids.size(0), length = input_ids.size(1);
  // Each row is one request of `length` tokens; padding keys (mask 0) are cut from attention,
  // while the padded rows still run as queries, as transformers computes them.
  std::vector<int64_t> valid(size_t(batch_size), length);
  if (attention_mask.defined()) {
    check(attention_mask.shape() == input_ids.shape(),
          "text encoder: attention_mask {} does not match input_ids {}",
          shape_string(attention_mask.shape()), shape_string(input_ids.shape()));
    const Tensor mask = attention_mask.to(DType::F32).contiguous();
    for (int64_t b = 0; b < batch_size; ++b) {
      const float* row = mask.data<float>() + b * length;
      int64_t ones = 0;
      while (ones < length && row[ones] != 0.0f) ++ones;
      for (int64_t j = ones; j < length; ++j)
        check(row[j] == 0.0f,
              "text encoder: attention_mask row {} is not right-padded (a 1 after a 0 at position "
              "{}); pad prompts on the right",
              b, j);
      check(ones > 0, "text encoder: attention_mask row {} has no token", b);
      valid[size_t(b)] = ones;
    }
  }
  const auto batch = attention::paged::ForwardBatch::encoder_only(
      std::vector<int64_t>(size_t(batch_size), length), valid);
  const Tensor ids = as_int64(input_ids, "input_ids").contiguous().view({batch_size * length});
  return encode_packed(ids, batch).view({batch_size, length, config_.d_model});
}

std::vector<Tensor> UMT5Encoder::forward_unpadded(
    const std::vector<std::vector<int64_t>>& prompts) const {
  std::vector<int64_t> lengths, packed;
  for (const auto& prompt : prompts) {
    check(!prompt.empty(), "text encoder: prompt {} has no tokens", lengths.size());
    lengths.push_back(int64_t(prompt.size()));
    packed.insert(packed.end(), prompt.begin(), prompt.end());
  }
  if (prompts.empty()) return {};
  const auto batch = attention::paged::ForwardBatch::encoder_only(lengths);
  const Tensor hidden = encode_packed(Tensor::from_vector({int64_t(packed.size())}, packed), batch);
  std::vector<Tensor> out;
  for (size_t i = 0; i < prompts.size(); ++i)
    out.push_back(hidden.slice(0, batch.extend_start_loc[i], batch.extend_start_loc[i] + lengths[i])
                      .contiguous());
  return out;
}

}  // namespace mmgen::text_encoders
