// The whole Wan pipeline with the transformer on the GPU (--device cuda) against diffusers'
// reference video for the wan-tiny fixture: given noise, and noise drawn from seed 42. The
// fixture folder is $MMGEN_FIXTURES (scripts/gpu.sh carries a copy to the GPU machine) or
// ../shared/fixtures; without it the test fails, saying so (it only runs where it was sent to run).
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/cuda/device_memory.h"
#include "core/error.h"
#include "core/file.h"
#include "core/safetensors.h"
#include "cuda_test_support.h"
#include "pipeline/model_index.h"
#include "pipeline/wan/wan_pipeline.h"

using namespace mmgen;
using namespace mmgen::cuda_testing;
namespace fs = std::filesystem;

int main() try {
  const char* from_environment = std::getenv("MMGEN_FIXTURES");
  const fs::path fixtures =
      from_environment ? fs::path(from_environment) : fs::path(MMGEN_SHARED_DIR) / "fixtures";
  const fs::path reference_dir = fixtures / "wan-tiny/reference";
  if (!fs::exists(reference_dir / "reference.safetensors")) {
    std::printf("wan_pipeline_cuda_test: no fixture at %s (set MMGEN_FIXTURES)\n",
                reference_dir.c_str());
    return 1;
  }
  const SafetensorsFile reference = SafetensorsFile::open(reference_dir / "reference.safetensors");
  const nlohmann::json settings =
      nlohmann::json::parse(read_text_file(reference_dir / "reference.json"));
  const WanPipeline pipeline(
      load_model_index(fs::path(MMGEN_SOURCE_DIR) / "examples/models/wan-tiny"));

  const auto& p = settings["pipeline"];
  WanGenerationInput input;
  input.prompt = p["prompt"];
  input.negative_prompt = p["negative_prompt"];
  input.height = p["height"];
  input.width = p["width"];
  input.num_frames = p["num_frames"];
  input.num_inference_steps = p["num_inference_steps"];
  input.guidance_scale = p["guidance_scale"];
  input.max_sequence_length = p["max_sequence_length"];
  input.cuda = true;

  WanGenerationInput given_noise = input;
  given_noise.initial_latents = reference.tensor("pipeline.noise").to(DType::F32).clone();
  const double error =
      relative_error(pipeline.generate(given_noise).frames, reference.tensor("pipeline.video"));
  expect(error < 1e-2, fmt::format("--device cuda, given noise: video relative error {:.2e} < "
                                   "1e-2 against diffusers",
                                   error));

  // --gpu-matmul-precision fp8: the blocks' products in e4m3. Its video error against diffusers
  // is measured and bounded at 3e-2 (sage_attn's FP8 P·V bound in wan_pipeline_sparse_cuda_test:
  // e4m3's 3 mantissa bits), and must exceed the bf16 run's, or the FP8 path did not run.
  WanGenerationInput fp8 = given_noise;
  fp8.fp8_products = true;
  const double fp8_error =
      relative_error(pipeline.generate(fp8).frames, reference.tensor("pipeline.video"));
  expect(fp8_error < 3e-2 && fp8_error > error,
         fmt::format("--device cuda --gpu-matmul-precision fp8, given noise: video relative error "
                     "{:.2e} < 3e-2 against diffusers, above bf16's {:.2e}",
                     fp8_error, error));

  WanGenerationInput seeded = input;
  seeded.seed = p["seed_for_video_seed42"];
  const double seeded_error =
      relative_error(pipeline.generate(seeded).frames, reference.tensor("pipeline.video_seed42"));
  expect(seeded_error < 1e-2, fmt::format("--device cuda, seed 42: video relative error {:.2e} < "
                                          "1e-2 against diffusers",
                                          seeded_error));

  // --max-gpu-memory: under a limit the text encoder leaves the GPU before the transformer comes
  // up, and the transformer leaves before the VAE decodes. The video is the resident run's to the
  // byte, and less stays on the GPU afterwards (only the VAE).
  auto& allocator = cuda::CachingAllocator::instance();
  const Tensor resident = pipeline.generate(given_noise).frames;
  const size_t resident_in_use = allocator.bytes_in_use();
  WanGenerationInput limited = given_noise;
  limited.stage_offload = true;
  allocator.set_limit(size_t(256) << 20);
  const Tensor offloaded = pipeline.generate(limited).frames;
  const size_t offloaded_in_use = allocator.bytes_in_use();
  expect(offloaded.nbytes() == resident.nbytes() &&
             std::memcmp(offloaded.raw(), resident.raw(), resident.nbytes()) == 0,
         "--max-gpu-memory 256M (stage offload): the video equals the resident run's to the byte");
  expect(offloaded_in_use < resident_in_use && allocator.bytes_reserved() <= allocator.limit(),
         fmt::format("stage offload: {} bytes stay in use after the run (resident run: {}), {} "
                     "reserved within the limit",
                     offloaded_in_use, resident_in_use, allocator.bytes_reserved()));
  // --gpu-offload blocks: the transformer's blocks stream in from page-locked host memory, two on
  // the GPU at a time; the video is still the resident run's to the byte.
  WanGenerationInput streamed = limited;
  streamed.stream_blocks = true;
  const Tensor streamed_video = pipeline.generate(streamed).frames;
  expect(streamed_video.nbytes() == resident.nbytes() &&
             std::memcmp(streamed_video.raw(), resident.raw(), resident.nbytes()) == 0,
         "--gpu-offload blocks: the video equals the resident run's to the byte");
  allocator.set_limit(0);

  // Several prompts in one batch of the GPU text encoder (what generate does with the prompt and
  // the negative prompt, and a prompt file ahead of its runs): each row as its own GPU forward
  // gives it, and as the CPU's float32 encoder gives it, within bf16's 1e-2.
  const std::vector<std::string> prompts = {input.prompt, input.negative_prompt, "a blue square"};
  const int64_t length = input.max_sequence_length;
  const std::vector<Tensor> together = pipeline.encode_prompts(prompts, length, true);
  std::vector<Tensor> alone;
  for (const std::string& prompt : prompts)
    alone.push_back(pipeline.encode_prompt(prompt, length, true));
  const std::vector<Tensor> on_cpu = pipeline.encode_prompts(prompts, length, false);
  for (size_t i = 0; i < prompts.size(); ++i) {
    const double to_alone = relative_error(together[i], alone[i]);
    const double to_cpu = relative_error(together[i], on_cpu[i]);
    expect(together[i].device() == Device::CPU && together[i].dtype() == DType::F32 &&
               together[i].dim() == 3 && together[i].size(0) == 1 && together[i].size(1) == length,
           fmt::format("prompt {} of a GPU batch: [1, {}, dim] float32 rows back on the host", i,
                       length));
    expect(to_alone < 1e-2 && to_cpu < 1e-2,
           fmt::format("prompt {} of a GPU batch of 3: vs alone on the GPU {:.2e}, vs the CPU "
                       "{:.2e} (< 1e-2)",
                       i, to_alone, to_cpu));
  }
  // A limit below what the transformer needs stops the run in one line that names the option,
  // and the pipeline can run again afterwards (the failed upload left nothing half-placed).
  allocator.set_limit(size_t(1) << 20);
  std::string refusal;
  try {
    pipeline.generate(limited);
  } catch (const Error& error) {
    refusal = error.what();
  }
  allocator.set_limit(0);
  expect(refusal.find("--max-gpu-memory") != std::string::npos &&
             refusal.find('\n') == std::string::npos,
         "a 1 MiB limit is refused in one line naming --max-gpu-memory: " + refusal);
  const Tensor again = pipeline.generate(given_noise).frames;
  expect(std::memcmp(again.raw(), resident.raw(), resident.nbytes()) == 0,
         "after the refused run, the resident run gives its video again to the byte");
  return finish("wan_pipeline_cuda_test");
} catch (const std::exception& error) {
  std::printf("wan_pipeline_cuda_test: error: %s\n", error.what());
  return 1;
}
