#include "models/dit/wan/wan_transformer.h"

#include <algorithm>
#include <tuple>
#include <utility>
#include <vector>

#include "attention/ulysses.h"
#include "core/error.h"
#include "core/interrupt.h"
#include "core/op_profile.h"
#include "core/ops.h"
#include "models/dit/wan/wan_patchify.h"
#include "models/dit/wan/wan_weights.h"

namespace mmgen::dit {
namespace {

WanTransformerConfig validated(WanTransformerConfig config) {
  config.validate("transformer config");
  return config;
}

}  // namespace

TimeEmbedderWeights TimeEmbedderWeights::shaped(const WanTransformerConfig& config) {
  TimeEmbedderWeights w;
  w.dim = config.inner_dim();
  w.freq_dim = config.freq_dim;
  return w;
}

TimeEmbedderWeights TimeEmbedderWeights::load(const WeightStore& store,
                                              const WanTransformerConfig& config) {
  return models::loaded(shaped(config), store);
}

void TimeEmbedderWeights::parameters(const models::ParameterVisitor& visit) {
  const std::string time = "condition_embedder.time_embedder.";
  const std::string projection = "condition_embedder.time_proj.";
  for (auto [name, tensor, shape] :
       {std::tuple{time + "linear_1.weight", &linear_1_weight, Shape{dim, freq_dim}},
        {time + "linear_1.bias", &linear_1_bias, Shape{dim}},
        {time + "linear_2.weight", &linear_2_weight, Shape{dim, dim}},
        {time + "linear_2.bias", &linear_2_bias, Shape{dim}},
        {projection + "weight", &proj_weight, Shape{6 * dim, dim}},
        {projection + "bias", &proj_bias, Shape{6 * dim}}})
    visit({name, *tensor, models::Role::Float32, shape});
}

TimeConditioning time_conditioning(const TimeEmbedderWeights& w, const WanTransformerConfig& config,
                                   float timestep) {
  MMGEN_PROFILE("wan: time branch");
  const int64_t dim = config.inner_dim();
  TimeConditioning result;
  const std::vector<float> sinusoid = timestep_sinusoid(timestep, config.freq_dim);
  Tensor t = Tensor::from_vector({1, config.freq_dim}, sinusoid).to(w.linear_1_weight.device());
  t = ops::linear(t, w.linear_1_weight, w.linear_1_bias);
  ops::silu_(t);
  Tensor temb = ops::linear(t, w.linear_2_weight, w.linear_2_bias);
  Tensor activated = temb.clone();
  ops::silu_(activated);
  const Tensor proj = ops::linear(activated, w.proj_weight, w.proj_bias).to(Device::CPU);
  temb = temb.to(Device::CPU);
  result.temb.assign(temb.data<float>(), temb.data<float>() + dim);
  result.timestep_proj.assign(proj.data<float>(), proj.data<float>() + 6 * dim);
  return result;
}

WanTransformer::WanTransformer(WanTransformerConfig config, WeightStore weights)
    : config_(validated(std::move(config))),
      weights_(with_diffusers_names(weights)),
      rope_(config_.attention_head_dim, config_.rope_max_seq_len) {
  models::expect_checkpoint(TimeEmbedderWeights::shaped(config_), weights_, "", kWanCheckpoint);
  models::expect_checkpoint(OuterWeights::shaped(config_), weights_, "", kWanCheckpoint);
  for (int64_t layer = 0; layer < config_.num_layers; ++layer)
    check_block_weights(weights_, layer, config_);
  host_time_ = TimeEmbedderWeights::load(weights_, config_);
}

WanTransformer WanTransformer::load(const fs::path& folder) {
  check(fs::is_directory(folder), "transformer folder {} does not exist", folder.string());
  WanTransformerConfig config = WanTransformerConfig::from_file(folder / "config.json");
  return WanTransformer(std::move(config), WeightStore::open_folder(folder));
}

void WanTransformer::list_parameters(const models::ParameterVisitor& visit) const {
  TimeEmbedderWeights::load(weights_, config_).parameters(visit);
  for (int64_t layer = 0; layer < config_.num_layers; ++layer)
    WanBlockWeights::load(weights_, layer, config_)
        .parameters(models::nested(visit, "blocks." + std::to_string(layer) + "."));
  host_outer_weights().parameters(visit);
}

void WanTransformer::set_device(Device device, DType compute, bool fp8_products,
                                bool stream_blocks) {
  rope_grid_ = {-1, -1, -1};
  // The CPU's copy of the time branch, for a forward there (and for a failed move, which leaves
  // the model on the CPU).
  if (!host_time_.linear_1_weight.defined())
    host_time_ = TimeEmbedderWeights::load(weights_, config_);
  check(!fp8_products || device == Device::CUDA,
        "FP8 products run on the GPU; the CPU transformer computes in float32");
  check(!stream_blocks || device == Device::CUDA,
        "streaming the blocks is for the GPU; on the CPU they are read from the checkpoint as the "
        "forward goes");
  models::move_resident(resident_, device, compute,
                        [&](Resident& next, const models::PlacementRule& rule) {
                          place_resident(next, rule, fp8_products, stream_blocks);
                        });
  if (resident_.device != Device::CPU) host_time_ = {};  // the GPU holds it now
}

void WanTransformer::place_resident(Resident& next, const models::PlacementRule& plain,
                                    bool fp8_products, bool stream_blocks) const {
  const Device device = plain.device;
  next.block_inputs = fp8_products ? DType::F8E4M3Rows : next.compute;
  next.time = models::placed_counted(host_time_, plain, next.bytes);
  // Loaded on the host block by block (float32), then uploaded in the dtype each op reads; a GGUF
  // matrix stays its blocks. Streamed blocks are placed the same way, then kept in page-locked
  // host memory (the GPU's bytes) with only their modulation tables here.
  const models::PlacementRule blocks{device, next.compute, fp8_products,
                                     /*keep_quantized_blocks=*/true};
  if (stream_blocks) next.stream = std::make_shared<WeightStream>();
  for (int64_t layer = 0; layer < config_.num_layers; ++layer) {
    WanBlockWeights placed = WanBlockWeights::load(weights_, layer, config_).placed(blocks);
    if (next.stream) {
      std::vector<Tensor> tensors;
      for (Tensor* t : placed.device_tensors()) {
        tensors.push_back(*t);
        *t = Tensor();
      }
      next.stream->add_group(tensors);
    } else {
      next.bytes += models::parameter_bytes(placed, device);
    }
    next.blocks.push_back(placed);
  }
  if (next.stream) next.bytes += next.stream->slot_size() * 2;  // the two slots the blocks visit
  next.outer = models::placed_counted(host_outer_weights(), plain, next.bytes);
}

uint64_t WanTransformer::gpu_weight_bytes(const WanTransformerConfig& config, bool fp8_products,
                                          bool stream_blocks, const WeightStore* store) {
  // As place_resident() uploads them: the time embedder in float32 (as loaded), the outer products
  // and their biases in bf16 (the patch and output biases float32), each block's tensors as
  // WanBlockWeights::gpu_tensor_bytes gives them (its modulation table stays on the host): all
  // of them resident, or two slots of one block laid out as the weight stream lays them out.
  const uint64_t d = uint64_t(config.inner_dim());
  const uint64_t patch = uint64_t(config.patch_volume()), kF32 = 4, kBf16 = 2;
  const uint64_t time = (d * uint64_t(config.freq_dim) + d + d * d + d + 6 * d * d + 6 * d) * kF32;
  uint64_t blocks = 0, slot = 0;
  for (int64_t layer = 0; layer < config.num_layers; ++layer) {
    uint64_t layer_slot = 0;
    for (const uint64_t bytes :
         WanBlockWeights::gpu_tensor_bytes(config, fp8_products, store, layer)) {
      blocks += bytes;
      layer_slot = (layer_slot + 255) / 256 * 256 + bytes;
    }
    slot = std::max(slot, layer_slot);
  }
  const uint64_t outer = d * uint64_t(config.in_channels) * patch * kBf16 + d * kF32 +
                         (d * uint64_t(config.text_dim) + d + d * d + d) * kBf16 +
                         uint64_t(config.out_channels) * patch * (d * kBf16 + kF32);
  if (stream_blocks) return time + (config.num_layers > 0 ? 2 * slot : 0) + outer;
  return time + blocks + outer;
}

WanTransformer::OuterWeights WanTransformer::OuterWeights::shaped(
    const WanTransformerConfig& config) {
  OuterWeights w;
  const auto [pt, ph, pw] = config.patch_size;
  w.patch_shape = {config.inner_dim(), config.in_channels, pt, ph, pw};
  w.text_dim = config.text_dim;
  w.out_dim = config.out_channels * config.patch_volume();
  return w;
}

void WanTransformer::OuterWeights::parameters(const models::ParameterVisitor& visit) {
  using models::Role;
  const int64_t dim = patch_shape[0];
  const std::string text = "condition_embedder.text_embedder.";
  // A Conv3d with kernel = stride = patch is a linear layer over the flattened patches.
  visit({"patch_embedding.weight", patch_weight, Role::Product, patch_shape});
  visit({"patch_embedding.bias", patch_bias, Role::Float32, {dim}});
  visit({text + "linear_1.weight", text_1_weight, Role::Product, {dim, text_dim}});
  visit({text + "linear_1.bias", text_1_bias, Role::Compute, {dim}});
  visit({text + "linear_2.weight", text_2_weight, Role::Product, {dim, dim}});
  visit({text + "linear_2.bias", text_2_bias, Role::Compute, {dim}});
  visit({"proj_out.weight", proj_weight, Role::Product, {out_dim, dim}});
  visit({"proj_out.bias", proj_bias, Role::Float32, {out_dim}});
  visit({"scale_shift_table", head_table, Role::Host, {1, 2, dim}});
}

WanTransformer::OuterWeights WanTransformer::host_outer_weights() const {
  OuterWeights w = models::loaded(OuterWeights::shaped(config_), weights_);
  w.patch_weight = w.patch_weight.view({config_.inner_dim(), -1});
  return w;
}

WanTransformer::OuterWeights WanTransformer::outer_weights() const {
  return resident_.device == Device::CPU ? host_outer_weights() : resident_.outer;
}

WanBlockWeights WanTransformer::block_weights(int64_t layer) const {
  if (resident_.stream) {
    WanBlockWeights visiting = resident_.blocks[size_t(layer)];
    const std::vector<Tensor> tensors = resident_.stream->acquire(layer);
    const std::vector<Tensor*> fields = visiting.device_tensors();
    for (size_t i = 0; i < fields.size(); ++i) *fields[i] = tensors[i];
    return visiting;
  }
  if (resident_.device != Device::CPU) return resident_.blocks[size_t(layer)];
  MMGEN_PROFILE("wan: block weights");
  return WanBlockWeights::load(weights_, layer, config_);
}

void WanTransformer::release_block(int64_t layer) const {
  if (resident_.stream) resident_.stream->release(layer);
}

const WanRopeTables& WanTransformer::rope_tables(int64_t grid_t, int64_t grid_h,
                                                 int64_t grid_w) const {
  if (rope_grid_ != std::array<int64_t, 3>{grid_t, grid_h, grid_w}) {
    std::vector<float> cos, sin;
    rope_.pair_tables(grid_t, grid_h, grid_w, cos, sin);
    const Shape shape = {grid_t * grid_h * grid_w, config_.attention_head_dim / 2};
    rope_tables_.cos = Tensor::from_vector(shape, cos).to(resident_.device);
    rope_tables_.sin = Tensor::from_vector(shape, sin).to(resident_.device);
    rope_grid_ = {grid_t, grid_h, grid_w};
  }
  return rope_tables_;
}

std::vector<attention::StackTraits> WanTransformer::attention_stacks() const {
  return {{.name = std::string(kWanSelfStack),
           .layers = config_.num_layers,
           .kind = attention::LayerKind::SelfAttention,
           .video_tokens_only = true,
           .block_prefix = "blocks."},
          {.name = std::string(kWanCrossStack),
           .layers = config_.num_layers,
           .kind = attention::LayerKind::CrossAttention}};
}

Tensor WanTransformer::forward(const Tensor& latents, float timestep, const Tensor& text_embeds,
                               const WanStep& step, attention::Layers* attention,
                               const attention::SequenceParallel* sequence) const {
  MMGEN_PROFILE("wan transformer (outside ops)");
  const auto [pt, ph, pw] = config_.patch_size;
  check(latents.dim() == 5 && latents.size(1) == config_.in_channels,
        "transformer: latents must be [batch, {}, frames, height, width], got {}",
        config_.in_channels, shape_string(latents.shape()));
  check(latents.size(2) % pt == 0 && latents.size(3) % ph == 0 && latents.size(4) % pw == 0,
        "transformer: latent size {}x{}x{} is not divisible by the patch size {}x{}x{}",
        latents.size(2), latents.size(3), latents.size(4), pt, ph, pw);
  check(latents.numel() > 0, "transformer: empty latents {}", shape_string(latents.shape()));
  const int64_t batch = latents.size(0);
  check(text_embeds.dim() == 3 && text_embeds.size(0) == batch &&
            text_embeds.size(2) == config_.text_dim && text_embeds.size(1) > 0,
        "transformer: text embeddings must be [{}, tokens, {}], got {}", batch, config_.text_dim,
        shape_string(text_embeds.shape()));
  const PatchGrid grid{latents.size(2) / pt, latents.size(3) / ph, latents.size(4) / pw};
  check(grid.t <= config_.rope_max_seq_len && grid.h <= config_.rope_max_seq_len &&
            grid.w <= config_.rope_max_seq_len,
        "transformer: latent grid {}x{}x{} exceeds rope_max_seq_len {}; use a smaller size", grid.t,
        grid.h, grid.w, config_.rope_max_seq_len);
  const int64_t dim = config_.inner_dim();

  // The time branch on the host (float32), then every block's modulation where the model runs:
  // (shift, scale, gate, ffn shift, ffn scale, ffn gate) = scale_shift_table + timestep_proj,
  // with 1 added to the scales; the output head's (shift, scale) = its table + temb.
  const TimeConditioning time = time_conditioning(
      resident_.device == Device::CPU ? host_time_ : resident_.time, config_, timestep);
  Tensor modulation = Tensor::empty({config_.num_layers, 6, dim});
  for (int64_t layer = 0; layer < config_.num_layers; ++layer) {
    const Tensor table = resident_.device == Device::CPU
                             ? ops::weight_to_f32(weights_.get("blocks." + std::to_string(layer) +
                                                               ".scale_shift_table"))
                             : resident_.blocks[size_t(layer)].modulation;
    float* out = modulation.data<float>() + layer * 6 * dim;
    for (int64_t i = 0; i < 6 * dim; ++i) {
      out[i] = table.data<float>()[i] + time.timestep_proj[size_t(i)];
      if (i / dim == 1 || i / dim == 4) out[i] = 1.0f + out[i];
    }
  }
  modulation = modulation.to(resident_.device);
  const OuterWeights outer = outer_weights();
  const Tensor& head_table = outer.head_table;  // on the host wherever the model runs
  Tensor head = Tensor::empty({2, dim});
  for (int64_t i = 0; i < dim; ++i) {
    head.data<float>()[i] = head_table.data<float>()[i] + time.temb[size_t(i)];
    head.data<float>()[dim + i] = 1.0f + (head_table.data<float>()[dim + i] + time.temb[size_t(i)]);
  }
  head = head.to(resident_.device);

  // On the host, the text's padding (zero rows up to max_sequence_length, one repeated row) is
  // embedded, projected and attended to once, counted for its copies (attention/repeated_keys.h).
  attention::RepeatedTail tail;
  if (resident_.device == Device::CPU && text_embeds.is_cpu()) {
    tail = attention::find_repeated_tail(text_embeds);
    if (attention::kept_rows(tail) == tail.total) tail = {};
  }
  const Tensor text_rows =
      tail.empty() ? text_embeds : text_embeds.slice(1, 0, attention::kept_rows(tail));
  // The text MLP (GELU, tanh form) into the dtype the cross-attention products read.
  const Tensor text_in = text_rows.to(DType::F32).to(resident_.compute).to(resident_.device);
  const Tensor text = ops::linear(ops::linear(text_in, outer.text_1_weight, outer.text_1_bias,
                                              resident_.compute, Activation::GeluTanh),
                                  outer.text_2_weight, outer.text_2_bias, resident_.compute);
  // Patch embedding: the residual stream x [B, S, D], float32 (under sequence parallel this
  // rank's rows of it, and of the RoPE tables).
  Tensor patches = [&] {
    MMGEN_PROFILE("wan: patchify");
    return patchify(latents, config_.patch_size, grid);
  }();
  const WanRopeTables& all_rope = rope_tables(grid.t, grid.h, grid.w);
  WanRopeTables shard_rope;
  if (sequence) {
    check(sequence->shards.total() == grid.t * grid.h * grid.w,
          "transformer: sequence shards of {} tokens for a {}x{}x{} grid", sequence->shards.total(),
          grid.t, grid.h, grid.w);
    const int64_t start = sequence->offset(), end = start + sequence->rows();
    patches = patches.slice(1, start, end).contiguous();
    shard_rope.cos = all_rope.cos.slice(0, start, end);
    shard_rope.sin = all_rope.sin.slice(0, start, end);
  }
  const WanRopeTables& rope = sequence ? shard_rope : all_rope;
  Tensor x = ops::linear(patches.to(resident_.compute).to(resident_.device), outer.patch_weight,
                         outer.patch_bias);

  attention::Call call;
  call.layers = attention;
  call.grid = {grid.t, grid.h, grid.w};
  // The cross-attention's keys (the self-attention's sequence holds the video tokens alone).
  call.text_length = text_embeds.size(1);
  call.repeated_tail = tail.empty() ? nullptr : &tail;
  call.num_layers = config_.num_layers;
  call.timestep = timestep;
  call.step_index = step.index;
  call.num_steps = step.count;
  call.branch = step.branch == 0 ? 0 : 1;
  call.sequence = sequence;
  // Each block starts from its modulated pre-norm and hands on the next one (the output head's
  // after the last block), so every residual update and the norm after it are one op.
  const auto block_modulation = [&](int64_t layer) {
    const Tensor m = modulation.select(0, layer);
    return WanModulation{m.select(0, 0), m.select(0, 1), m.select(0, 2),
                         m.select(0, 3), m.select(0, 4), m.select(0, 5)};
  };
  // The head's norm when there are no blocks; else block 0's, each block then returning the next.
  WanModulation current = config_.num_layers > 0 ? block_modulation(0) : WanModulation{};
  Tensor normed = config_.num_layers > 0
                      ? ops::modulated_layer_norm(x, current.shift, current.scale_plus_one,
                                                  config_.eps, resident_.block_inputs)
                      : ops::modulated_layer_norm(x, head.select(0, 0), head.select(0, 1),
                                                  config_.eps, resident_.compute);
  for (int64_t layer = 0; layer < config_.num_layers; ++layer) {
    stop_between_blocks("transformer blocks");  // Ctrl-C: nothing of this block is taken yet
    call.layer = layer;
    const bool last = layer + 1 == config_.num_layers;
    const WanModulation following = last ? WanModulation{} : block_modulation(layer + 1);
    const WanNextNorm next =
        last ? WanNextNorm{head.select(0, 1), head.select(0, 0), resident_.compute}
             : WanNextNorm{following.scale_plus_one, following.shift, resident_.block_inputs};
    const WanBlockWeights weights = block_weights(layer);
    try {
      normed = run_wan_block(x, normed, text, current, next, weights, config_, rope,
                             resident_.compute, call);
    } catch (...) {
      release_block(layer);  // a failed block hands its slot back too, so the next forward's
      throw;                 // copies wait for what this one queued
    }
    release_block(layer);  // its work is queued: a streamed block's slot may be refilled after it
    current = following;
  }

  // Output head: the last block's modulated LayerNorm, projection, back to the host, unpatchify.
  Tensor out = ops::linear(normed, outer.proj_weight, outer.proj_bias);
  if (sequence) out = attention::gather_sequence(out, sequence->shards, *sequence->group);
  MMGEN_PROFILE("wan: unpatchify");
  return unpatchify(out.to(Device::CPU), config_.patch_size, grid, config_.out_channels);
}

}  // namespace mmgen::dit
