#include "models/dit/qwenimage/qwenimage_transformer.h"

#include <cmath>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/interrupt.h"
#include "core/ops.h"

namespace mmgen::dit {
namespace {

constexpr int64_t kQwenTimestepChannels = 256;
// txt_norm and norm_out are built with eps 1e-6.
constexpr float kQwenNormEps = 1e-6f;

QwenImageConfig validated(QwenImageConfig config) {
  config.validate("transformer config");
  return config;
}

// diffusers' Timesteps(256, flip_sin_to_cos=True, downscale_freq_shift=0, scale=1000) in float32
// as torch computes it: [cos(a_i)…, sin(a_i)…] with a_i = (t · f_i) · 1000 (the scale applies
// after the product, each rounded to float32) and f_i = exp(−ln(10000)·i / 128). Not
// timestep_sinusoid(t · 1000), whose roundings are FLUX's.
Tensor timestep_sinusoid_scaled(float timestep) {
  constexpr int64_t half = kQwenTimestepChannels / 2;
  std::vector<float> out(static_cast<size_t>(kQwenTimestepChannels));
  const float log_period = float(-std::log(10000.0));
  for (int64_t i = 0; i < half; ++i) {
    const float exponent = (log_period * float(i)) / float(half);
    const float frequency = std::exp(exponent);
    const float angle = (timestep * frequency) * 1000.0f;
    out[size_t(i)] = float(std::cos(double(angle)));
    out[size_t(half + i)] = float(std::sin(double(angle)));
  }
  return Tensor::from_vector({1, kQwenTimestepChannels}, out);
}

}  // namespace

QwenImageTransformer::QwenImageTransformer(QwenImageConfig config, WeightStore weights)
    : config_(validated(std::move(config))), weights_(std::move(weights)) {
  check_qwenimage_weights(weights_, config_);
  host_outer_ = QwenImageOuterWeights::load(weights_, config_);
}

QwenImageTransformer QwenImageTransformer::load(const fs::path& folder) {
  check(fs::is_directory(folder), "transformer folder {} does not exist", folder.string());
  QwenImageConfig config = QwenImageConfig::from_file(folder / "config.json");
  return QwenImageTransformer(std::move(config), WeightStore::open_folder(folder));
}

void QwenImageTransformer::list_parameters(const models::ParameterVisitor& visit) const {
  list_qwenimage_parameters(weights_, config_, visit);
}

void QwenImageTransformer::set_device(Device device, DType compute) {
  rope_cache_ = std::make_shared<FluxRopeCache>();
  models::move_resident(resident_, device, compute,
                        [&](Resident& next, const models::PlacementRule& rule) {
                          for (int64_t layer = 0; layer < config_.num_layers; ++layer)
                            next.blocks.push_back(models::placed_counted(
                                load_qwenimage_block(weights_, layer, config_), rule, next.bytes));
                          next.outer = models::placed_counted(host_outer_, rule, next.bytes);
                        });
}

QwenImageBlockWeights QwenImageTransformer::block(int64_t layer) const {
  if (resident_.device != Device::CPU) return resident_.blocks[size_t(layer)];
  return load_qwenimage_block(weights_, layer, config_);
}

Tensor QwenImageTransformer::conditioning(const QwenImageItem& item) const {
  const QwenImageOuterWeights& w = resident_.device == Device::CPU ? host_outer_ : resident_.outer;
  // TimestepEmbedding: linear_2(SiLU(linear_1(sinusoid))). SiLU runs on a float32 result on the
  // GPU (cuBLASLt's epilogue has only the tanh GELU).
  const Tensor input =
      timestep_sinusoid_scaled(item.timestep).to(resident_.compute).to(resident_.device);
  const Tensor hidden =
      ops::linear(input, w.time_1.weight, w.time_1.bias, DType::F32, Activation::Silu);
  Tensor temb =
      ops::linear(hidden.to(resident_.compute), w.time_2.weight, w.time_2.bias, DType::F32);
  // img_mod, txt_mod and norm_out all read SiLU(temb).
  ops::activate_(temb, Activation::Silu);
  return temb.to(resident_.compute);
}

std::vector<attention::StackTraits> QwenImageTransformer::attention_stacks() const {
  return {{.name = std::string(kQwenImageStack), .layers = config_.num_layers}};
}

std::vector<Tensor> QwenImageTransformer::forward(const std::vector<QwenImageItem>& batch,
                                                  const QwenImageStep& step,
                                                  attention::Layers* attention) const {
  check(!batch.empty(), "Qwen-Image transformer: empty batch");
  const QwenImageOuterWeights& outer =
      resident_.device == Device::CPU ? host_outer_ : resident_.outer;
  const int64_t dim = config_.dim();
  for (const QwenImageItem& item : batch) {
    const QwenImageShape& s = item.shape;
    check(item.image.dim() == 2 && item.image.size(1) == config_.in_channels &&
              item.image.size(0) == s.tokens() && s.tokens() > 0 && item.image.is_cpu(),
          "Qwen-Image transformer: packed latents must be [{} x {} x {} tokens, {}] on the host, "
          "got {}",
          s.frames, s.rows, s.columns, config_.in_channels, shape_string(item.image.shape()));
    check(item.text.dim() == 2 && item.text.size(1) == config_.joint_attention_dim &&
              item.text.size(0) > 0 && item.text.is_cpu(),
          "Qwen-Image transformer: text must be [tokens, {}] on the host, got {}",
          config_.joint_attention_dim, shape_string(item.text.shape()));
  }
  std::vector<Tensor> conditionings, texts, images;
  std::vector<FluxRopeTables> ropes;
  for (const QwenImageItem& item : batch) {
    conditionings.push_back(conditioning(item));
    const Tensor text = item.text.to(DType::F32).contiguous().to(resident_.device);
    const Tensor normed = ops::rms_norm(text, outer.text_norm, kQwenNormEps, resident_.compute);
    texts.push_back(ops::linear(normed, outer.text_in.weight, outer.text_in.bias, DType::F32));
    images.push_back(ops::linear(item.image.to(resident_.compute).contiguous().to(resident_.device),
                                 outer.image_in.weight, outer.image_in.bias, DType::F32));
    const QwenImageShape& s = item.shape;
    ropes.push_back(rope_cache_->tables({item.text.size(0), s.frames, s.rows, s.columns}, [&] {
      return qwenimage_rope_tables(config_, s, item.text.size(0), resident_.device);
    }));
  }

  attention::Call call;
  call.stack = kQwenImageStack;
  call.num_layers = config_.num_layers;
  call.step_index = step.index;
  call.num_steps = step.count;
  call.layers = attention;
  const int64_t count = int64_t(batch.size());
  // Each block's weights are read once for the whole batch.
  for (int64_t layer = 0; layer < config_.num_layers; ++layer) {
    stop_between_blocks("transformer blocks");  // Ctrl-C waits for one block, not the step
    const QwenImageBlockWeights w = block(layer);
    call.layer = layer;
    for (int64_t i = 0; i < count; ++i) {
      call.branch = i;                              // each item keeps its own layer states
      call.text_length = texts[size_t(i)].size(0);  // the sequence starts with them
      call.timestep = batch[size_t(i)].timestep;
      run_qwenimage_block(texts[size_t(i)], images[size_t(i)], w, conditionings[size_t(i)], config_,
                          ropes[size_t(i)], resident_.compute, call);
    }
  }

  // AdaLayerNormContinuous (1 + scale, shift) and the projection, on the image tokens.
  std::vector<Tensor> outputs;
  for (int64_t i = 0; i < count; ++i) {
    texts[size_t(i)] = Tensor();
    const Tensor mod = ops::linear(conditionings[size_t(i)], outer.norm_out.weight,
                                   outer.norm_out.bias, DType::F32)
                           .view({2, dim});
    const Tensor normed = ops::modulated_layer_norm(
        images[size_t(i)], mod.select(0, 1), mod.select(0, 0), kQwenNormEps, resident_.compute);
    outputs.push_back(ops::linear(normed, outer.proj_out.weight, outer.proj_out.bias, DType::F32)
                          .to(Device::CPU));
    images[size_t(i)] = Tensor();
  }
  return outputs;
}

}  // namespace mmgen::dit
