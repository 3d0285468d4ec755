// The module registry (models/parameters.h): every DiT lists each tensor of its checkpoint once,
// under the checkpoint's name, with the size the checkpoint gives it; placement converts by role
// (products to the compute dtype, norms float32, host tensors left where they are, a group in one
// allocation); and a move that fails leaves the model on the CPU with nothing half-placed.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "models/dit/flux/flux_transformer.h"
#include "models/dit/qwenimage/qwenimage_transformer.h"
#include "models/dit/wan/wan_block.h"
#include "models/dit/wan/wan_transformer.h"
#include "models/dit/zimage/zimage_transformer.h"
#include "models/dit/zimage/zimage_weights.h"
#include "models/parameters.h"
#include "models/text_encoders/clip_text_model.h"
#include "models/text_encoders/qwen3_model.h"
#include "models/text_encoders/umt5_encoder.h"
#include "tests/test_support.h"

namespace mmgen::models {
namespace {

using testing::error_message;
using testing::shared_dir;
using testing::source_dir;

// name -> values listed (undefined tensors, such as an unmodulated block's adaLN product, hold
// none), the name's derived parts ("proj_out.weight[mlp]") under the name itself.
std::map<std::string, int64_t> listed_values(
    const std::function<void(const ParameterVisitor&)>& list, std::set<std::string>& names,
    std::map<std::string, Shape>& shapes) {
  std::map<std::string, int64_t> values;
  list([&](const Parameter& p) {
    const std::string name(p.name);
    EXPECT_TRUE(names.insert(name).second) << "listed twice: " << name;
    if (p.tensor.defined()) values[name.substr(0, name.find('['))] += p.tensor.numel();
    if (name.find('[') == std::string::npos) shapes[name] = p.shape;
  });
  return values;
}

// Every tensor of `store` is listed once by its own name, holding as many values as stored, with
// the shape its config implies equal to the stored one (what the load checks it against).
void expect_tree_covers_checkpoint(const WeightStore& store,
                                   const std::function<void(const ParameterVisitor&)>& list) {
  std::set<std::string> names;
  std::map<std::string, Shape> shapes;
  const std::map<std::string, int64_t> values = listed_values(list, names, shapes);
  for (const auto& [name, shape] : shapes) {
    if (store.has(name)) {
      EXPECT_EQ(shape_string(shape), shape_string(store.info(name).shape)) << name;
    }
  }
  std::set<std::string> stored;
  for (const std::string& name : store.names()) {
    stored.insert(name);
    const auto it = values.find(name);
    if (it == values.end()) {
      ADD_FAILURE() << "not listed: " << name;
      continue;
    }
    int64_t count = 1;
    for (const int64_t size : store.info(name).shape) count *= size;
    EXPECT_EQ(it->second, count) << name;
  }
  for (const auto& [name, count] : values)
    EXPECT_TRUE(stored.count(name)) << "listed but not in the checkpoint: " << name;
}

TEST(ModuleRegistry, WanListsEveryTensorOfItsCheckpoint) {
  MMGEN_REQUIRE_SHARED();
  const auto model =
      dit::WanTransformer::load(shared_dir() / "fixtures" / "wan-tiny" / "model" / "transformer");
  expect_tree_covers_checkpoint(model.weights(),
                                [&](const ParameterVisitor& v) { model.list_parameters(v); });
}

TEST(ModuleRegistry, ZImageListsEveryTensorOfItsCheckpoint) {
  MMGEN_REQUIRE_SHARED();
  const auto model = dit::ZImageTransformer::load(shared_dir() / "fixtures" / "zimage-tiny" /
                                                  "model" / "transformer");
  expect_tree_covers_checkpoint(model.weights(),
                                [&](const ParameterVisitor& v) { model.list_parameters(v); });
}

TEST(ModuleRegistry, FluxListsEveryTensorOfItsCheckpoint) {
  const auto model = dit::FluxTransformer::load(source_dir() / "tests" / "fixtures" / "flux-tiny" /
                                                "model" / "transformer");
  expect_tree_covers_checkpoint(model.weights(),
                                [&](const ParameterVisitor& v) { model.list_parameters(v); });
}

TEST(ModuleRegistry, QwenImageListsEveryTensorOfItsCheckpoint) {
  const auto model = dit::QwenImageTransformer::load(source_dir() / "tests" / "fixtures" /
                                                     "qwenimage-tiny" / "model" / "transformer");
  expect_tree_covers_checkpoint(model.weights(),
                                [&](const ParameterVisitor& v) { model.list_parameters(v); });
}

// What a loaded tree would hold on the GPU in bf16, counted from its tensors by role.
uint64_t gpu_bytes_of_loaded(const std::function<void(const ParameterVisitor&)>& list) {
  uint64_t bytes = 0;
  list([&](const Parameter& p) {
    if (!p.tensor.defined()) return;
    if (p.role == Role::Product || p.role == Role::Compute) bytes += uint64_t(p.tensor.numel()) * 2;
    if (p.role == Role::Float32) bytes += uint64_t(p.tensor.numel()) * 4;
  });
  return bytes;
}

// The text encoders the DiT fixtures carry: UMT5 (Wan), T5 and CLIP (FLUX), Qwen3 (Z-Image). Their
// GPU weight bytes come from their shaped trees before anything is read; they equal what the
// loaded trees hold, role by role.
TEST(ModuleRegistry, TextEncodersListEveryTensorOfTheirCheckpoints) {
  MMGEN_REQUIRE_SHARED();
  const fs::path flux = source_dir() / "tests" / "fixtures" / "flux-tiny" / "model";
  for (const fs::path& folder : {shared_dir() / "fixtures" / "wan-tiny" / "model" / "text_encoder",
                                 flux / "text_encoder_2"}) {
    SCOPED_TRACE(folder.string());
    const auto encoder = text_encoders::UMT5Encoder::from_folder(folder);
    expect_tree_covers_checkpoint(WeightStore::open_folder(folder),
                                  [&](const ParameterVisitor& v) { encoder.list_parameters(v); });
    EXPECT_EQ(text_encoders::UMT5Encoder::gpu_weight_bytes(encoder.config(), DType::BF16),
              gpu_bytes_of_loaded([&](const ParameterVisitor& v) { encoder.list_parameters(v); }));
  }
  const auto clip = text_encoders::ClipTextModel::from_folder(flux / "text_encoder");
  expect_tree_covers_checkpoint(WeightStore::open_folder(flux / "text_encoder"),
                                [&](const ParameterVisitor& v) { clip.list_parameters(v); });
  EXPECT_EQ(text_encoders::ClipTextModel::gpu_weight_bytes(clip.config(), DType::BF16),
            gpu_bytes_of_loaded([&](const ParameterVisitor& v) { clip.list_parameters(v); }));
  const fs::path qwen3 = shared_dir() / "fixtures" / "zimage-tiny" / "model" / "text_encoder";
  const auto decoder = text_encoders::Qwen3TextModel::from_folder(qwen3);
  expect_tree_covers_checkpoint(WeightStore::open_folder(qwen3),
                                [&](const ParameterVisitor& v) { decoder.list_parameters(v); });
}

// A structure's GPU bytes from its shapes alone, by hand.
TEST(ModuleRegistry, ShapedBytesCountEachRole) {
  // A [3, 5] product and its bias; FP8 rows carry one float32 scale per row.
  dit::FluxLinear linear = dit::FluxLinear::shaped(3, 5);
  EXPECT_EQ(shaped_resident_bytes(linear, {Device::CUDA, DType::BF16}), 3u * 5 * 2 + 3 * 4);
  PlacementRule fp8{Device::CUDA, DType::BF16};
  fp8.fp8_products = true;
  EXPECT_EQ(shaped_resident_bytes(linear, fp8), row_scales_offset(3 * 5) + 3 * 4 + 3 * 4);
}

TEST(ModuleRegistry, NestedNamesJoinTheirPrefixes) {
  dit::FluxLinear linear = dit::FluxLinear::shaped(2, 3);
  std::vector<std::string> names;
  std::vector<Shape> shapes;
  const ParameterVisitor collect = [&](const Parameter& p) {
    names.emplace_back(p.name);
    shapes.push_back(p.shape);
  };
  linear.parameters(nested(nested(collect, "blocks.0."), "attn.to_q."));
  EXPECT_EQ(names,
            (std::vector<std::string>{"blocks.0.attn.to_q.weight", "blocks.0.attn.to_q.bias"}));
  EXPECT_EQ(shapes, (std::vector<Shape>{{2, 3}, {2}}));
}

// A Z-Image block placed for bf16 products (on the CPU, where this test runs: the rule is the
// same on every device): each role as documented.
TEST(ModuleRegistry, PlacementFollowsEachRole) {
  MMGEN_REQUIRE_SHARED();
  const auto model = dit::ZImageTransformer::load(shared_dir() / "fixtures" / "zimage-tiny" /
                                                  "model" / "transformer");
  const dit::ZImageBlockWeights host =
      dit::ZImageBlockWeights::load(model.weights(), "layers.0.", model.config(), true);
  const dit::ZImageBlockWeights placed = models::placed(host, {Device::CPU, DType::BF16});
  for (const Tensor* t : {&placed.to_q, &placed.to_k, &placed.to_v, &placed.to_out, &placed.w1,
                          &placed.w2, &placed.w3})
    EXPECT_EQ(t->dtype(), DType::BF16);  // Role::Product
  for (const Tensor* t : {&placed.norm_q, &placed.norm_k, &placed.attention_norm2})
    EXPECT_EQ(t->dtype(), DType::F32);  // Role::Float32
  // Role::Host: the very same tensors (a modulated block's pre-norms and its adaLN product).
  EXPECT_EQ(placed.modulation_weight.raw(), host.modulation_weight.raw());
  EXPECT_EQ(placed.attention_norm1.data<float>(), host.attention_norm1.data<float>());
  // A group lies in one allocation, its members one after another.
  const size_t row_bytes = placed.to_q.nbytes();
  EXPECT_EQ(placed.to_k.raw(), placed.to_q.raw() + row_bytes);
  EXPECT_EQ(placed.to_v.raw(), placed.to_k.raw() + row_bytes);
  EXPECT_EQ(placed.w3.raw(), placed.w1.raw() + placed.w1.nbytes());
  // The values: products rounded to bf16, norms unchanged.
  const Tensor q = host.to_q.to(DType::F32), q_placed = placed.to_q.to(DType::F32);
  for (int64_t i = 0; i < q.numel(); ++i)
    EXPECT_EQ(q_placed.data<float>()[i], bf16_to_f32(f32_to_bf16(q.data<float>()[i])));
  // What a device holds: every listed tensor on it, none elsewhere.
  size_t expected = 0;
  for (const Tensor* t : {&placed.to_q, &placed.to_k, &placed.to_v, &placed.to_out, &placed.w1,
                          &placed.w2, &placed.w3, &placed.norm_q, &placed.norm_k,
                          &placed.attention_norm1, &placed.attention_norm2, &placed.ffn_norm1,
                          &placed.ffn_norm2, &placed.modulation_weight, &placed.modulation_bias})
    expected += t->nbytes();
  EXPECT_EQ(parameter_bytes(placed, Device::CPU), expected);
  EXPECT_EQ(parameter_bytes(placed, Device::CUDA), 0u);
}

TEST(ModuleRegistry, Fp8ProductsAreRefusedOffTheGpu) {
  dit::WanBlockWeights block;
  block.ffn_in_weight = Tensor::zeros({4, 4});
  const std::string message = error_message([&] {
    (void)block.placed({Device::CPU, DType::BF16, true, true});
  });
  EXPECT_NE(message.find("FP8 products run on the GPU"), std::string::npos) << message;
}

// The one failure rule: the old device's state is released before the new one is built from the
// host state, and a placement that throws leaves the host state (the CPU, as loaded).
TEST(ModuleRegistry, AFailedMoveLeavesTheModelOnTheCpu) {
  struct State {
    Device device = Device::CPU;
    std::vector<int> weights;
  };
  const auto to_host = [](State&&) { return State{Device::CPU, {1, 2, 3}}; };  // as loaded
  State state{Device::CUDA, {10, 20, 30}};
  State seen_while_placing;
  EXPECT_THROW(move_model(state, Device::CUDA, to_host,
                          [&](const State& host) -> State {
                            seen_while_placing = host;
                            throw std::runtime_error("out of GPU memory");
                          }),
               std::runtime_error);
  EXPECT_EQ(seen_while_placing.device, Device::CPU);  // placed from the host state, the old
  EXPECT_EQ(seen_while_placing.weights, (std::vector<int>{1, 2, 3}));  // device's released
  EXPECT_EQ(state.device, Device::CPU);
  EXPECT_EQ(state.weights, (std::vector<int>{1, 2, 3}));
  move_model(state, Device::CUDA, to_host, [](const State& host) {
    State placed = host;
    placed.device = Device::CUDA;
    for (int& w : placed.weights) w *= 10;
    return placed;
  });
  EXPECT_EQ(state.device, Device::CUDA);
  EXPECT_EQ(state.weights, (std::vector<int>{10, 20, 30}));
  bool placed_for_the_cpu = false;
  move_model(state, Device::CPU, to_host, [&](const State& host) {
    placed_for_the_cpu = true;
    return host;
  });
  EXPECT_FALSE(placed_for_the_cpu);
  EXPECT_EQ(state.device, Device::CPU);
}

}  // namespace
}  // namespace mmgen::models
