// The Z-Image transformer placed on the GPU (one class: ZImageTransformer::set_device, bf16
// products) against the same model on the CPU (float32, itself checked against diffusers): a
// random checkpoint with Z-Image-Turbo's head size (128, the flash kernels) on a ragged batch of
// two items (different latent sizes, caption lengths and timesteps, padded image and caption
// parts), and the zimage-tiny fixture's two-item batch (head size 16, the reference kernel)
// against what diffusers computed, at both of its timesteps.
#include <algorithm>
#include <cmath>
#include <filesystem>

#include "core/cuda/device_memory.h"
#include "core/json.h"
#include "core/safetensors.h"
#include "cuda_test_support.h"
#include "models/dit/zimage/zimage_block.h"
#include "models/dit/zimage/zimage_random_checkpoint.h"
#include "models/dit/zimage/zimage_transformer.h"

using namespace mmgen;
using namespace mmgen::cuda_testing;
namespace fs = std::filesystem;

namespace {

Tensor wave(const Shape& shape, float frequency, float amplitude) {
  Tensor out = Tensor::empty(shape);
  for (int64_t i = 0; i < out.numel(); ++i)
    out.data<float>()[i] = amplitude * std::sin(frequency * float(i) + 0.3f);
  return out;
}

// bf16 products and a bf16 residual-stream input to each product: about 3e-3 relative per
// forward through a few blocks, as Wan's GPU test sees.
constexpr double kBf16Bound = 1e-2;

// Every block's modulation from one stacked bf16 product on the GPU against one float32 product
// per block on the CPU, at Z-Image-Turbo's widths (32 modulated blocks of 4 x 3840 rows, adaLN
// width 256) with two unmodulated blocks between them, as the transformer lists its stacks.
void stacked_modulation_case() {
  const int64_t dim = 3840, width = 256;
  std::vector<dit::ZImageBlockWeights> blocks;
  for (int64_t b = 0; b < 34; ++b) {
    dit::ZImageBlockWeights w;
    const float f = 0.01f * float(b + 1);
    w.attention_norm1 = wave({dim}, 0.7f + f, 1.0f);
    w.ffn_norm1 = wave({dim}, 0.3f + f, 0.8f);
    if (b < 2 || b >= 4) {
      // bf16-exact weights, so both sides multiply the same values.
      w.modulation_weight = wave({4 * dim, width}, 0.013f + f, 0.05f).to(DType::BF16);
      w.modulation_bias = wave({4 * dim}, 0.29f + f, 0.5f);
    }
    blocks.push_back(w);
  }
  std::vector<const dit::ZImageBlockWeights*> modulated;
  for (const auto& w : blocks)
    if (w.modulation_weight.defined()) modulated.push_back(&w);
  const dit::ZImageStackedModulation stacked =
      dit::stack_modulations(modulated, Device::CUDA, DType::BF16);
  std::vector<float> adaln(static_cast<size_t>(width));
  for (size_t i = 0; i < adaln.size(); ++i) adaln[i] = std::sin(0.37f * float(i)) * 2.0f;
  const auto expected = dit::zimage_modulations(blocks, adaln, Device::CPU);
  const auto actual = dit::zimage_modulations(blocks, adaln, Device::CUDA, &stacked);
  double worst = 0;
  bool gates_right = true;
  for (size_t b = 0; b < blocks.size(); ++b) {
    const auto& e = expected[b];
    const auto& a = actual[b];
    worst = std::max({worst, relative_error(a.attention_norm, e.attention_norm),
                      relative_error(a.ffn_norm, e.ffn_norm)});
    gates_right = gates_right && a.attention_gate.defined() == e.attention_gate.defined();
    if (e.attention_gate.defined())
      worst = std::max({worst, relative_error(a.attention_gate, e.attention_gate),
                        relative_error(a.ffn_gate, e.ffn_gate)});
  }
  expect(gates_right && worst < kBf16Bound,
         fmt::format("34 blocks' modulations from one stacked bf16 product vs one float32 product "
                     "per block: worst relative error {:.2e} < {:.0e}",
                     worst, kBf16Bound));
}

void random_checkpoint_case() {
  dit::ZImageConfig config = dit::ZImageConfig::from_json({{"dim", 256},
                                                           {"n_heads", 2},
                                                           {"n_kv_heads", 2},
                                                           {"n_layers", 2},
                                                           {"n_refiner_layers", 1},
                                                           {"cap_feat_dim", 80},
                                                           {"axes_dims", {32, 48, 48}},
                                                           {"axes_lens", {256, 64, 64}}});
  const fs::path file = fs::temp_directory_path() / "mmgen_zimage_cuda_test.safetensors";
  write_safetensors(file, dit::zimage_random_checkpoint(config), {{"format", "pt"}});
  const dit::ZImageTransformer cpu(config, WeightStore::open_file(file));
  dit::ZImageTransformer gpu(config, WeightStore::open_file(file));
  gpu.set_device(Device::CUDA);
  expect(gpu.device() == Device::CUDA && gpu.resident_weight_bytes() > 0,
         "set_device(CUDA) uploads the weights");
  // Item 0: 10 x 14 latents (35 image tokens, padded to 64) and 7 caption tokens; item 1:
  // 16 x 16 (64 tokens, no image padding) and 33 caption tokens (padded to 64).
  const std::vector<dit::ZImageItem> batch = {
      {wave({16, 1, 10, 14}, 0.37f, 1.2f), wave({7, 80}, 0.11f, 0.8f), 0.7f},
      {wave({16, 1, 16, 16}, 0.23f, 1.0f), wave({33, 80}, 0.17f, 0.6f), 0.2f}};
  const std::vector<Tensor> expected = cpu.forward(batch);
  const std::vector<Tensor> actual = gpu.forward(batch);
  for (size_t i = 0; i < batch.size(); ++i) {
    const double error = relative_error(actual[i], expected[i]);
    expect(error < kBf16Bound, fmt::format("random checkpoint (head size 128), item {}: GPU vs "
                                           "CPU relative error {:.2e} < {:.0e}",
                                           i, error, kBf16Bound));
  }
  // The items are independent on the GPU too: item 1 alone gives its batch result.
  const double alone = relative_error(gpu.forward({batch[1]})[0], actual[1]);
  expect(alone < 1e-5, fmt::format("item 1 alone vs in the batch: {:.2e} < 1e-5", alone));
  fs::remove(file);
}

void fixture_case() {
  const char* from_environment = std::getenv("MMGEN_FIXTURES");
  const fs::path tiny =
      (from_environment ? fs::path(from_environment) : fs::path(MMGEN_SHARED_DIR) / "fixtures") /
      "zimage-tiny";
  const fs::path reference_file = tiny / "reference" / "reference.safetensors";
  if (!fs::exists(reference_file)) {
    expect(false, "no fixture at " + reference_file.string() + " (set MMGEN_FIXTURES)");
    return;
  }
  const WeightStore reference = WeightStore::open_file(reference_file);
  const nlohmann::json json = read_json_object(tiny / "reference" / "reference.json");
  dit::ZImageTransformer gpu = dit::ZImageTransformer::load(tiny / "model" / "transformer");
  gpu.set_device(Device::CUDA);
  for (int k = 0; k < 2; ++k) {
    const float timestep = json.at("transformer.t" + std::to_string(k)).get<float>();
    std::vector<dit::ZImageItem> batch;
    for (int j = 0; j < 2; ++j)
      batch.push_back({reference.get_f32("transformer.x" + std::to_string(j)),
                       reference.get_f32("text_encoder.prompt" + std::to_string(j)), timestep});
    const std::vector<Tensor> out = gpu.forward(batch);
    for (int j = 0; j < 2; ++j) {
      const std::string name = "transformer.out" + std::to_string(k) + "_item" + std::to_string(j);
      const double error = relative_error(out[size_t(j)], reference.get_f32(name));
      expect(error < kBf16Bound, fmt::format("zimage-tiny {}: GPU vs diffusers relative error "
                                             "{:.2e} < {:.0e}",
                                             name, error, kBf16Bound));
    }
  }
}

}  // namespace

int main() try {
  stacked_modulation_case();
  random_checkpoint_case();
  fixture_case();
  std::printf("peak GPU memory handed out: %.1f MiB\n",
              cuda::CachingAllocator::instance().peak_bytes_in_use() / 1048576.0);
  return finish("zimage_transformer_cuda_test");
} catch (const std::exception& error) {
  std::printf("zimage_transformer_cuda_test: error: %s\n", error.what());
  return 1;
}
