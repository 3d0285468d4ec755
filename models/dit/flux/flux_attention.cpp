#include "models/dit/flux/flux_attention.h"

#include <cmath>

#include "attention/dense_attention.h"
#include "core/error.h"

namespace mmgen::dit {

Tensor flux_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                      const FluxAttentionCall& call) {
  check(q.dim() == 4 && q.size(0) == 1 && k.shape() == q.shape() && v.shape() == q.shape(),
        "flux_attention: q, k, v must be one item's [1, tokens, heads, head_dim], got {}, {}, {}",
        shape_string(q.shape()), shape_string(k.shape()), shape_string(v.shape()));
  const float scale = float(1.0 / std::sqrt(double(q.size(3))));
  if (q.device() == Device::CUDA) {
    const attention::GpuAttention gpu =
        call.attention ? call.attention->gpu : attention::GpuAttention{};
    return attention::dense_attention_gpu(q, k, v, scale, gpu.dense.self);
  }
  FluxLayerAttention* layer = nullptr;
  if (call.attention) {
    std::vector<FluxLayerAttention>& stack = call.stage == FluxStage::Double
                                                 ? call.attention->double_layers
                                                 : call.attention->single_layers;
    if (!stack.empty()) {
      check(call.layer >= 0 && call.layer < int64_t(stack.size()),
            "flux_attention: layer {} but attention was built for {} layers", call.layer,
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
  context.text_length = call.text_tokens;  // no video grid: the selector plans dense backends only
  context.is_cross = false;
  if (layer->item_state.size() <= size_t(call.item))
    layer->item_state.resize(size_t(call.item) + 1);
  context.state = &layer->item_state[size_t(call.item)];
  return layer->backend->forward(q, k, v, scale, context, &call.attention->stats);
}

}  // namespace mmgen::dit
