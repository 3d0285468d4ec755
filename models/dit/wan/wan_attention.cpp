#include "models/dit/wan/wan_attention.h"

#include <cmath>

#include "attention/backends/video_sparse_attn/vsa_gate.h"
#include "attention/dense_attention.h"
#include "attention/ulysses.h"
#include "core/error.h"
#include "core/op_profile.h"

namespace mmgen::dit {

namespace {

// Self-attention of a sequence shard: the whole sequence for a share of the heads, through the
// layer's backend as on one device, then back to this rank's rows with every head.
Tensor sequence_parallel_self_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                        const WanAttentionCall& call) {
  const WanSequenceParallel& sequence = *call.sequence;
  check(q.size(1) == sequence.rows(), "wan_attention: {} query rows, the shard holds {}", q.size(1),
        sequence.rows());
  // A VSA checkpoint's gate is a projection of the attention input, which lives in sequence
  // shards with every head: not exchanged (yet).
  if (call.attention && call.attention_input) {
    const WanAttention& attention = *call.attention;
    const bool gate =
        q.is_cpu()
            ? !attention.layers.empty() && attention.layers[size_t(call.layer)].self_weights.count(
                                               attention::kVsaGateWeightKey)
            : attention.gpu.sparse && attention::sparse_backend_wants_gate(*attention.gpu.sparse);
    check(!gate,
          "sequence parallel: video_sparse_attn with a trained gate (to_gate_compress) is not "
          "supported across GPUs yet; run it on one GPU");
  }
  dist::Communicator& group = *sequence.group;
  WanAttentionCall whole = call;
  whole.sequence = nullptr;
  whole.attention_input = nullptr;
  const Tensor out =
      wan_attention(attention::sequence_to_heads(q.contiguous(), sequence.shards, group),
                    attention::sequence_to_heads(k.contiguous(), sequence.shards, group),
                    attention::sequence_to_heads(v.contiguous(), sequence.shards, group), whole);
  return attention::heads_to_sequence(out.contiguous(), sequence.shards, group, q.size(2));
}

}  // namespace

Tensor wan_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                     const WanAttentionCall& call) {
  check(q.dim() == 4, "wan_attention: q must be [batch, seq, heads, head_dim], got {}",
        shape_string(q.shape()));
  if (call.sequence && !call.is_cross) return sequence_parallel_self_attention(q, k, v, call);
  const int64_t expected_q_len =
      call.sequence ? call.sequence->rows() : call.grid_t * call.grid_h * call.grid_w;
  check(q.size(1) == expected_q_len, "wan_attention: {} query tokens for a {}x{}x{} grid",
        q.size(1), call.grid_t, call.grid_h, call.grid_w);
  const attention::RepeatedTail* tail = call.is_cross ? call.repeated_tail : nullptr;
  const int64_t text_keys = tail ? attention::kept_rows(*tail) : call.text_len;
  check(!call.is_cross || (k.size(1) == text_keys && (!tail || tail->total == call.text_len)),
        "wan_attention: {} keys for {} text tokens", k.size(1), call.text_len);
  check(!tail || q.is_cpu(), "wan_attention: a repeated text tail is a host-side shortcut");
  const float scale = float(1.0 / std::sqrt(double(q.size(3))));
  MMGEN_PROFILE(call.is_cross ? "attention: cross" : "attention: self");

  WanLayerAttention* layer = nullptr;
  if (call.attention && !call.attention->layers.empty()) {
    check(call.layer >= 0 && call.layer < int64_t(call.attention->layers.size()),
          "wan_attention: layer {} but attention was built for {} layers", call.layer,
          call.attention->layers.size());
    layer = &call.attention->layers[size_t(call.layer)];
  }
  if (q.device() == Device::CUDA) {
    const attention::GpuAttention gpu =
        call.attention ? call.attention->gpu : attention::GpuAttention{};
    if (call.is_cross || !gpu.sparse)
      return attention::dense_attention_gpu(q, k, v, scale,
                                            call.is_cross ? gpu.dense.cross : gpu.dense.self);
    Tensor gate;
    if (layer && call.attention_input && attention::sparse_backend_wants_gate(*gpu.sparse))
      gate = attention::vsa_gate(layer->self_weights, *call.attention_input, q.size(2));
    const bool with_weights = layer && attention::sparse_backend_wants_layer_weights(*gpu.sparse);
    return attention::sparse_self_attention_gpu(
        *gpu.sparse, q, k, v, {call.grid_t, call.grid_h, call.grid_w}, call.step.index, call.layer,
        scale, gate, with_weights ? &layer->self_weights : nullptr,
        {.num_steps = call.step.count, .num_layers = call.num_layers, .branch = call.step.branch});
  }
  attention::AttentionBackend* backend =
      layer ? (call.is_cross ? layer->cross_attention : layer->self_attention).get() : nullptr;
  // A backend that does not count repeated keys gets them all, as the model defines them.
  const bool counted = tail && backend && backend->counts_repeated_keys();
  const Tensor keys = tail && !counted ? attention::expand_repeated_tail(k, *tail) : k;
  const Tensor values = tail && !counted ? attention::expand_repeated_tail(v, *tail) : v;
  if (!backend) {
    attention::DenseAttentionArgs args;
    args.q = q;
    args.k = keys;
    args.v = values;
    args.scale = scale;
    return attention::dense_attention(args);
  }

  attention::AttentionContext context;
  context.step_index = call.step.index;
  context.num_steps = call.step.count;
  context.timestep = call.timestep;
  context.layer_index = call.layer;
  context.num_layers = call.num_layers;
  context.grid = {call.grid_t, call.grid_h, call.grid_w};
  // Wan's self-attention sequence holds video tokens only; a cross-attention's keys are the text.
  context.text_length = call.is_cross ? call.text_len : 0;
  context.is_cross = call.is_cross;
  if (counted) context.repeated_tail = tail;
  attention::LayerWeights call_weights;
  if (!call.is_cross) {
    context.weights = &layer->self_weights;
    // A VSA-trained checkpoint gates the coarse branch with a projection of the attention input,
    // which only the model sees: compute it here and hand it to the backend with the weights.
    if (call.attention_input && layer->self_weights.count(attention::kVsaGateWeightKey)) {
      call_weights = layer->self_weights;
      call_weights[attention::kVsaGateKey] =
          attention::vsa_gate(layer->self_weights, *call.attention_input, q.size(2));
      context.weights = &call_weights;
    }
    context.state = &layer->self_state[size_t(call.step.branch == 0 ? 0 : 1)];
  }
  attention::AttentionStats* stats =
      call.is_cross ? nullptr : &call.attention->self_attention_stats;
  return backend->forward(q, keys, values, scale, context, stats);
}

bool WanAttention::dense_on_cpu() const {
  const auto dense = [](const std::unique_ptr<attention::AttentionBackend>& backend) {
    return !backend || backend->batch_elements_alone();
  };
  for (const WanLayerAttention& layer : layers)
    if (!dense(layer.self_attention) || !dense(layer.cross_attention)) return false;
  return true;
}

}  // namespace mmgen::dit
