// The Wan VAE decoder placed on the GPU (one class: WanVaeDecoder::set_device) against the same
// decoder on the CPU (float32, itself checked against diffusers to 1e-5) on the same weights and
// latents, in both precisions: TF32 within the 3e-3 per-component
// bound, FP32 (three-TF32 products) at float32 rounding level. Models: wan-tiny (8 channels: the
// kernel's general gather path), a random-weight decoder with Wan2.1's structure at a third of its
// width (16-aligned channels, batch 2, several pixel tiles), one with 48/96-channel layers (the
// kernel's 96-row blocks) and an odd-sized one (20/40 channels, 5x7 latents). Then the wan-tiny
// fixture latents against diffusers' decoded video
// ($MMGEN_FIXTURES or ../shared/fixtures; without it the test fails, saying so).
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "core/conv.h"
#include "core/cuda/device_memory.h"
#include "cuda_test_support.h"
#include "models/dit/wan/wan_random_checkpoint.h"
#include "models/vae/tiled_decode.h"
#include "models/vae/wan_vae_decoder.h"
#include "models/vae/wan_vae_random_checkpoint.h"

using namespace mmgen;
using namespace mmgen::cuda_testing;
namespace fs = std::filesystem;

namespace {

struct Difference {
  double relative = INFINITY, max_abs = INFINITY;
};

Difference compare(const Tensor& actual, const Tensor& expected) {
  Difference d;
  if (actual.shape() != expected.shape()) return d;
  const Tensor a = actual.to(DType::F32).contiguous(), e = expected.to(DType::F32).contiguous();
  double difference = 0, norm = 0, max_abs = 0;
  for (int64_t i = 0; i < e.numel(); ++i) {
    const double x = a.data<float>()[i], y = e.data<float>()[i];
    if (!std::isfinite(x)) return d;
    difference += (x - y) * (x - y);
    norm += y * y;
    max_abs = std::max(max_abs, std::abs(x - y));
  }
  d.relative = std::sqrt(difference / norm);
  d.max_abs = max_abs;
  return d;
}

// Both precisions of the decoder on the GPU against the same decoder on the CPU, on `latents`.
void check_against_cpu(const std::string& name, vae::WanVaeDecoder& decoder,
                       const Tensor& latents) {
  decoder.set_device(Device::CPU);
  const Tensor expected = decoder.decode(latents);
  vae::WanVaeDecoder& gpu = decoder;
  gpu.set_device(Device::CUDA);
  expect(gpu.device() == Device::CUDA && gpu.resident_weight_bytes() > 0,
         name + ": set_device(CUDA) uploads the weights");
  int calls = 0;
  const Tensor tf32 = gpu.decode(latents, [&](int done, int total) {
    ++calls;
    expect(done == calls && total == latents.size(0) * latents.size(2),
           fmt::format("{}: progress {}/{}", name, done, total));
  });
  const Difference d = compare(tf32, expected);
  expect(d.relative < 3e-3, fmt::format("{} {} -> {}, TF32: relative error {:.2e} < 3e-3 vs the "
                                        "CPU decoder (max abs {:.2e})",
                                        name, shape_string(latents.shape()),
                                        shape_string(tf32.shape()), d.relative, d.max_abs));
  gpu.set_device(Device::CUDA, ops::ConvPrecision::FP32);
  const Difference exact = compare(gpu.decode(latents), expected);
  expect(exact.relative < 5e-5, fmt::format("{}, FP32 (3xTF32): relative error {:.2e} < 5e-5 vs "
                                            "the CPU decoder (max abs {:.2e})",
                                            name, exact.relative, exact.max_abs));
  decoder.set_device(Device::CPU);
}

// Rounding to TF32 in the norm instead of in the convolution kernel changes no bit: a norm (with
// SiLU) then a 3x3x3 causal convolution with one remembered frame, both ways.
void check_rounding_in_norms() {
  const int64_t channels = 32;
  const Tensor x = dit::random_tensor({2, channels, 6, 10}, 0.0f, 1.5f, 11, DType::F32);
  const Tensor history = dit::random_tensor({1, channels, 6, 10}, 0.0f, 1.5f, 12, DType::F32);
  const Tensor gamma = dit::random_tensor({channels}, 1.0f, 0.2f, 13, DType::F32);
  const ops::Conv conv =
      ops::Conv(dit::random_tensor({48, channels, 3, 3, 3}, 0.0f, 0.05f, 14, DType::F32),
                dit::random_tensor({48}, 0.0f, 0.1f, 15, DType::F32), {48, channels, 3, 3, 3})
          .to(Device::CUDA);
  const Tensor g = gamma.to(Device::CUDA);
  Tensor results[2];
  for (int rounded = 0; rounded < 2; ++rounded) {
    ops::ConvInputs inputs;
    inputs.history = ops::channel_rms_norm(history.to(Device::CUDA), g, true, rounded == 1);
    inputs.input_tf32_rounded = rounded == 1;
    const Tensor normed = ops::channel_rms_norm(x.to(Device::CUDA), g, true, rounded == 1);
    results[rounded] = ops::conv3d(conv, normed, inputs).to(Device::CPU);
  }
  expect(std::memcmp(results[0].raw(), results[1].raw(), results[0].nbytes()) == 0,
         "TF32: rounding in the norms gives the same bits as rounding in the kernel");
}

// --vae-tiling on the GPU: the tiles' tails run on the device, the heads and the blend on the host.
// Against the same tiles on the CPU (the GPU's TF32 bound), with one tile against the GPU's own
// untiled decode (the same convolutions on the same regions: the same bits), and the progress
// counting tiles x latent frames.
void check_tiled_decode(const std::string& name, vae::WanVaeDecoder& decoder, const Tensor& latents,
                        const vae::TileLayout& layout) {
  decoder.set_device(Device::CPU);
  const Tensor expected = vae::decode_tiled(decoder, latents, layout);
  decoder.set_device(Device::CUDA);
  int calls = 0, last_total = 0;
  const Tensor tiled = vae::decode_tiled(decoder, latents, layout, [&](int done, int total) {
    ++calls;
    last_total = total;
    expect(done == calls, fmt::format("{}: tiled progress {}/{}", name, done, total));
  });
  expect(calls == last_total && calls > latents.size(2),
         fmt::format("{}: {} progress calls over several tiles", name, calls));
  const Difference d = compare(tiled, expected);
  expect(d.relative < 3e-3,
         fmt::format("{} tiled {} on the GPU: relative error {:.2e} < 3e-3 vs "
                     "the same tiles on the CPU (max abs {:.2e})",
                     name, shape_string(latents.shape()), d.relative, d.max_abs));
  const Tensor whole = decoder.decode(latents);
  const Tensor one_tile = vae::decode_tiled(decoder, latents, vae::TileLayout{1024, 4});
  const Difference same = compare(one_tile, whole);
  expect(same.max_abs == 0.0, fmt::format("{}: one tile on the GPU is its untiled decode (max abs "
                                          "{:.2e})",
                                          name, same.max_abs));
  decoder.set_device(Device::CPU);
}

vae::WanVaeDecoder random_decoder(const vae::WanVaeConfig& config, const std::string& file_name) {
  const fs::path file = fs::temp_directory_path() / file_name;
  write_safetensors(file, vae::random_decoder_checkpoint(config), {{"format", "pt"}});
  return vae::WanVaeDecoder(config, WeightStore::open_file(file));
}

}  // namespace

