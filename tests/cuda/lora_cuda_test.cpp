// LoRAs on the GPU, merged at load and added at run time (core/low_rank.h): the product of a
// weight that carries an update against the CPU's float32 product with the merged weight, for
// every kind of product the models run (bf16 out, float32 out, the tanh GELU after the sum, one
// batched product of stacked weights, FP8 rows, a GGUF matrix's blocks, the float32 exact
// mode); then the Wan pipeline with two LoRAs (wan-tiny-lora) and FLUX with a diffusers and a
// kohya LoRA (flux-tiny-kohya) against diffusers' float32 results, in both modes, within the GPU
// tests' bf16 bound of 1e-2.
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

#include "core/file.h"
#include "core/gguf_writer.h"
#include "core/low_rank.h"
#include "core/ops.h"
#include "core/safetensors.h"
#include "cuda_test_support.h"
#include "models/dit/wan/wan_random_checkpoint.h"
#include "pipeline/component_loras.h"
#include "pipeline/flux/flux_pipeline.h"
#include "pipeline/model_index.h"
#include "pipeline/wan/wan_pipeline.h"

using namespace mmgen;
using namespace mmgen::cuda_testing;
namespace fs = std::filesystem;

namespace {

constexpr double kBound = 1e-2;

void check_products() {
  const int64_t out = 96, in = 64, rank = 4, rows = 37;
  const Tensor w = dit::random_tensor({out, in}, 0.0f, 0.3f, 1, DType::F32);
  const Tensor down = dit::random_tensor({rank, in}, 0.0f, 0.3f, 2, DType::F32);
  const Tensor up = dit::random_tensor({out, rank}, 0.0f, 0.3f, 3, DType::F32);
  const auto update = std::make_shared<const LowRankUpdate>(LowRankUpdate{down, up});
  Tensor merged = w.clone();
  ops::add_(merged, ops::linear(up, down.permute({1, 0}).contiguous()));
  const Tensor x = dit::random_tensor({rows, in}, 0.0f, 1.0f, 4, DType::F32);
  const Tensor bias = dit::random_tensor({out}, 0.0f, 0.5f, 5, DType::F32);
  const Tensor expected = ops::linear(x, merged, bias);
  const Tensor expected_gelu = ops::linear(x, merged, bias, DType::F32, Activation::GeluTanh);
  const Tensor plain = ops::linear(x, w, bias);

  const Tensor x_gpu = x.to(DType::BF16).to(Device::CUDA);
  const Tensor bias_bf16 = bias.to(DType::BF16).to(Device::CUDA);
  const Tensor weight = w.with_low_rank(update).to(DType::BF16).to(Device::CUDA);
  expect(weight.low_rank() && weight.low_rank()->up.device() == Device::CUDA &&
             weight.low_rank()->up.dtype() == DType::BF16,
         "a weight moved to the GPU takes its update there, in bf16");
  const auto check = [&](const char* what, const Tensor& actual, const Tensor& reference) {
    const double error = relative_error(actual, reference);
    // (The reference: the CPU's float32 product of the merged weight, or for FP8 rows the same
    // FP8 product of W plus the CPU's float32 update.)
    expect(error < kBound, fmt::format("{}: relative error {:.2e} < {:.0e} against its reference",
                                       what, error, kBound));
  };
  check("bf16 product", ops::linear(x_gpu, weight, bias_bf16, DType::BF16), expected);
  check("float32 result", ops::linear(x_gpu, weight, bias.to(Device::CUDA), DType::F32), expected);
  check("tanh GELU after the sum",
        ops::linear(x_gpu, weight, bias_bf16, DType::BF16, Activation::GeluTanh), expected_gelu);
  expect(relative_error(ops::linear(x_gpu, weight.without_low_rank(), bias_bf16, DType::BF16),
                        expected) > 5 * kBound,
         "without its update the product is far from the merged one (the check can fail)");
  // Stacked for one batched product (Z-Image's q/k/v), each with its own update.
  const Tensor other = dit::random_tensor({out, in}, 0.0f, 0.3f, 6, DType::F32);
  const std::vector<Tensor> stacked =
      ops::stack_weights({w.with_low_rank(update), other}, DType::BF16, Device::CUDA);
  const std::vector<Tensor> each = ops::linear_each(x_gpu, stacked, DType::BF16);
  check("batched product, first (with an update)", each[0], ops::linear(x, merged));
  check("batched product, second (none)", each[1], ops::linear(x, other));
  // FP8 rows: the update beside the quantized product, held against that same FP8 product of W
  // plus the CPU's float32 update (e4m3's own error is the FP8 products' bound, not the LoRA's).
  const Tensor fp8 = weight.to(DType::F8E4M3Rows);
  Tensor fp8_expected =
      ops::linear(x_gpu, fp8.without_low_rank(), bias_bf16, DType::BF16).to(Device::CPU);
  fp8_expected = fp8_expected.to(DType::F32);
  ops::add_(fp8_expected, ops::linear(ops::linear(x, down), up));
  check("FP8 rows", ops::linear(x_gpu, fp8, bias_bf16, DType::BF16), fp8_expected);
  Tensor fp8_gelu_expected = fp8_expected.clone();
  ops::activate_(fp8_gelu_expected, Activation::GeluTanh);
  check("FP8 rows, tanh GELU after the sum",
        ops::linear(x_gpu, fp8, bias_bf16, DType::BF16, Activation::GeluTanh), fp8_gelu_expected);
  Tensor blocks = Tensor::empty({out, in / 32}, DType::Q8_0);
  gguf::quantize_q8_0(w.data<float>(), w.numel(), blocks.raw());
  const Tensor q8 = blocks.with_low_rank(update).to(Device::CUDA);
  check("q8_0 blocks", ops::linear(x_gpu, q8, bias_bf16, DType::BF16), expected);
  // The exact mode: float32 throughout.
  const Tensor exact = ops::linear(x.to(Device::CUDA), w.with_low_rank(update).to(Device::CUDA),
                                   bias.to(Device::CUDA), DType::F32);
  const double exact_error = relative_error(exact, expected);
  expect(exact_error < 1e-5,
         fmt::format("float32 exact mode: relative error {:.2e} < 1e-5", exact_error));
  (void)plain;
}

const char* mode_name(lora::LoraMode mode) {
  return mode == lora::LoraMode::Merge ? "merged" : "runtime";
}

void check_wan(const fs::path& fixtures) {
  const fs::path tiny = fixtures / "wan-tiny";
  const fs::path lora = fs::path(MMGEN_SOURCE_DIR) / "tests/fixtures/wan-tiny-lora";
  const SafetensorsFile reference = SafetensorsFile::open(lora / "reference.safetensors");
  const auto settings = nlohmann::json::parse(read_text_file(lora / "reference.json"))["settings"];
  for (const lora::LoraMode mode : {lora::LoraMode::Merge, lora::LoraMode::Runtime}) {
    ModelIndex index = load_model_index(tiny / "model");
    attach_loras(index,
                 {{lora / "a_diffusers.safetensors", 0.6}, {lora / "b_original.safetensors", 1.3}},
                 mode);
    const WanPipeline pipeline(index);
    WanGenerationInput input;
    input.prompt = settings["prompt"];
    input.negative_prompt = settings["negative_prompt"];
    input.height = settings["height"];
    input.width = settings["width"];
    input.num_frames = settings["num_frames"];
    input.num_inference_steps = settings["num_inference_steps"];
    input.guidance_scale = settings["guidance_scale"];
    input.max_sequence_length = settings["max_sequence_length"];
    input.cuda = true;
    input.initial_latents = SafetensorsFile::open(tiny / "reference/reference.safetensors")
                                .tensor("pipeline.noise")
                                .to(DType::F32)
                                .clone();
    const Tensor video = pipeline.generate(input).frames;
    const double error = relative_error(video, reference.tensor("both.video"));
    const double apart = relative_error(video, reference.tensor("a.video"));
    // (b's share of the video: far beyond the error.)
    expect(error < kBound && apart > 10 * error,
           fmt::format("Wan, two LoRAs {} on the GPU: video relative error {:.2e} < {:.0e} against "
                       "diffusers (and {:.2e} from the video of one LoRA)",
                       mode_name(mode), error, kBound, apart));
    // FP8 products (--gpu-matmul-precision fp8): the LoRA beside e4m3 weights, within the FP8
    // run's bound of wan_pipeline_cuda_test.
    input.fp8_products = true;
    const double fp8_error =
        relative_error(pipeline.generate(input).frames, reference.tensor("both.video"));
    expect(fp8_error < 3e-2,
           fmt::format("Wan, two LoRAs {} on the GPU with FP8 products: video relative error "
                       "{:.2e} < 3e-2 against diffusers",
                       mode_name(mode), fp8_error));
  }
}

// FLUX with LoRAs `a` and `b` at 0.6 and 1.3 against the fixture folder's both.image.
void check_flux(const fs::path& fixture, const fs::path& a, const fs::path& b, const char* what) {
  const fs::path fixtures = fs::path(MMGEN_SOURCE_DIR) / "tests/fixtures";
  const fs::path tiny = fixtures / "flux-tiny";
  const SafetensorsFile reference = SafetensorsFile::open(fixture / "reference.safetensors");
  const auto request =
      nlohmann::json::parse(read_text_file(tiny / "reference/reference.json"))["pipeline"];
  for (const lora::LoraMode mode : {lora::LoraMode::Merge, lora::LoraMode::Runtime}) {
    ModelIndex index = load_model_index(tiny / "model");
    attach_loras(index, {{a, 0.6}, {b, 1.3}}, mode);
    const FluxPipeline pipeline(index);
    FluxGenerationInput input;
    input.prompt = request["prompt"];
    input.height = request["height"];
    input.width = request["width"];
    input.num_inference_steps = request["num_inference_steps"];
    input.guidance_scale = request["guidance_scale"];
    input.max_sequence_length = request["max_sequence_length"];
    input.cuda = true;
    input.initial_latents =
        SafetensorsFile::open(tiny / "reference/reference.safetensors").tensor("pipeline.noise");
    const double error =
        relative_error(pipeline.generate(input).frames, reference.tensor("both.image"));
    expect(error < kBound,
           fmt::format("FLUX, {} {} on the GPU: image relative error {:.2e} < {:.0e} against "
                       "diffusers",
                       what, mode_name(mode), error, kBound));
  }
}

}  // namespace

