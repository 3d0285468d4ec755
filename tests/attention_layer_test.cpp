// attention::Layer, Layers and the one attention builder (pipeline/attention_layers.h): the dense
// reference without a backend, one state per guidance branch or item, what a backend is handed
// (repeated keys, context, weights), stats, the sequence-parallel rule, and the builder's choice
// of backend and extra weights per stack from a real plan.
#include <gtest/gtest.h>

#include <any>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "attention/backend.h"
#include "attention/kernels/dense_attention.h"
#include "attention/layer.h"
#include "attention/layer_backend.h"
#include "core/error.h"
#include "core/random.h"
#include "core/safetensors.h"
#include "core/thread_communicator.h"
#include "models/dit/wan/wan_transformer.h"
#include "pipeline/attention_layers.h"
#include "pipeline/attention_plan.h"
#include "pipeline/model_index.h"
#include "tests/test_support.h"

namespace mmgen {
namespace {

std::string error_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

Tensor random(const Shape& shape, uint64_t seed) {
  return TorchCpuGenerator(seed).randn(shape);
}

// Dense attention that records what each call was handed, and counts a block per call.
class Recording final : public attention::AttentionBackend {
 public:
  struct Seen {
    int64_t keys;
    int calls_in_state;  // how many calls this state has seen, this one included
    const attention::LayerWeights* weights;
    const Tensor* attention_input;
    bool tail;
    attention::AttentionContext context;
  };
  explicit Recording(std::vector<Seen>* seen, bool counts = false, bool reads_input = false)
      : seen_(seen), counts_(counts), reads_input_(reads_input) {}
  std::string_view name() const override { return "recording"; }
  bool counts_repeated_keys() const override { return counts_; }
  bool reads_attention_input(const attention::LayerWeights&) const override { return reads_input_; }
  Tensor forward(const Tensor& q, const Tensor& k, const Tensor& v, float scale,
                 const attention::AttentionContext& context,
                 attention::AttentionStats* stats) override {
    // What a stateful backend keeps across calls (SVG2's centroids): here a count.
    int calls = 0;
    if (context.state) {
      if (context.state->value.has_value()) calls = std::any_cast<int>(context.state->value);
      context.state->value = ++calls;
    }
    seen_->push_back({k.size(1), calls, context.weights, context.attention_input,
                      context.repeated_tail != nullptr, context});
    if (stats) stats->visited_blocks += 1, stats->total_blocks += 2;
    attention::DenseAttentionArgs args;
    args.q = q, args.k = k, args.v = v, args.scale = scale;
    return attention::dense_attention(args);
  }

