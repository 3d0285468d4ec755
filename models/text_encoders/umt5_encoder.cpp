#include "models/text_encoders/umt5_encoder.h"

#include <cmath>
#include <cstring>
#include <optional>
#include <string>
#include <utility>

#include "attention/catalogue.h"
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
  attention_backend_ = attention::auto_backend(attention::this_machine(), attention::Family::Paged,
                                               "fp32", config_.d_kv);
}

void UMT5Encoder::set_attention_backend(const std::string& name, int64_t page_size) {
  check(page_size >= 1, "--page-size must be at least 1, got {}", page_size);
  attention::paged::make_paged_backend(name);  // throws for a backend this build cannot run
  attention_backend_ = name;
  page_size_ = page_size;
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

namespace {

// The layer's relative position bias by key − query offset: values [heads, 2·max_len − 1].
attention::paged::RelativePositionBias relative_bias(const Tensor& table, int64_t max_len,
                                                     int64_t max_distance) {
  const Tensor t = table.to(DType::F32).contiguous();
  const int64_t heads = t.size(1), span = 2 * max_len - 1;
  const std::vector<int64_t> buckets = t5_offset_buckets(max_len, t.size(0), max_distance);
  Tensor values = Tensor::empty({heads, span});
  for (int64_t o = 0; o < span; ++o)
    for (int64_t h = 0; h < heads; ++h)
      values.data<float>()[h * span + o] = t.data<float>()[buckets[size_t(o)] * heads + h];
  return attention::paged::RelativePositionBias(values, max_len);
}

}  // namespace

// The one place the encoder calls attention: an encoder-only paged layer with T5's bias.
Tensor UMT5Encoder::self_attention(const Layer& layer, const Tensor& x,
                                   const attention::paged::ScoreBias& bias,
                                   attention::paged::PagedAttentionBackend& backend,
                                   const attention::paged::ForwardBatch& batch) const {
  const int64_t tokens = x.size(0);
  const Shape heads_shape = {tokens, config_.num_heads, config_.d_kv};
  const Tensor normed = ops::rms_norm(x, layer.attention_norm, config_.layer_norm_epsilon);
  attention::paged::PagedLayer paged;
  paged.num_q_heads = config_.num_heads;
  paged.num_kv_heads = config_.num_heads;
  paged.head_dim = config_.d_kv;
  paged.scaling = 1.0f;  // T5 folds the 1/√d_kv into its initialisation: scores are raw q·k
  paged.type = attention::paged::AttentionType::EncoderOnly;
  paged.bias = &bias;
  const Tensor context =
      backend.forward(ops::linear(normed, layer.q).view(heads_shape),
                      ops::linear(normed, layer.k).view(heads_shape),
                      ops::linear(normed, layer.v).view(heads_shape), paged, batch, false);
  return ops::linear(context.view({tokens, config_.inner_dim()}), layer.o);
}

Tensor UMT5Encoder::feed_forward(const Layer& layer, const Tensor& x) const {
  const Tensor normed = ops::rms_norm(x, layer.ffn_norm, config_.layer_norm_epsilon);
  Tensor hidden = ops::linear(normed, layer.wi_0);
  activate_(hidden);
  if (config_.gated) ops::mul_(hidden, ops::linear(normed, layer.wi_1));
  return ops::linear(hidden, layer.wo);
}

Tensor UMT5Encoder::encode_packed(const Tensor& ids,
                                  const attention::paged::ForwardBatch& batch) const {
  auto backend = attention::paged::make_paged_backend(attention_backend_);
  backend->init_forward_metadata(batch);
  const int64_t max_len = std::max<int64_t>(1, batch.max_seq_len());
  Tensor x = embed(ids);
  std::optional<attention::paged::RelativePositionBias> bias;  // T5: block 0's, reused
  for (const Layer& layer : layers_) {
    if (layer.position_table.defined())
      bias.emplace(
          relative_bias(layer.position_table, max_len, config_.relative_attention_max_distance));
    ops::add_(x, self_attention(layer, x, *bias, *backend, batch));
    ops::add_(x, feed_forward(layer, x));
  }
  return ops::rms_norm(x, final_norm_, config_.layer_norm_epsilon);
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
