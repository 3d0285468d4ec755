#include "models/dit/zimage/zimage_attention.h"

#include <cmath>

#include "attention/dense_attention.h"
#include "attention/ulysses.h"
#include "core/error.h"

namespace mmgen::dit {
namespace {

std::vector<ZImageLayerAttention>* stack_of(ZImageAttention& attention, ZImageStage stage) {
  switch (stage) {
    case ZImageStage::NoiseRefiner:
      return &attention.noise_refiner;
    case ZImageStage::ContextRefiner:
      return &attention.context_refiner;
    case ZImageStage::Main:
      break;
  }
  return &attention.layers;
}

}  // namespace

Tensor zimage_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                        const ZImageAttentionCall& call) {
  check(q.dim() == 4 && q.size(0) == 1 && k.shape() == q.shape() && v.shape() == q.shape(),
        "zimage_attention: q, k, v must be one item's [1, tokens, heads, head_dim], got {}, {}, {}",
        shape_string(q.shape()), shape_string(k.shape()), shape_string(v.shape()));
  if (call.sequence) {
    check(q.size(1) == call.sequence->rows(), "zimage_attention: {} rows, the shard holds {}",
          q.size(1), call.sequence->rows());
    dist::Communicator& group = *call.sequence->group;
    const dist::SequenceShards& shards = call.sequence->shards;
    ZImageAttentionCall whole = call;
    whole.sequence = nullptr;
    const Tensor out =
        zimage_attention(attention::sequence_to_heads(q.contiguous(), shards, group),
                         attention::sequence_to_heads(k.contiguous(), shards, group),
                         attention::sequence_to_heads(v.contiguous(), shards, group), whole);
    return attention::heads_to_sequence(out.contiguous(), shards, group, q.size(2));
  }
  const float scale = float(1.0 / std::sqrt(double(q.size(3))));
  if (q.device() == Device::CUDA) {
    const attention::GpuAttention gpu =
        call.attention ? call.attention->gpu : attention::GpuAttention{};
    return attention::dense_attention_gpu(q, k, v, scale, gpu.dense.self);
  }

  ZImageLayerAttention* layer = nullptr;
  if (call.attention) {
    std::vector<ZImageLayerAttention>& stack = *stack_of(*call.attention, call.stage);
    if (!stack.empty()) {
      check(call.layer >= 0 && call.layer < int64_t(stack.size()),
            "zimage_attention: layer {} but attention was built for {} layers", call.layer,
            stack.size());
      layer = &stack[size_t(call.layer)];
    }
  }
  if (!layer || !layer->backend) {
    attention::DenseAttentionArgs args;
    args.q = q;
    args.k = k;
    args.v = v;
    args.scale = scale;
    return attention::dense_attention(args);
  }

  attention::AttentionContext context;
  context.step_index = call.step_index;
  context.num_steps = call.step_count;
  context.timestep = call.timestep;
  context.layer_index = call.layer;
  context.num_layers = call.num_layers;
  context.grid = call.grid;
  // Tokens after the image grid: the image's padding and then the caption (main blocks), or the
  // whole caption (context refiner), which is where backends expect text.
  context.text_length = q.size(1) - call.grid[0] * call.grid[1] * call.grid[2];
  context.is_cross = false;
  if (layer->item_state.size() <= size_t(call.item))
    layer->item_state.resize(size_t(call.item) + 1);
  context.state = &layer->item_state[size_t(call.item)];
  return layer->backend->forward(q, k, v, scale, context, &call.attention->stats);
}

}  // namespace mmgen::dit
