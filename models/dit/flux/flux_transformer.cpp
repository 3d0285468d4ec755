#include "models/dit/flux/flux_transformer.h"

#include <utility>

#include "core/error.h"
#include "core/interrupt.h"
#include "core/ops.h"
#include "models/dit/flux/flux_block.h"
#include "models/dit/wan/wan_patchify.h"

namespace mmgen::dit {
namespace {

// diffusers' Timesteps(256, flip_sin_to_cos=True, downscale_freq_shift=0) for the timestep and
// the guidance alike.
constexpr int64_t kFluxTimestepChannels = 256;
constexpr float kFluxNormEps = 1e-6f;

FluxConfig validated(FluxConfig config) {
  config.validate("transformer config");
  return config;
}

// linear_2(SiLU(linear_1(x))) of a [1, in] row, float32 on the weights' device.
Tensor embed(const Tensor& x, const FluxLinear& first, const FluxLinear& second, DType compute) {
  const Tensor input = x.to(first.weight.is_cpu() ? DType::F32 : compute).to(first.weight.device());
  // SiLU runs on a float32 result on the GPU (cuBLASLt's epilogue has only the tanh GELU).
  const Tensor hidden = ops::linear(input, first.weight, first.bias, DType::F32, Activation::Silu);
  return ops::linear(hidden.to(input.dtype()), second.weight, second.bias, DType::F32);
}

}  // namespace

FluxTransformer::FluxTransformer(FluxConfig config, WeightStore weights)
    : config_(validated(std::move(config))), weights_(std::move(weights)) {
  check_flux_weights(weights_, config_);
  host_outer_ = FluxOuterWeights::load(weights_, config_);
}

FluxTransformer FluxTransformer::load(const fs::path& folder) {
  check(fs::is_directory(folder), "transformer folder {} does not exist", folder.string());
  FluxConfig config = FluxConfig::from_file(folder / "config.json");
  return FluxTransformer(std::move(config), WeightStore::open_folder(folder));
}

void FluxTransformer::list_parameters(const models::ParameterVisitor& visit) const {
  list_flux_parameters(weights_, config_, visit);
}

void FluxTransformer::set_device(Device device, DType compute) {
  rope_cache_ = std::make_shared<FluxRopeCache>();
  models::move_resident(
      resident_, device, compute, [&](Resident& next, const models::PlacementRule& rule) {
        for (int64_t layer = 0; layer < config_.num_layers; ++layer)
          next.double_blocks.push_back(models::placed_counted(
              load_flux_double_block(weights_, layer, config_), rule, next.bytes));
        for (int64_t layer = 0; layer < config_.num_single_layers; ++layer)
          next.single_blocks.push_back(models::placed_counted(
              FluxSingleBlockWeights::load(weights_, layer, config_), rule, next.bytes));
        next.outer = models::placed_counted(host_outer_, rule, next.bytes);
      });
}

FluxDoubleBlockWeights FluxTransformer::double_block(int64_t layer) const {
  if (resident_.device != Device::CPU) return resident_.double_blocks[size_t(layer)];
  return load_flux_double_block(weights_, layer, config_);
}

FluxSingleBlockWeights FluxTransformer::single_block(int64_t layer) const {
  if (resident_.device != Device::CPU) return resident_.single_blocks[size_t(layer)];
  return FluxSingleBlockWeights::load(weights_, layer, config_);
}

Tensor FluxTransformer::conditioning(const FluxItem& item) const {
  const FluxOuterWeights& w = resident_.device == Device::CPU ? host_outer_ : resident_.outer;
  // The model scales in float32 (timestep.to(dtype) * 1000), which is not always the scheduler's
  // timestep again after the pipeline's division.
  const auto sinusoid = [](float value) {
    return Tensor::from_vector({1, kFluxTimestepChannels},
                               timestep_sinusoid(value * 1000.0f, kFluxTimestepChannels));
  };
  Tensor temb = embed(sinusoid(item.timestep), w.time_1, w.time_2, resident_.compute);
  if (config_.guidance_embeds)
    ops::add_(temb, embed(sinusoid(item.guidance), w.guidance_1, w.guidance_2, resident_.compute));
  ops::add_(temb, embed(item.pooled.to(DType::F32).contiguous().view({1, -1}), w.text_1, w.text_2,
                        resident_.compute));
  ops::activate_(temb, Activation::Silu);
  return temb.to(resident_.compute);
}

std::vector<attention::StackTraits> FluxTransformer::attention_stacks() const {
  return {{.name = std::string(kFluxDoubleStack), .layers = config_.num_layers},
          {.name = std::string(kFluxSingleStack), .layers = config_.num_single_layers}};
}

std::vector<Tensor> FluxTransformer::forward(const std::vector<FluxItem>& batch,
                                             const FluxStep& step,
                                             attention::Layers* attention) const {
  check(!batch.empty(), "FLUX transformer: empty batch");
  const FluxOuterWeights& outer = resident_.device == Device::CPU ? host_outer_ : resident_.outer;
  const int64_t dim = config_.dim();
  for (const FluxItem& item : batch) {
    check(item.image.dim() == 2 && item.image.size(1) == config_.in_channels &&
              item.image.size(0) == item.rows * item.columns && item.image.is_cpu(),
          "FLUX transformer: packed latents must be [{} x {} tokens, {}] on the host, got {}",
          item.rows, item.columns, config_.in_channels, shape_string(item.image.shape()));
    check(item.text.dim() == 2 && item.text.size(1) == config_.joint_attention_dim &&
              item.text.size(0) > 0 && item.text.is_cpu(),
          "FLUX transformer: text must be [tokens, {}] on the host, got {}",
          config_.joint_attention_dim, shape_string(item.text.shape()));
    check(item.pooled.numel() == config_.pooled_projection_dim && item.pooled.is_cpu(),
          "FLUX transformer: pooled text must hold {} values on the host, got {}",
          config_.pooled_projection_dim, shape_string(item.pooled.shape()));
  }
  std::vector<Tensor> conditionings, texts, images;
  std::vector<FluxRopeTables> ropes;
  for (const FluxItem& item : batch) {
    conditionings.push_back(conditioning(item));
    const auto embedded = [&](const Tensor& x, const FluxLinear& embedder) {
      return ops::linear(x.to(resident_.compute).contiguous().to(resident_.device), embedder.weight,
                         embedder.bias, DType::F32);
    };
    texts.push_back(embedded(item.text, outer.context_embedder));
    images.push_back(embedded(item.image, outer.x_embedder));
    ropes.push_back(rope_cache_->tables({item.text.size(0), item.rows, item.columns, 0}, [&] {
      FluxPositions positions = flux_text_positions(item.text.size(0));
      const FluxPositions image_positions = flux_image_positions(item.rows, item.columns);
      positions.insert(positions.end(), image_positions.begin(), image_positions.end());
      return flux_rope_tables(config_, positions, resident_.device);
    }));
  }

  attention::Call call;
  call.step_index = step.index;
  call.num_steps = step.count;
  call.layers = attention;
  const int64_t count = int64_t(batch.size());
  // Each block's weights are read once for the whole batch.
  call.stack = kFluxDoubleStack;
  call.num_layers = config_.num_layers;
  for (int64_t layer = 0; layer < config_.num_layers; ++layer) {
    stop_between_blocks("transformer blocks");  // Ctrl-C waits for one block, not the step
    const FluxDoubleBlockWeights w = double_block(layer);
    call.layer = layer;
    for (int64_t i = 0; i < count; ++i) {
      call.branch = i;                              // each item keeps its own layer states
      call.text_length = texts[size_t(i)].size(0);  // the sequence starts with them
      call.timestep = batch[size_t(i)].timestep;
      run_flux_double_block(texts[size_t(i)], images[size_t(i)], w, conditionings[size_t(i)],
                            config_, ropes[size_t(i)], resident_.compute, call);
    }
  }
  std::vector<Tensor> joints;
  for (int64_t i = 0; i < count; ++i) {
    joints.push_back(mmdit_stack_rows({texts[size_t(i)], images[size_t(i)]}));
    texts[size_t(i)] = images[size_t(i)] = Tensor();
  }
  call.stack = kFluxSingleStack;
  call.num_layers = config_.num_single_layers;
  for (int64_t layer = 0; layer < config_.num_single_layers; ++layer) {
    stop_between_blocks("transformer blocks");  // Ctrl-C waits for one block, not the step
    const FluxSingleBlockWeights w = single_block(layer);
    call.layer = layer;
    for (int64_t i = 0; i < count; ++i) {
      call.branch = i;
      call.text_length = batch[size_t(i)].text.size(0);
      call.timestep = batch[size_t(i)].timestep;
      run_flux_single_block(joints[size_t(i)], w, conditionings[size_t(i)], config_,
                            ropes[size_t(i)], resident_.compute, call);
    }
  }

  // AdaLayerNormContinuous (1 + scale, shift) and the projection, on the image tokens.
  std::vector<Tensor> outputs;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t text_tokens = batch[size_t(i)].text.size(0);
    const Tensor image = joints[size_t(i)].slice(0, text_tokens, joints[size_t(i)].size(0));
    const Tensor mod = ops::linear(conditionings[size_t(i)], outer.norm_out.weight,
                                   outer.norm_out.bias, DType::F32)
                           .view({2, dim});
    const Tensor normed = ops::modulated_layer_norm(image, mod.select(0, 1), mod.select(0, 0),
                                                    kFluxNormEps, resident_.compute);
    outputs.push_back(ops::linear(normed, outer.proj_out.weight, outer.proj_out.bias, DType::F32)
                          .to(Device::CPU));
    joints[size_t(i)] = Tensor();
  }
  return outputs;
}

}  // namespace mmgen::dit