 private:
  std::vector<Seen>* seen_;
  bool counts_, reads_input_;
};

Tensor dense(const Tensor& q, const Tensor& k, const Tensor& v) {
  attention::DenseAttentionArgs args;
  args.q = q, args.k = k, args.v = v, args.scale = float(1.0 / std::sqrt(double(q.size(3))));
  return attention::dense_attention(args);
}

TEST(AttentionLayer, WithoutABackendItIsTheDenseReference) {
  const Tensor q = random({2, 7, 3, 8}, 1), k = random({2, 5, 3, 8}, 2),
               v = random({2, 5, 3, 8}, 3);
  const Tensor expected = dense(q, k, v);
  attention::Call call;
  EXPECT_EQ(testing::max_abs_diff(attention::attend(q, k, v, call), expected), 0.0);
  attention::Layers empty;  // a stack that was not built runs the reference too
  call.layers = &empty;
  call.stack = "self";
  call.layer = 5;
  EXPECT_EQ(testing::max_abs_diff(attention::attend(q, k, v, call), expected), 0.0);
  EXPECT_TRUE(empty.batch_elements_alone());
}

TEST(AttentionLayer, EachBranchKeepsItsOwnStateAndTheCallReachesTheBackend) {
  std::vector<Recording::Seen> seen;
  attention::LayerWeights extra{{"proj_l.weight", Tensor::zeros({2, 2})}};
  attention::Layers layers;
  std::vector<attention::Layer> stack;
  stack.emplace_back(std::make_shared<Recording>(&seen), extra);
  stack.emplace_back(std::make_shared<Recording>(&seen));
  layers.set_stack("self", std::move(stack));
  const Tensor q = random({1, 24, 2, 4}, 4), input = random({1, 24, 8}, 5);
  attention::Call call{.layers = &layers, .stack = "self", .layer = 0, .num_layers = 2};
  call.step_index = 3, call.num_steps = 9, call.timestep = 431.0f, call.grid = {2, 3, 4};
  call.attention_input = &input;
  for (const int64_t branch : {0, 1, 0, 1}) {
    call.branch = branch;
    const Tensor out = attention::attend(q, q, q, call);
    EXPECT_EQ(testing::max_abs_diff(out, dense(q, q, q)), 0.0);
  }
  call.layer = 1;
  call.branch = 0;
  attention::attend(q, q, q, call);
  ASSERT_EQ(seen.size(), 5u);
  // Branches apart, each state kept from one step to the next; another layer, another state.
  EXPECT_EQ(seen[0].calls_in_state, 1);
  EXPECT_EQ(seen[1].calls_in_state, 1);
  EXPECT_EQ(seen[2].calls_in_state, 2);
  EXPECT_EQ(seen[3].calls_in_state, 2);
  EXPECT_EQ(seen[4].calls_in_state, 1);
  EXPECT_EQ(seen[0].weights->count("proj_l.weight"), 1u);
  EXPECT_TRUE(seen[4].weights->empty());
  EXPECT_EQ(seen[0].attention_input, &input);
  const attention::AttentionContext& context = seen[1].context;
  EXPECT_EQ(context.step_index, 3);
  EXPECT_EQ(context.num_steps, 9);
  EXPECT_EQ(context.timestep, 431.0f);
  EXPECT_EQ(context.layer_index, 0);
  EXPECT_EQ(context.num_layers, 2);
  EXPECT_EQ(context.branch, 1);
  EXPECT_EQ(context.grid, (std::array<int64_t, 3>{2, 3, 4}));
  EXPECT_FALSE(context.is_cross);
  // Stats per layer, summed per stack.
  EXPECT_EQ(layers.stack("self")[0].stats().visited_blocks, 4);
  EXPECT_EQ(layers.stats("self").visited_blocks, 5);
  EXPECT_EQ(layers.stats("self").total_blocks, 10);
  EXPECT_EQ(layers.stats("cross").total_blocks, 0);
  EXPECT_FALSE(layers.batch_elements_alone());  // Recording keeps the default: not alone
  call.layer = 2;
  EXPECT_NE(error_of([&] { attention::attend(q, q, q, call); }).find("built for 2 layers"),
            std::string::npos);
}

// Cross-attention over a text whose padding is one repeated row: a backend that does not count
// repeated keys gets them all; one that does gets the kept rows and the tail. Both give the
// dense result over the padded text.
TEST(AttentionLayer, RepeatedKeysAreExpandedForABackendThatDoesNotCountThem) {
  Tensor text = random({1, 9, 2, 4}, 6);
  for (int64_t row = 4; row < 9; ++row) text.select(1, row).copy_from(text.select(1, 3));
  const Tensor q = random({1, 6, 2, 4}, 7);
  const Tensor expected = dense(q, text, text);
  attention::RepeatedTail tail;
  tail.distinct = {3};
  tail.total = 9;
  const Tensor kept = text.slice(1, 0, attention::kept_rows(tail)).contiguous();
  for (const bool counts : {false, true}) {
    std::vector<Recording::Seen> seen;
    attention::Layers layers;
    std::vector<attention::Layer> stack;
    stack.emplace_back(std::make_shared<Recording>(&seen, counts));
    layers.set_stack("cross", std::move(stack));
    attention::Call call{.layers = &layers, .stack = "cross", .is_cross = true};
    call.text_length = 9;
    call.repeated_tail = &tail;
    const Tensor out = attention::attend(q, kept, kept, call);
    ASSERT_EQ(seen.size(), 1u);
    EXPECT_EQ(seen[0].keys, counts ? attention::kept_rows(tail) : 9) << counts;
    EXPECT_EQ(seen[0].tail, counts);
    if (!counts) {
      EXPECT_EQ(testing::max_abs_diff(out, expected), 0.0);
    }
  }
}

// Sequence parallel: a layer whose backend reads the attention input (VSA's trained gate) is
// refused across ranks; without it each rank's rows come back as the single-device result's.
TEST(AttentionLayer, SequenceParallelRefusesABackendThatReadsTheAttentionInput) {
  const Tensor q = random({1, 10, 2, 4}, 8), input = random({1, 10, 8}, 9);
  const Tensor expected = dense(q, q, q);
  for (const bool reads : {true, false}) {
    dist::ThreadGroup group(2);
    std::vector<std::unique_ptr<dist::Communicator>> members;
    for (int r = 0; r < 2; ++r) members.push_back(group.member(r));
    std::vector<std::string> errors(2);
    std::vector<double> differences(2, -1);
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r)
      threads.emplace_back([&, r] {
        std::vector<Recording::Seen> seen;
        attention::Layers layers;
        std::vector<attention::Layer> stack;
        stack.emplace_back(std::make_shared<Recording>(&seen, false, reads));
        layers.set_stack("self", std::move(stack));
        const attention::SequenceParallel sequence{members[size_t(r)].get(),
                                                   dist::SequenceShards::balanced(10, 2)};
        const int64_t start = sequence.offset(), rows = sequence.rows();
        const Tensor mine = q.slice(1, start, start + rows).contiguous();
        attention::Call call{.layers = &layers, .stack = "self"};
        call.sequence = &sequence;
        call.attention_input = &input;
        errors[size_t(r)] = error_of([&] {
          const Tensor out = attention::attend(mine, mine, mine, call);
          differences[size_t(r)] =
              testing::max_abs_diff(out, expected.slice(1, start, start + rows).contiguous());
        });
      });
    for (auto& thread : threads) thread.join();
    for (int r = 0; r < 2; ++r) {
      if (reads) {
        EXPECT_NE(errors[size_t(r)].find("not supported across GPUs"), std::string::npos)
            << errors[size_t(r)];
      } else {
        EXPECT_EQ(errors[size_t(r)], "");
        EXPECT_LT(differences[size_t(r)], 1e-6) << r;
        EXPECT_GE(differences[size_t(r)], 0.0);
      }
    }
  }
}

// The builder: each stack takes the plan's backend for its kind of layer, every CPU layer its
// own instance, and the extra weights its descriptor reads from under each block's prefix.
TEST(AttentionBuilder, StacksTakeThePlansBackendsAndTheirExtraWeights) {
  const ModelIndex index = load_model_index(testing::source_dir() / "examples/models/wan-tiny");
  Request request;
  request.attention_backend = "video_sparse_attn";
  request.num_inference_steps = 2;
  const AttentionPlan plan = plan_attention(index, request);
  const dit::WanTransformer model =
      dit::WanTransformer::load(testing::source_dir() / "examples/models/wan-tiny/transformer");
  ASSERT_EQ(model.config().num_layers, 2);
  // A checkpoint with to_gate_compress in block 1 only (and a name that only looks like it).
  const fs::path file = testing::scratch_dir("attention_builder") / "extra.safetensors";
  write_safetensors(file, {{"blocks.1.to_gate_compress.weight", random({4, 4}, 10)},
                           {"blocks.1.to_gate_compress.bias", random({4}, 11)},
                           {"blocks.0.not_to_gate_compress.weight", random({4, 4}, 12)}});
  const WeightStore extra = WeightStore::open_file(file);
  attention::Layers layers =
      build_attention_layers(plan, "transformer", model.attention_stacks(), extra, Device::CPU);
  const std::vector<attention::Layer>& self = layers.stack(dit::kWanSelfStack);
  const std::vector<attention::Layer>& cross = layers.stack(dit::kWanCrossStack);
  ASSERT_EQ(self.size(), 2u);
  ASSERT_EQ(cross.size(), 2u);
  std::set<const attention::AttentionBackend*> instances;
  for (const auto* stack : {&self, &cross})
    for (const attention::Layer& layer : *stack) instances.insert(layer.backend());
  EXPECT_EQ(instances.size(), 4u);  // every CPU layer its own backend
  EXPECT_EQ(self[0].backend()->name(), "video_sparse_attn");
  std::string cross_backend;
  for (const auto& layer : plan.components.at("transformer").layers)
    if (layer.kind == attention::LayerKind::CrossAttention) cross_backend = layer.backend;
  ASSERT_FALSE(cross_backend.empty());
  EXPECT_EQ(cross[0].backend()->name(), cross_backend);
  EXPECT_TRUE(self[0].weights().empty());
  EXPECT_EQ(self[1].weights().size(), 2u);
  EXPECT_EQ(self[1].weights().count("to_gate_compress.weight"), 1u);
  EXPECT_TRUE(cross[1].weights().empty());  // the cross stack reads none
  EXPECT_TRUE(self[1].backend()->reads_attention_input(self[1].weights()));
  EXPECT_FALSE(self[0].backend()->reads_attention_input(self[0].weights()));

  // No plan for the component: the dense reference everywhere.
  const attention::Layers none = build_attention_layers(
      plan, "no_such_component", model.attention_stacks(), extra, Device::CPU);
  EXPECT_TRUE(none.stack(dit::kWanSelfStack).empty());
#ifndef MMGEN_HAVE_CUDA
  EXPECT_NE(error_of([&] {
              build_attention_layers(plan, "transformer", model.attention_stacks(), extra,
                                     Device::CUDA);
            }).find("no CUDA support"),
            std::string::npos);
#endif
}

}  // namespace
}  // namespace mmgen
