#include "models/text_encoders/umt5_encoder.h"

#include <cmath>
#include <cstring>
#include <string>
#include <utility>

#include "attention/dense_attention.h"
#include "core/error.h"
#include "core/ops.h"
#include "models/text_encoders/t5_relative_position.h"

namespace mmgen::text_encoders {
namespace {

// Below this many elements a loop runs on one thread: waking a team costs more than it saves.
constexpr int64_t kParallelMin = int64_t(1) << 16;

// A weight in its stored dtype after checking that it exists and has the expected shape.
Tensor require_weight(const WeightStore& weights, const std::string& name, const Shape& shape) {
  check(weights.has(name),
        "text encoder weights in {} lack \"{}\"; is this a T5/UMT5 encoder checkpoint matching its "
        "config.json?",
        weights.origin().string(), name);
  Tensor tensor = weights.get(name);
  check(tensor.shape() == shape && dtype_is_floating(tensor.dtype()),
        "text encoder weight \"{}\" in {} is {} {}, expected a float tensor of shape {}; the "
        "checkpoint does not match config.json",
        name, weights.origin().string(), dtype_name(tensor.dtype()), shape_string(tensor.shape()),
        shape_string(shape));
  return tensor;
}

Tensor as_int64(const Tensor& ids, const char* what) {
  check(ids.dtype() == DType::I64 || ids.dtype() == DType::I32,
        "text encoder: {} must be int64 or int32, got {}", what, dtype_name(ids.dtype()));
  return ids.to(DType::I64);
}

}  // namespace

UMT5Encoder::UMT5Encoder(T5Config config, WeightStore weights)
    : config_(std::move(config)), weights_(std::move(weights)) {
  const int64_t d = config_.d_model, inner = config_.inner_dim(), ff = config_.d_ff;
  const std::string embedding_name =
      weights_.has("shared.weight") ? "shared.weight" : "encoder.embed_tokens.weight";
  embedding_ = require_weight(weights_, embedding_name, {config_.vocab_size, d});

  for (int64_t i = 0; i < config_.num_layers; ++i) {
    const std::string block = "encoder.block." + std::to_string(i) + ".layer.";
    const std::string attn = block + "0.SelfAttention.";
    const std::string dense = block + "1.DenseReluDense.";
    Layer layer;
    layer.attention_norm = require_weight(weights_, block + "0.layer_norm.weight", {d});
    layer.q = require_weight(weights_, attn + "q.weight", {inner, d});
    layer.k = require_weight(weights_, attn + "k.weight", {inner, d});
    layer.v = require_weight(weights_, attn + "v.weight", {inner, d});
    layer.o = require_weight(weights_, attn + "o.weight", {d, inner});
    if (i == 0 || config_.per_layer_position_bias())
      layer.position_table =
          require_weight(weights_, attn + "relative_attention_bias.weight",
                         {config_.relative_attention_num_buckets, config_.num_heads})
              .to(DType::F32);
    layer.ffn_norm = require_weight(weights_, block + "1.layer_norm.weight", {d});
    if (config_.gated) {
      layer.wi_0 = require_weight(weights_, dense + "wi_0.weight", {ff, d});
      layer.wi_1 = require_weight(weights_, dense + "wi_1.weight", {ff, d});
    } else {
      layer.wi_0 = require_weight(weights_, dense + "wi.weight", {ff, d});
    }
    layer.wo = require_weight(weights_, dense + "wo.weight", {d, ff});
    layers_.push_back(std::move(layer));
  }
  final_norm_ = require_weight(weights_, "encoder.final_layer_norm.weight", {d});
}

UMT5Encoder UMT5Encoder::from_folder(const fs::path& folder) {
  const fs::path config_path = folder / "config.json";
  check(fs::exists(config_path), "text encoder folder {} has no config.json", folder.string());
  return UMT5Encoder(T5Config::from_file(config_path), WeightStore::open_folder(folder));
}

Tensor UMT5Encoder::embed(const Tensor& input_ids) const {
  const Tensor ids = as_int64(input_ids, "input_ids");
  const int64_t count = ids.numel(), d = config_.d_model, vocab = embedding_.size(0);
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
#pragma omp parallel for schedule(static) if (count * d >= kParallelMin)
  for (int64_t t = 0; t < count; ++t) {
    const Tensor row = embedding_.select(0, id[t]).to(DType::F32);
    std::memcpy(out + t * d, row.raw(), size_t(d) * sizeof(float));
  }
  return x;
}

void UMT5Encoder::activate_(Tensor& x) const {
  float* p = x.data<float>();
  const int64_t n = x.numel();
  switch (config_.activation) {
    case T5Activation::GeluTanh:
      ops::gelu_tanh_(x);
      return;
    case T5Activation::Silu:
      ops::silu_(x);
      return;
    case T5Activation::Relu:
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
      for (int64_t i = 0; i < n; ++i) p[i] = p[i] > 0.0f ? p[i] : 0.0f;
      return;
    case T5Activation::Gelu:  // the exact (erf) GELU
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
      for (int64_t i = 0; i < n; ++i)
        p[i] = 0.5f * p[i] * (1.0f + std::erf(p[i] * float(M_SQRT1_2)));
      return;
  }
}

// The one place the encoder calls attention (the attention-backend selector will route it).
Tensor UMT5Encoder::self_attention(const Layer& layer, const Tensor& x, const Tensor& position_bias,
                                   const Tensor& key_mask) const {
  const int64_t batch = x.size(0), length = x.size(1);
  const Shape heads_shape = {batch, length, config_.num_heads, config_.d_kv};
  const Tensor normed = ops::rms_norm(x, layer.attention_norm, config_.layer_norm_epsilon);
  attention::DenseAttentionArgs args;
  args.q = ops::linear(normed, layer.q).view(heads_shape);
  args.k = ops::linear(normed, layer.k).view(heads_shape);
  args.v = ops::linear(normed, layer.v).view(heads_shape);
  args.scale = 1.0f;  // T5 folds the 1/√d_kv into its initialisation: scores are raw q·k
  args.bias = position_bias;
  args.key_mask = key_mask;
  const Tensor context =
      attention::dense_attention(args).view({batch, length, config_.inner_dim()});
  return ops::linear(context, layer.o);
}

Tensor UMT5Encoder::feed_forward(const Layer& layer, const Tensor& x) const {
  const Tensor normed = ops::rms_norm(x, layer.ffn_norm, config_.layer_norm_epsilon);
  Tensor hidden = ops::linear(normed, layer.wi_0);
  activate_(hidden);
  if (config_.gated) ops::mul_(hidden, ops::linear(normed, layer.wi_1));
  return ops::linear(hidden, layer.wo);
}

Tensor UMT5Encoder::forward(const Tensor& input_ids, const Tensor& attention_mask) const {
  check(input_ids.dim() == 2, "text encoder: input_ids must be [batch, tokens], got {}",
        shape_string(input_ids.shape()));
  const int64_t length = input_ids.size(1);
  Tensor key_mask;
  if (attention_mask.defined()) {
    check(attention_mask.shape() == input_ids.shape(),
          "text encoder: attention_mask {} does not match input_ids {}",
          shape_string(attention_mask.shape()), shape_string(input_ids.shape()));
    key_mask = attention_mask.contiguous();
  }

  Tensor x = embed(input_ids);
  Tensor position_bias;  // T5: block 0's, reused by every layer
  for (const Layer& layer : layers_) {
    if (layer.position_table.defined())
      position_bias = t5_relative_position_bias(layer.position_table, length,
                                                config_.relative_attention_max_distance);
    ops::add_(x, self_attention(layer, x, position_bias, key_mask));
    ops::add_(x, feed_forward(layer, x));
  }
  return ops::rms_norm(x, final_norm_, config_.layer_norm_epsilon);
}

}  // namespace mmgen::text_encoders