int main() try {
  const char* from_environment = std::getenv("MMGEN_FIXTURES");
  const fs::path fixtures =
      from_environment ? fs::path(from_environment) : fs::path(MMGEN_SHARED_DIR) / "fixtures";
  check_products();
  if (fs::exists(fixtures / "wan-tiny/model/model_index.json"))
    check_wan(fixtures);
  else
    expect(false, "no wan-tiny fixture at " + fixtures.string() + " (set MMGEN_FIXTURES)");
  const fs::path lora_fixtures = fs::path(MMGEN_SOURCE_DIR) / "tests/fixtures";
  check_flux(lora_fixtures / "flux-tiny-kohya",
             lora_fixtures / "flux-tiny-lora/lora_diffusers.safetensors",
             lora_fixtures / "flux-tiny-kohya/b_kohya.safetensors", "a diffusers and a kohya LoRA");
  // The CLIP text encoder on the GPU's paged backend with LoRAs of its own.
  const fs::path text = lora_fixtures / "flux-tiny-text-encoder-lora";
  check_flux(text, text / "a_diffusers.safetensors", text / "b_kohya.safetensors",
             "LoRAs on the transformer and the CLIP text encoder");
  return finish("lora_cuda_test");
} catch (const std::exception& e) {
  std::printf("lora_cuda_test: %s\n", e.what());
  return 1;
}