int main() try {
  const fs::path tiny_folder = fs::path(MMGEN_SOURCE_DIR) / "examples/models/wan-tiny/vae";
  check_rounding_in_norms();
  vae::WanVaeDecoder tiny = vae::WanVaeDecoder::open_folder(tiny_folder);
  // Three latent frames: the feature cache past the first ("Rep") chunk.
  check_against_cpu("wan-tiny", tiny,
                    dit::random_tensor({1, 16, 3, 4, 6}, 0.0f, 1.7f, 5, DType::F32));

  vae::WanVaeConfig
      third;  // Wan2.1's decoder structure (dim_mult 1,2,4,4; 2 res blocks) at base 32
  third.base_dim = 32;
  vae::WanVaeDecoder decoder_32 = random_decoder(third, "mmgen_vae_cuda_test_32.safetensors");
  check_against_cpu("random base-32 decoder", decoder_32,
                    dit::random_tensor({2, 16, 3, 12, 20}, 0.0f, 1.5f, 6, DType::F32));
  // 8-latent-pixel cores overlapping by 2 on a 12 x 20 plane: 2 x 3 tiles, batch 2, 3 frames.
  check_tiled_decode("random base-32 decoder", decoder_32,
                     dit::random_tensor({2, 16, 3, 12, 20}, 0.0f, 1.5f, 6, DType::F32),
                     vae::TileLayout{8, 2});

  vae::WanVaeConfig wide;  // 96-channel blocks: the 128-thread kernel blocks, as the real VAE's
  wide.base_dim = 48;
  wide.dim_mult = {1, 2, 2, 2};
  wide.num_res_blocks = 1;
  vae::WanVaeDecoder decoder_48 = random_decoder(wide, "mmgen_vae_cuda_test_48.safetensors");
  check_against_cpu("random base-48 decoder", decoder_48,
                    dit::random_tensor({1, 16, 2, 8, 10}, 0.0f, 1.5f, 8, DType::F32));

  vae::WanVaeConfig odd;  // channels 20/40: the general gather path on several tiles
  odd.base_dim = 20;
  odd.dim_mult = {1, 2, 2};
  odd.num_res_blocks = 1;
  odd.temperal_downsample = {true, false};
  vae::WanVaeDecoder decoder_20 = random_decoder(odd, "mmgen_vae_cuda_test_20.safetensors");
  check_against_cpu("random odd decoder", decoder_20,
                    dit::random_tensor({1, 16, 2, 5, 7}, 0.0f, 1.5f, 7, DType::F32));

  tiny.set_device(Device::CUDA);
  {
    const vae::WanVaeDecoder& gpu = tiny;
    const std::string message = error_message([&] { gpu.decode(Tensor::zeros({1, 4, 2, 4, 6})); });
    expect(message.find("expected latents [batch, 16, frames, height, width]") != std::string::npos,
           "wrong latent channels give one clear error: " + message);
  }

  const char* from_environment = std::getenv("MMGEN_FIXTURES");
  const fs::path fixtures =
      from_environment ? fs::path(from_environment) : fs::path(MMGEN_SHARED_DIR) / "fixtures";
  const fs::path reference_file = fixtures / "wan-tiny/reference/reference.safetensors";
  if (!fs::exists(reference_file)) {
    expect(false, "no fixture at " + reference_file.string() + " (set MMGEN_FIXTURES)");
  } else {
    const WeightStore reference = WeightStore::open_file(reference_file);
    const Difference d =
        compare(tiny.decode(reference.get_f32("vae.latents")), reference.get_f32("vae.decoded"));
    expect(d.relative < 3e-3, fmt::format("wan-tiny fixture latents, TF32: relative error {:.2e} "
                                          "< 3e-3 vs diffusers (max abs {:.2e})",
                                          d.relative, d.max_abs));
  }
  std::printf("peak GPU memory handed out: %.1f MiB\n",
              cuda::CachingAllocator::instance().peak_bytes_in_use() / 1048576.0);
  return finish("wan_vae_cuda_test");
} catch (const std::exception& error) {
  std::printf("wan_vae_cuda_test: error: %s\n", error.what());
  return 1;
}
