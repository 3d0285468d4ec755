#include "models/cuda/umt5_encoder_cuda.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "attention/cuda/paged_backend_cuda.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/device_ops.h"
#include "core/cuda/gemm.h"
#include "core/cuda/gemm_f32.h"
#include "core/cuda/t5_ops.h"
#include "core/dtype.h"
#include "core/error.h"
#include "models/text_encoders/t5_relative_position.h"

namespace mmgen::cuda {
namespace {

using text_encoders::T5Activation;

FfnActivation ffn_activation(T5Activation activation) {
  switch (activation) {
    case T5Activation::Relu:
      return FfnActivation::Relu;
    case T5Activation::Gelu:
      return FfnActivation::Gelu;
    case T5Activation::GeluTanh:
      return FfnActivation::GeluTanh;
    case T5Activation::Silu:
      return FfnActivation::Silu;
  }
  return FfnActivation::GeluTanh;
}

std::unique_ptr<paged::PagedBackendCuda> make_backend(const std::string& name) {
  // Encoder-only layers keep no K/V: no pool.
  return paged::make_paged_backend_cuda(name, nullptr);
}

}  // namespace

void UMT5EncoderCuda::check_supported() const {
  const int64_t d_kv = config_.d_kv;
  const auto sizes = paged::cuda_paged_head_sizes();
  check(std::find(sizes.begin(), sizes.end(), int(d_kv)) != sizes.end(),
        "GPU text encoder: head size d_kv = {} is not one the GPU paged kernels take (8, 16, 32, "
        "64, 128, 256); use --device cpu",
        d_kv);
  check(config_.d_model % 8 == 0 && config_.d_ff % 8 == 0,
        "GPU text encoder: d_model {} and d_ff {} must be multiples of 8", config_.d_model,
        config_.d_ff);
}

DeviceBuffer UMT5EncoderCuda::upload_norm(const Tensor& weight) {
  const Tensor values = weight.to(DType::F32).contiguous();
  DeviceBuffer buffer(values.nbytes());
  buffer.upload(values.raw(), values.nbytes());
  weight_bytes_ += buffer.size();
  return buffer;
}

DeviceBuffer UMT5EncoderCuda::upload_stacked(const std::vector<Tensor>& weights) {
  size_t bytes = 0;
  std::vector<Tensor> converted;
  const DType dtype = precision_ == EncoderPrecision::F32 ? DType::F32 : DType::BF16;
  for (const Tensor& weight : weights) {
    converted.push_back(weight.to(dtype).contiguous());
    bytes += converted.back().nbytes();
  }
  std::vector<std::byte> host(bytes);
  size_t at = 0;
  for (const Tensor& weight : converted) {
    std::memcpy(host.data() + at, weight.raw(), weight.nbytes());
    at += weight.nbytes();
  }
  DeviceBuffer buffer(bytes);
  buffer.upload(host.data(), bytes);
  weight_bytes_ += bytes;
  return buffer;
}

UMT5EncoderCuda::UMT5EncoderCuda(const text_encoders::UMT5Encoder& model,
                                 const std::string& backend, EncoderPrecision precision)
    : model_(&model), config_(model.config()), backend_name_(backend), precision_(precision) {
  check_supported();
  backend_ = make_backend(backend);
  const WeightStore& weights = model.weights();
  const int64_t buckets = config_.relative_attention_num_buckets, heads = config_.num_heads;
  bias_layers_ = config_.per_layer_position_bias() ? config_.num_layers : 1;
  std::vector<float> tables;
  for (int64_t i = 0; i < config_.num_layers; ++i) {
    const std::string block = "encoder.block." + std::to_string(i) + ".layer.";
    const std::string attn = block + "0.SelfAttention.";
    const std::string dense = block + "1.DenseReluDense.";
    Layer layer;
    layer.attention_norm = upload_norm(weights.get(block + "0.layer_norm.weight"));
    layer.qkv = upload_stacked({weights.get(attn + "q.weight"), weights.get(attn + "k.weight"),
                                weights.get(attn + "v.weight")});
    layer.o = upload_stacked({weights.get(attn + "o.weight")});
    layer.ffn_norm = upload_norm(weights.get(block + "1.layer_norm.weight"));
    layer.wi = config_.gated ? upload_stacked({weights.get(dense + "wi_0.weight"),
                                               weights.get(dense + "wi_1.weight")})
                             : upload_stacked({weights.get(dense + "wi.weight")});
    layer.wo = upload_stacked({weights.get(dense + "wo.weight")});
    if (i < bias_layers_) {
      const Tensor table =
          weights.get(attn + "relative_attention_bias.weight").to(DType::F32).contiguous();
      check(table.numel() == buckets * heads,
            "GPU text encoder: layer {}'s relative_attention_bias is {}, expected [{}, {}]", i,
            shape_string(table.shape()), buckets, heads);
      tables.insert(tables.end(), table.data<float>(), table.data<float>() + table.numel());
    }
    layers_.push_back(std::move(layer));
  }
  final_norm_ = upload_norm(weights.get("encoder.final_layer_norm.weight"));
  position_tables_ = DeviceBuffer(tables.size() * 4);
  position_tables_.upload(tables.data(), tables.size() * 4);
}

UMT5EncoderCuda::UMT5EncoderCuda(const text_encoders::T5Config& config, uint64_t seed,
                                 const std::string& backend)
    : config_(config), backend_name_(backend) {
  check_supported();
  backend_ = make_backend(backend);
  const int64_t d = config_.d_model, inner = config_.inner_dim(), ff = config_.d_ff;
  auto random = [&](int64_t out, int64_t in) {
    DeviceBuffer buffer(size_t(out * in) * 2);
    fill_uniform_bf16(buffer.data(), out * in, seed++, 1.0f / std::sqrt(float(in)));
    weight_bytes_ += buffer.size();
    return buffer;
  };
  const std::vector<float> ones(size_t(d), 1.0f);
  auto norm = [&] {
    DeviceBuffer buffer(size_t(d) * 4);
    buffer.upload(ones.data(), size_t(d) * 4);
    weight_bytes_ += buffer.size();
    return buffer;
  };
  for (int64_t i = 0; i < config_.num_layers; ++i) {
    Layer layer;
    layer.attention_norm = norm();
    layer.ffn_norm = norm();
    layer.qkv = random(3 * inner, d);
    layer.o = random(d, inner);
    layer.wi = random(config_.gated ? 2 * ff : ff, d);
    layer.wo = random(d, ff);
    layers_.push_back(std::move(layer));
  }
  final_norm_ = norm();
  bias_layers_ = config_.per_layer_position_bias() ? config_.num_layers : 1;
  std::vector<float> tables(
      size_t(bias_layers_ * config_.relative_attention_num_buckets * config_.num_heads));
  for (size_t i = 0; i < tables.size(); ++i) tables[i] = float(int64_t(i * 7919 % 61) - 30) / 30;
  position_tables_ = DeviceBuffer(tables.size() * 4);
  position_tables_.upload(tables.data(), tables.size() * 4);
  MMGEN_CUDA_CHECK(cudaDeviceSynchronize());
}

UMT5EncoderCuda::~UMT5EncoderCuda() = default;

Tensor UMT5EncoderCuda::encode(const Tensor& embeddings,
                               const attention::paged::ForwardBatch& batch,
                               Timings* timings) const {
  const int64_t tokens = batch.num_tokens, d = config_.d_model, inner = config_.inner_dim(),
                ff = config_.d_ff, heads = config_.num_heads;
  check(embeddings.dim() == 2 && embeddings.size(0) == tokens && embeddings.size(1) == d &&
            tokens > 0,
        "GPU text encoder: embeddings {} should be [{}, {}]", shape_string(embeddings.shape()),
        tokens, d);
  const auto start = std::chrono::steady_clock::now();
  // The products run on `rows` rows, a multiple of 128 (whole tiles for cuBLASLt's kernels). The
  // extra rows are zeros (and stay finite: RMSNorm of a zero row is zero); attention and the
  // result see the real tokens only.
  const int64_t rows = (tokens + 127) / 128 * 128;
  const Tensor x_host = embeddings.to(DType::F32).contiguous();
  DeviceBuffer x(size_t(rows * d) * 4);
  MMGEN_CUDA_CHECK(cudaMemset(x.data(), 0, x.size()));
  x.upload(x_host.raw(), x_host.nbytes());

  // Each bias layer's [heads, 2S − 1] vector by key − query offset, expanded on the device.
  const int64_t max_len = std::max<int64_t>(1, batch.max_seq_len()), span = 2 * max_len - 1;
  std::vector<int32_t> buckets;
  for (int64_t b : text_encoders::t5_offset_buckets(max_len, config_.relative_attention_num_buckets,
                                                    config_.relative_attention_max_distance))
    buckets.push_back(int32_t(b));
  DeviceBuffer bucket_device(buckets.size() * 4), bias(size_t(bias_layers_ * heads * span) * 4);
  bucket_device.upload(buckets.data(), buckets.size() * 4);
  t5_expand_relative_bias(position_tables_.as<float>(), bucket_device.as<int32_t>(),
                          bias.as<float>(), bias_layers_, config_.relative_attention_num_buckets,
                          heads, span);

  backend_->init_forward_metadata(batch);
  cudaEvent_t compute_start = nullptr, compute_end = nullptr;
  if (timings) {
    MMGEN_CUDA_CHECK(cudaEventCreate(&compute_start));
    MMGEN_CUDA_CHECK(cudaEventCreate(&compute_end));
    MMGEN_CUDA_CHECK(cudaEventRecord(compute_start));
  }
  const int64_t wi_out = config_.gated ? 2 * ff : ff;
  const bool f32 = precision_ == EncoderPrecision::F32;
  const float eps = config_.layer_norm_epsilon;
  const size_t element = f32 ? 4 : 2;  // activations the products read
  DeviceBuffer normed(size_t(rows * d) * element), qkv(size_t(rows * 3 * inner) * element),
      attended(size_t(rows * inner) * element), projected(size_t(rows * d) * 4),
      gate_up(size_t(rows * wi_out) * 4), hidden(size_t(rows * ff) * element);
  // y[m, n] = x[m, k] · w[n, k]ᵀ: bf16 products with an fp32 or bf16 result, or float32 ones
  // (column-major for cuBLASLt: yᵀ = w · xᵀ).
  auto product = [&](const DeviceBuffer& in, const DeviceBuffer& w, DeviceBuffer& out, int64_t n,
                     int64_t k, bool f32_out) {
    if (f32)
      gemm_f32(true, false, n, rows, k, w.as<float>(), k, in.as<float>(), k, out.as<float>(), n,
               false);
    else
      linear_bf16(in.data(), w.data(), nullptr, out.data(), rows, n, k,
                  f32_out ? GemmOutput::F32 : GemmOutput::BF16);
  };
  auto rms_norm = [&](const DeviceBuffer& weight) {
    if (f32)
      t5_rms_norm_f32(x.as<float>(), normed.as<float>(), rows, d, weight.as<float>(), eps);
    else
      t5_rms_norm_bf16(x.as<float>(), normed.data(), rows, d, weight.as<float>(), eps);
  };
  MMGEN_CUDA_CHECK(cudaMemset(attended.data(), 0, attended.size()));  // rows attention skips
  const FfnActivation activation = ffn_activation(config_.activation);
  attention::paged::PagedLayer paged;
  paged.num_q_heads = paged.num_kv_heads = heads;
  paged.head_dim = config_.d_kv;
  paged.scaling = 1.0f;  // T5 folds 1/√d_kv into its initialisation: scores are raw q·k
  paged.type = attention::paged::AttentionType::EncoderOnly;
  const auto* qkv_bytes = static_cast<const char*>(qkv.data());
  for (size_t l = 0; l < layers_.size(); ++l) {
    const Layer& layer = layers_[l];
    rms_norm(layer.attention_norm);
    product(normed, layer.qkv, qkv, 3 * inner, d, false);
    paged::DeviceAttentionIo io;
    io.q = qkv_bytes;
    io.k = qkv_bytes + size_t(inner) * element;
    io.v = qkv_bytes + size_t(2 * inner) * element;
    io.q_stride = io.k_stride = io.v_stride = 3 * inner;
    io.out = attended.data();
    io.fp32 = f32;
    io.bias.values =
        bias.as<float>() + std::min<int64_t>(int64_t(l), bias_layers_ - 1) * heads * span;
    io.bias.max_len = max_len;
    paged.layer_id = int64_t(l);
    backend_->forward_extend(io, paged, batch, false);
    product(attended, layer.o, projected, d, inner, true);
    add_gated_f32(x.as<float>(), projected.as<float>(), rows, d, nullptr);

    rms_norm(layer.ffn_norm);
    product(normed, layer.wi, gate_up, wi_out, d, true);
    if (f32)
      t5_ffn_activation_f32(gate_up.as<float>(), hidden.as<float>(), rows, ff, activation,
                            config_.gated);
    else
      t5_ffn_activation(gate_up.as<float>(), hidden.data(), rows, ff, activation, config_.gated);
    product(hidden, layer.wo, projected, d, ff, true);
    add_gated_f32(x.as<float>(), projected.as<float>(), rows, d, nullptr);
  }
  t5_rms_norm_f32(x.as<float>(), projected.as<float>(), tokens, d, final_norm_.as<float>(), eps);
  if (timings) MMGEN_CUDA_CHECK(cudaEventRecord(compute_end));
  Tensor out = Tensor::empty({tokens, d});
  MMGEN_CUDA_CHECK(cudaDeviceSynchronize());
  projected.download(out.data<float>(), out.nbytes());
  if (timings) {
    float ms = 0;
    MMGEN_CUDA_CHECK(cudaEventElapsedTime(&ms, compute_start, compute_end));
    cudaEventDestroy(compute_start);
    cudaEventDestroy(compute_end);
    timings->compute_seconds = ms * 1e-3;
    timings->total_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  return out;
}

Tensor UMT5EncoderCuda::forward(const Tensor& input_ids, const Tensor& attention_mask) const {
  check(model_ != nullptr, "GPU text encoder: a random benchmark encoder has no token embedding");
  check(input_ids.dim() == 2, "text encoder: input_ids must be [batch, tokens], got {}",
        shape_string(input_ids.shape()));
  const int64_t batch_size = input_ids.size(0), length = input_ids.size(1);
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
  const Tensor embedded = model_->embed(input_ids.contiguous().view({batch_size * length}));
  return encode(embedded, batch).view({batch_size, length, config_.d_model});
}

std::vector<Tensor> UMT5EncoderCuda::forward_unpadded(
    const std::vector<std::vector<int64_t>>& prompts) const {
  check(model_ != nullptr, "GPU text encoder: a random benchmark encoder has no token embedding");
  std::vector<int64_t> lengths, packed;
  for (const auto& prompt : prompts) {
    check(!prompt.empty(), "text encoder: prompt {} has no tokens", lengths.size());
    lengths.push_back(int64_t(prompt.size()));
    packed.insert(packed.end(), prompt.begin(), prompt.end());
  }
  if (prompts.empty()) return {};
  const auto batch = attention::paged::ForwardBatch::encoder_only(lengths);
  const Tensor hidden =
      encode(model_->embed(Tensor::from_vector({int64_t(packed.size())}, packed)), batch);
  std::vector<Tensor> out;
  for (size_t i = 0; i < prompts.size(); ++i)
    out.push_back(hidden.slice(0, batch.extend_start_loc[i], batch.extend_start_loc[i] + lengths[i])
                      .contiguous());
  return out;
}

}  // namespace mmgen::cuda
