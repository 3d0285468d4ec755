#include "attention/layer.h"

#include <cmath>

#include "attention/device_attention.h"
#include "attention/kernels/dense_attention.h"
#include "attention/ulysses.h"
#include "core/error.h"
#include "core/op_profile.h"

namespace mmgen::attention {

namespace {

// Self-attention of a sequence shard: the whole sequence for a share of the heads, through the
// layer as on one device, then back to this rank's rows with every head.
Tensor sequence_parallel(Layer& layer, const Tensor& q, const Tensor& k, const Tensor& v,
                         const Call& call) {
  const SequenceParallel& sequence = *call.sequence;
  check(q.size(1) == sequence.rows() && k.size(1) == q.size(1) && v.size(1) == q.size(1),
        "attention: {} query rows, the shard holds {}", q.size(1), sequence.rows());
  // The attention input lives in sequence shards with every head: not exchanged (yet).
  check(!call.attention_input || !layer.backend() ||
            !layer.backend()->reads_attention_input(layer.weights()),
        "sequence parallel: {} with its trained projections of the attention input (VSA's "
        "to_gate_compress) is not supported across GPUs yet; run it on one GPU",
        layer.backend() ? layer.backend()->name() : "");
  dist::Communicator& group = *sequence.group;
  Call whole = call;
  whole.sequence = nullptr;
  whole.attention_input = nullptr;
  const Tensor out =
      layer.forward(sequence_to_heads(q.contiguous(), sequence.shards, group),
                    sequence_to_heads(k.contiguous(), sequence.shards, group),
                    sequence_to_heads(v.contiguous(), sequence.shards, group), whole);
  return heads_to_sequence(out.contiguous(), sequence.shards, group, q.size(2));
}

}  // namespace

Layer::Layer(std::shared_ptr<AttentionBackend> backend, LayerWeights weights)
    : backend_(std::move(backend)), weights_(std::move(weights)) {}

Tensor Layer::forward(const Tensor& q, const Tensor& k, const Tensor& v, const Call& call) {
  check(q.dim() == 4 && k.dim() == 4 && v.shape() == k.shape() && k.size(0) == q.size(0) &&
            k.size(2) == q.size(2) && k.size(3) == q.size(3),
        "attention: q must be [batch, seq, heads, head_dim] and k, v alike, got {}, {}, {}",
        shape_string(q.shape()), shape_string(k.shape()), shape_string(v.shape()));
  if (call.sequence && !call.is_cross) return sequence_parallel(*this, q, k, v, call);
  const RepeatedTail* tail = call.is_cross ? call.repeated_tail : nullptr;
  check(!tail || q.is_cpu(), "attention: a repeated text tail is a host-side shortcut");
  check(!tail || (k.size(1) == kept_rows(*tail) && tail->total == call.text_length),
        "attention: {} keys for {} text tokens", k.size(1), call.text_length);
  const float scale = call.scale != 0 ? call.scale : float(1.0 / std::sqrt(double(q.size(3))));

  // A backend that does not count repeated keys gets them all, as the model defines them.
  const bool counted = tail && backend_ && backend_->counts_repeated_keys();
  const Tensor keys = tail && !counted ? expand_repeated_tail(k, *tail) : k;
  const Tensor values = tail && !counted ? expand_repeated_tail(v, *tail) : v;
  if (!backend_) {
    if (q.device() == Device::CUDA) return dense_attention_gpu(q, k, v, scale, DenseKernel::Flash);
    DenseAttentionArgs args;
    args.q = q;
    args.k = keys;
    args.v = values;
    args.scale = scale;
    return dense_attention(args);
  }
  AttentionContext context;
  context.step_index = call.step_index;
  context.num_steps = call.num_steps;
  context.timestep = call.timestep;
  context.layer_index = call.layer;
  context.num_layers = call.num_layers;
  context.grid = call.grid;
  context.text_length = call.text_length;
  context.is_cross = call.is_cross;
  context.branch = call.branch;
  if (counted) context.repeated_tail = tail;
  context.weights = &weights_;
  if (!call.is_cross) context.attention_input = call.attention_input;
  check(call.branch >= 0, "attention: branch {} is negative", call.branch);
  if (states_.size() <= size_t(call.branch)) states_.resize(size_t(call.branch) + 1);
  context.state = &states_[size_t(call.branch)];
  return backend_->forward(q, keys, values, scale, context, &stats_);
}

void Layers::set_stack(std::string name, std::vector<Layer> layers) {
  stacks_[std::move(name)] = std::move(layers);
}

const std::vector<Layer>& Layers::stack(std::string_view name) const {
  static const std::vector<Layer> none;
  const auto it = stacks_.find(name);
  return it == stacks_.end() ? none : it->second;
}

Layer& Layers::layer(std::string_view stack, int64_t index) {
  const auto it = stacks_.find(stack);
  if (it == stacks_.end() || it->second.empty()) return dense_;
  check(index >= 0 && index < int64_t(it->second.size()),
        "attention: layer {} of {} but attention was built for {} layers", index, stack,
        it->second.size());
  return it->second[size_t(index)];
}

AttentionStats Layers::stats(std::string_view name) const {
  AttentionStats sum;
  for (const Layer& layer : stack(name)) {
    sum.visited_blocks += layer.stats().visited_blocks;
    sum.total_blocks += layer.stats().total_blocks;
  }
  return sum;
}

bool Layers::batch_elements_alone() const {
  for (const auto& [name, layers] : stacks_)
    for (const Layer& layer : layers)
      if (!layer.batch_elements_alone()) return false;
  return true;
}

Layers layers_from(const std::vector<StackTraits>& stacks,
                   const std::function<Layer(const StackTraits& stack, int64_t layer)>& make) {
  Layers layers;
  for (const StackTraits& stack : stacks) {
    std::vector<Layer> built;
    for (int64_t i = 0; i < stack.layers; ++i) built.push_back(make(stack, i));
    layers.set_stack(stack.name, std::move(built));
  }
  return layers;
}

Tensor attend(const Tensor& q, const Tensor& k, const Tensor& v, const Call& call) {
  // A transformer's attention, in the op profile (a VAE's mid-block layer is the VAE's own time).
  MMGEN_PROFILE(call.is_cross ? "attention: cross" : "attention: self");
  if (call.layers) return call.layers->layer(call.stack, call.layer).forward(q, k, v, call);
  Layer dense;
  return dense.forward(q, k, v, call);
}

}  // namespace mmgen::attention
