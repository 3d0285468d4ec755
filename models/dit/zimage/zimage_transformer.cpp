#include "models/dit/zimage/zimage_transformer.h"

#include <cstring>
#include <utility>

#include "attention/ulysses.h"
#include "core/error.h"
#include "core/interrupt.h"
#include "core/ops.h"
#include "models/dit/wan/wan_patchify.h"
#include "models/dit/zimage/zimage_block.h"
#include "models/dit/zimage/zimage_sequence.h"

namespace mmgen::dit {
namespace {

// The TimestepEmbedder's sinusoid width (diffusers' frequency_embedding_size).
constexpr int64_t kZImageTimestepChannels = 256;
// The final layer's LayerNorm eps (fixed in diffusers' FinalLayer, whatever norm_eps says).
constexpr float kFinalNormEps = 1e-6f;

ZImageConfig validated(ZImageConfig config) {
  config.validate("transformer config");
  return config;
}

// `parts` (each [rows, dim], on the device the model runs on) stacked, then `pad_rows` copies of
// `pad` ([dim] float32 on the host) appended: float32, assembled where the parts live (on the GPU
// by device copies; only the few pad rows come from the host).
Tensor assemble_rows(const std::vector<Tensor>& parts, int64_t pad_rows, const Tensor& pad) {
  const int64_t dim = parts.front().size(1);
  int64_t rows = pad_rows;
  for (const Tensor& part : parts) rows += part.size(0);
  Tensor out = Tensor::empty({rows, dim}, DType::F32, parts.front().device());
  int64_t row = 0;
  for (const Tensor& part : parts) {
    out.slice(0, row, row + part.size(0)).copy_from(part.contiguous());
    row += part.size(0);
  }
  if (pad_rows > 0) {
    Tensor padding = Tensor::empty({pad_rows, dim});
    for (int64_t r = 0; r < pad_rows; ++r)
      std::memcpy(padding.data<float>() + r * dim, pad.data<float>(), size_t(dim) * sizeof(float));
    out.slice(0, row, rows).copy_from(padding);
  }
  return out;
}

}  // namespace

std::vector<float> zimage_timestep_embedding(const ZImageOuterWeights& w,
                                             const ZImageConfig& config, float timestep) {
  // diffusers scales in float32 (t * t_scale on a float32 tensor) and builds the same [cos, sin]
  // sinusoid as Wan's time projection (max period 10000, no shift).
  const std::vector<float> sinusoid =
      timestep_sinusoid(timestep * config.t_scale, kZImageTimestepChannels);
  Tensor t = ops::linear(Tensor::from_vector({1, kZImageTimestepChannels}, sinusoid), w.t_1_weight,
                         w.t_1_bias, DType::F32, Activation::Silu);
  t = ops::linear(t, w.t_2_weight, w.t_2_bias);
  return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}

ZImageTransformer::ZImageTransformer(ZImageConfig config, WeightStore weights)
    : config_(validated(std::move(config))), weights_(std::move(weights)), rope_(config_) {
  check_zimage_checkpoint(weights_, config_);
  host_outer_ = ZImageOuterWeights::load(weights_, config_);
}

ZImageTransformer ZImageTransformer::load(const fs::path& folder) {
  check(fs::is_directory(folder), "transformer folder {} does not exist", folder.string());
  ZImageConfig config = ZImageConfig::from_file(folder / "config.json");
  return ZImageTransformer(std::move(config), WeightStore::open_folder(folder));
}

void ZImageTransformer::list_parameters(const models::ParameterVisitor& visit) const {
  list_zimage_parameters(weights_, config_, visit);
}

void ZImageTransformer::set_device(Device device, DType compute) {
  rope_cache_ = std::make_shared<RopeCache>();
  models::move_resident(
      resident_, device, compute, [&](Resident& next, const models::PlacementRule& rule) {
        // Loaded on the host block by block (float32), then uploaded in the dtype each op reads.
        const auto upload = [&](ZImageStage stage, int64_t count,
                                std::vector<ZImageBlockWeights>& to) {
          for (int64_t layer = 0; layer < count; ++layer) {
            const std::string prefix = zimage_block_prefix(zimage_stack_name(stage), layer);
            to.push_back(models::placed_counted(
                ZImageBlockWeights::load(weights_, prefix, config_,
                                         stage != ZImageStage::ContextRefiner),
                rule, next.bytes));
          }
        };
        upload(ZImageStage::NoiseRefiner, config_.n_refiner_layers, next.noise);
        upload(ZImageStage::ContextRefiner, config_.n_refiner_layers, next.context);
        upload(ZImageStage::Main, config_.n_layers, next.layers);
        next.outer = models::placed_counted(host_outer_, rule, next.bytes);

        // The modulated blocks' adaLN products, in the order the forward lists them.
        std::vector<const ZImageBlockWeights*> modulated;
        for (const auto* stack : {&next.noise, &next.layers})
          for (const ZImageBlockWeights& w : *stack) modulated.push_back(&w);
        const ZImageStackedModulation& stacked = next.stacked_modulation =
            stack_modulations(modulated, device, next.compute);
        next.bytes += stacked.weight.nbytes() + stacked.bias.nbytes() + stacked.norms.nbytes();
      });
}

ZImageBlockWeights ZImageTransformer::block_weights(ZImageStage stage, int64_t layer) const {
  if (resident_.device != Device::CPU) {
    const std::vector<ZImageBlockWeights>& resident =
        stage == ZImageStage::NoiseRefiner     ? resident_.noise
        : stage == ZImageStage::ContextRefiner ? resident_.context
                                               : resident_.layers;
    return resident[size_t(layer)];
  }
  return ZImageBlockWeights::load(weights_, zimage_block_prefix(zimage_stack_name(stage), layer),
                                  config_, stage != ZImageStage::ContextRefiner);
}

ZImageBlockWeights ZImageTransformer::modulation_weights(ZImageStage stage, int64_t layer) const {
  if (resident_.device != Device::CPU) return block_weights(stage, layer);
  return ZImageBlockWeights::load_modulation(weights_,
                                             zimage_block_prefix(zimage_stack_name(stage), layer),
                                             config_, stage != ZImageStage::ContextRefiner);
}

const ZImageTransformer::LayoutRope& ZImageTransformer::layout_rope(
    const ZImageLayout& layout) const {
  // A few layouts at most (a run's size; a prompt file may mix sizes): start over beyond that.
  constexpr size_t kMaxLayouts = 4;
  const std::array<int64_t, 4> key = {layout.grid[0], layout.grid[1], layout.grid[2],
                                      layout.caption_padded};
  std::lock_guard<std::mutex> lock(rope_cache_->mutex);
  auto& layouts = rope_cache_->layouts;
  if (auto found = layouts.find(key); found != layouts.end()) return found->second;
  if (layouts.size() >= kMaxLayouts) layouts.clear();
  const ZImagePositions image_ids = zimage_image_positions(layout);
  const ZImagePositions caption_ids = zimage_caption_positions(layout);
  ZImagePositions joint_ids = image_ids;
  joint_ids.insert(joint_ids.end(), caption_ids.begin(), caption_ids.end());
  LayoutRope tables{rope_.tables(image_ids, resident_.device),
                    rope_.tables(caption_ids, resident_.device),
                    rope_.tables(joint_ids, resident_.device)};
  return layouts.emplace(key, std::move(tables)).first->second;
}

std::vector<attention::StackTraits> ZImageTransformer::attention_stacks() const {
  std::vector<attention::StackTraits> stacks;
  for (const auto& [stage, layers] :
       {std::pair{ZImageStage::NoiseRefiner, config_.n_refiner_layers},
        std::pair{ZImageStage::ContextRefiner, config_.n_refiner_layers},
        std::pair{ZImageStage::Main, config_.n_layers}})
    stacks.push_back({.name = std::string(zimage_stack_name(stage)), .layers = layers});
  return stacks;
}

std::vector<Tensor> ZImageTransformer::forward(const std::vector<ZImageItem>& batch,
                                               const ZImageStep& step, attention::Layers* attention,
                                               dist::Communicator* sequence_group) const {
  check(!batch.empty(), "Z-Image transformer: empty batch");
  const int64_t count = int64_t(batch.size());
  const ZImageOuterWeights& outer = resident_.device == Device::CPU ? host_outer_ : resident_.outer;

  // Per item: layout, timestep embedding, the three RoPE tables, and the embedded image and
  // caption tokens with their padding.
  std::vector<ZImageLayout> layouts;
  std::vector<std::vector<float>> adaln;
  std::vector<ZImageRopeTables> image_rope, caption_rope, joint_rope;
  std::vector<Tensor> image, caption;
  for (const ZImageItem& item : batch) {
    check(item.caption.dim() == 2 && item.caption.size(1) == config_.cap_feat_dim,
          "Z-Image transformer: a caption must be [tokens, {}], got {}", config_.cap_feat_dim,
          shape_string(item.caption.shape()));
    check(item.latents.defined() && item.caption.is_cpu() && item.latents.is_cpu(),
          "Z-Image transformer: latents and captions are read from the host");
    const ZImageLayout layout = zimage_layout(config_, item.latents.shape(), item.caption.size(0));
    layouts.push_back(layout);
    adaln.push_back(zimage_timestep_embedding(host_outer_, config_, item.timestep));

    const LayoutRope& rope = layout_rope(layout);
    image_rope.push_back(rope.image);
    caption_rope.push_back(rope.caption);
    joint_rope.push_back(rope.joint);

    const Tensor patches = zimage_patchify(item.latents, config_, layout);
    const Tensor embedded = ops::linear(patches.to(resident_.compute).to(resident_.device),
                                        outer.x_embed_weight, outer.x_embed_bias);
    image.push_back(assemble_rows({embedded}, layout.image_padded - layout.image_tokens,
                                  host_outer_.x_pad_token));
    const Tensor normed =
        ops::rms_norm(item.caption.to(DType::F32).contiguous().to(resident_.device), outer.cap_norm,
                      config_.norm_eps, resident_.compute);
    const Tensor text = ops::linear(normed, outer.cap_embed_weight, outer.cap_embed_bias);
    caption.push_back(assemble_rows({text}, layout.caption_padded - layout.caption_tokens,
                                    host_outer_.cap_pad_token));
  }

  attention::Call call;
  call.step_index = step.index;
  call.num_steps = step.count;
  call.layers = attention;
  // Every block's modulation for every item, before any block runs: the read-back of the
  // products stays out of the stream of block kernels (which then queue without a host round
  // trip between blocks). Blocks listed noise refiner, context refiner, main: the stacked
  // product's order with the unmodulated context refiner left out.
  std::vector<ZImageBlockWeights> listed;
  for (const auto& [stage, layers] :
       {std::pair{ZImageStage::NoiseRefiner, config_.n_refiner_layers},
        std::pair{ZImageStage::ContextRefiner, config_.n_refiner_layers},
        std::pair{ZImageStage::Main, config_.n_layers}})
    for (int64_t layer = 0; layer < layers; ++layer)
      listed.push_back(modulation_weights(stage, layer));
  const size_t refiners = size_t(config_.n_refiner_layers);
  std::vector<std::vector<ZImageModulation>> noise_modulation(refiners),
      context_modulation(refiners), main_modulation(size_t(config_.n_layers));
  for (int64_t i = 0; i < count; ++i) {
    const std::vector<ZImageModulation> all = zimage_modulations(
        listed, adaln[size_t(i)], resident_.device,
        resident_.stacked_modulation.weight.defined() ? &resident_.stacked_modulation : nullptr);
    for (size_t b = 0; b < all.size(); ++b) {
      auto& stack = b < refiners       ? noise_modulation[b]
                    : b < 2 * refiners ? context_modulation[b - refiners]
                                       : main_modulation[b - 2 * refiners];
      stack.push_back(all[b]);
    }
  }

  // Runs one stack over every item, each block's weights loaded once for the whole batch.
  const auto run_stack = [&](ZImageStage stage, int64_t layers, std::vector<Tensor>& streams,
                             const std::vector<ZImageRopeTables>& rope,
                             const std::vector<std::vector<ZImageModulation>>& modulation,
                             const std::vector<attention::SequenceParallel>& sequence) {
    call.stack = zimage_stack_name(stage);
    call.num_layers = layers;
    // Each item's next attention input, returned by the block before it (its last residual
    // update and the next pre-norm in one pass).
    std::vector<Tensor> normed(static_cast<size_t>(count));
    for (int64_t layer = 0; layer < layers; ++layer) {
      stop_between_blocks("transformer blocks");  // Ctrl-C waits for one block, not the step
      call.layer = layer;
      const ZImageBlockWeights weights = block_weights(stage, layer);
      for (int64_t i = 0; i < count; ++i) {
        call.branch = i;  // each item keeps its own layer states
        call.sequence = sequence.empty() ? nullptr : &sequence[size_t(i)];
        call.timestep = batch[size_t(i)].timestep;
        call.grid = stage == ZImageStage::ContextRefiner ? std::array<int64_t, 3>{0, 0, 0}
                                                         : layouts[size_t(i)].grid;
        // The tokens after the image grid: its padding and then the caption (main blocks), or
        // the whole caption (context refiner), which is where backends expect text.
        const int64_t whole =
            call.sequence ? call.sequence->shards.total() : streams[size_t(i)].size(0);
        call.text_length = whole - call.grid[0] * call.grid[1] * call.grid[2];
        const Tensor next_norm =
            layer + 1 < layers ? modulation[size_t(layer + 1)][size_t(i)].attention_norm : Tensor();
        normed[size_t(i)] = run_zimage_block(
            streams[size_t(i)], weights, modulation[size_t(layer)][size_t(i)], config_,
            rope[size_t(i)], resident_.compute, call, std::move(normed[size_t(i)]), next_norm);
      }
    }
  };
  // Sequence parallel: each item's rows split over the group, with their rows of the RoPE tables.
  const auto shard = [&](std::vector<Tensor>& streams, std::vector<ZImageRopeTables>& rope) {
    std::vector<attention::SequenceParallel> sequence;
    if (!sequence_group) return sequence;
    for (int64_t i = 0; i < count; ++i) {
      Tensor& stream = streams[size_t(i)];
      attention::SequenceParallel part{
          sequence_group, dist::SequenceShards::balanced(stream.size(0), sequence_group->size())};
      const int64_t start = part.offset(), end = start + part.rows();
      stream = stream.slice(0, start, end).contiguous();
      rope[size_t(i)] = {rope[size_t(i)].cos.slice(0, start, end),
                         rope[size_t(i)].sin.slice(0, start, end)};
      sequence.push_back(std::move(part));
    }
    return sequence;
  };
  // Every rank's rows back into the whole stream [tokens, features].
  const auto gather = [&](const Tensor& rows, const attention::SequenceParallel& part) {
    return attention::gather_sequence(rows.contiguous().view({1, rows.size(0), rows.size(1)}),
                                      part.shards, *part.group)
        .view({part.shards.total(), rows.size(1)});
  };
  const std::vector<attention::SequenceParallel> image_sequence = shard(image, image_rope);
  run_stack(ZImageStage::NoiseRefiner, config_.n_refiner_layers, image, image_rope,
            noise_modulation, image_sequence);
  for (size_t i = 0; i < image_sequence.size(); ++i) image[i] = gather(image[i], image_sequence[i]);
  run_stack(ZImageStage::ContextRefiner, config_.n_refiner_layers, caption, caption_rope,
            context_modulation, {});
  std::vector<Tensor> joint;
  for (int64_t i = 0; i < count; ++i) {
    joint.push_back(assemble_rows({image[size_t(i)], caption[size_t(i)]}, 0, Tensor()));
    image[size_t(i)] = caption[size_t(i)] = Tensor();
  }
  const std::vector<attention::SequenceParallel> joint_sequence = shard(joint, joint_rope);
  run_stack(ZImageStage::Main, config_.n_layers, joint, joint_rope, main_modulation,
            joint_sequence);

  // Final layer: LayerNorm (no affine) scaled by 1 + adaLN(SiLU(t)), projection, unpatchify of
  // the image tokens.
  std::vector<Tensor> outputs;
  const Tensor no_shift = Tensor::zeros({config_.dim}).to(resident_.device);
  for (int64_t i = 0; i < count; ++i) {
    std::vector<float> activated = adaln[size_t(i)];
    Tensor scale = Tensor::from_vector({1, int64_t(activated.size())}, activated);
    ops::silu_(scale);
    scale = ops::linear(scale, host_outer_.final_mod_weight, host_outer_.final_mod_bias);
    float* s = scale.data<float>();
    for (int64_t c = 0; c < config_.dim; ++c) s[c] += 1.0f;
    const Tensor normed = ops::modulated_layer_norm(joint[size_t(i)], no_shift,
                                                    scale.view({config_.dim}).to(resident_.device),
                                                    kFinalNormEps, resident_.compute);
    joint[size_t(i)] = Tensor();
    const int64_t image_tokens = layouts[size_t(i)].image_tokens;
    // Under sequence parallel every row of this rank's shard is projected (a product's rows do
    // not depend on each other) and the ranks' rows gathered before the image's are kept.
    const Tensor rows =
        joint_sequence.empty()
            ? ops::linear(normed.slice(0, 0, image_tokens), outer.final_weight, outer.final_bias)
                  .to(Device::CPU)
            : gather(ops::linear(normed, outer.final_weight, outer.final_bias),
                     joint_sequence[size_t(i)])
                  .slice(0, 0, image_tokens)
                  .to(Device::CPU);
    outputs.push_back(zimage_unpatchify(rows, config_, layouts[size_t(i)]));
  }
  return outputs;
}

}  // namespace mmgen::dit
