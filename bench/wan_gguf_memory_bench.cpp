// Peak memory and time of one CPU forward of a Wan2.1-1.3B-shaped transformer (30 layers, 12
// heads x 128, ffn 8960, text_dim 4096; random weights) from its bf16 safetensors and from the
// q8_0 and q4_k GGUFs and the FP8 (e4m3, scaled) safetensors `mmgen convert` writes of it. Each run
// is its own process, so each peak resident set (getrusage) is that run's alone: the mapped
// checkpoint pages the forward touched, one block's float32 weights, the activations.
//
// usage: wan_gguf_memory_bench --make DIR   (writes DIR/bf16, DIR/q8_0, DIR/q4_k, DIR/fp8_e4m3)
//        wan_gguf_memory_bench --run DIR/<one of them> [--frames 1] [--out FILE.npy]
// The 480x832 request (30x52 latent patches a frame, 512 text tokens) is the issue's; --frames
// sets its length (1: 1560 tokens).
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>

#include "core/error.h"
#include "core/fp8_convert.h"
#include "core/gguf_convert.h"
#include "core/npy.h"
#include "core/safetensors.h"
#include "models/dit/wan/wan_random_checkpoint.h"
#include "models/dit/wan/wan_transformer.h"

using namespace mmgen;
namespace fs = std::filesystem;

namespace {

nlohmann::json config_1_3b() {
  return {{"_class_name", "WanTransformer3DModel"},
          {"attention_head_dim", 128},
          {"cross_attn_norm", true},
          {"eps", 1e-6},
          {"ffn_dim", 8960},
          {"freq_dim", 256},
          {"in_channels", 16},
          {"num_attention_heads", 12},
          {"num_layers", 30},
          {"out_channels", 16},
          {"patch_size", {1, 2, 2}},
          {"qk_norm", "rms_norm_across_heads"},
          {"rope_max_seq_len", 1024},
          {"text_dim", 4096}};
}

double peak_rss_gib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return double(usage.ru_maxrss) * 1024.0 / double(1 << 30);  // ru_maxrss: KiB on Linux
}

}  // namespace

int main(int argc, char** argv) try {
  std::string make, run, out;
  int64_t frames = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--make")
      make = value;
    else if (flag == "--run")
      run = value;
    else if (flag == "--frames")
      frames = std::stoll(value);
    else if (flag == "--out")
      out = value;
    else
      fail("unknown flag {}", flag);
  }
  if (!make.empty()) {
    const nlohmann::json config = config_1_3b();
    for (const char* kind : {"bf16", "q8_0", "q4_k", "fp8_e4m3"}) {
      fs::create_directories(fs::path(make) / kind);
      std::ofstream(fs::path(make) / kind / "config.json") << config.dump(2);
    }
    const fs::path weights = fs::path(make) / "bf16" / "diffusion_pytorch_model.safetensors";
    write_safetensors(weights,
                      dit::random_checkpoint(dit::WanTransformerConfig::from_json(config, "bench")),
                      {{"format", "pt"}});
    for (const auto& [kind, type] :
         {std::pair{"q8_0", gguf::GgmlType::Q8_0}, std::pair{"q4_k", gguf::GgmlType::Q4_K}}) {
      const auto summary = gguf::convert_to_gguf(WeightStore::open_file(weights),
                                                 fs::path(make) / kind / "model.gguf", type,
                                                 {{"general.architecture", "wan"}});
      std::printf("wrote %s/%s: bf16 %.2f GB, %s %.2f GB (%lld of %lld tensors %s)\n", make.c_str(),
                  kind, double(summary.bytes_in) / 1e9, kind, double(summary.bytes_out) / 1e9,
                  (long long)summary.converted, (long long)summary.tensors, kind);
    }
    const auto fp8 = fp8::convert_to_fp8(WeightStore::open_file(weights),
                                         fs::path(make) / "fp8_e4m3" / "model.safetensors", {});
    std::printf("wrote %s/fp8_e4m3: %.2f GB (%lld of %lld tensors e4m3)\n", make.c_str(),
                double(fp8.bytes_out) / 1e9, (long long)fp8.converted, (long long)fp8.tensors);
    return 0;
  }
  check(!run.empty(), "usage: wan_gguf_memory_bench --make DIR | --run FOLDER [--frames N]");
  const dit::WanTransformer model = dit::WanTransformer::load(run);
  const int64_t latent_frames = (frames - 1) / 4 + 1;
  const Tensor latents =
      dit::random_tensor({1, 16, latent_frames, 60, 104}, 0.0f, 1.0f, 5, DType::F32);
  const Tensor text = dit::random_tensor({1, 512, 4096}, 0.0f, 0.3f, 6, DType::F32);
  const auto start = std::chrono::steady_clock::now();
  const Tensor prediction = model.forward(latents, 700.0f, text);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!out.empty()) write_npy(out, prediction);
  std::printf("%s: one forward, %lld tokens, %.1f s, peak resident %.3f GiB\n", run.c_str(),
              (long long)(latent_frames * 30 * 52), seconds, peak_rss_gib());
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "wan_gguf_memory_bench: %s\n", e.what());
  return 1;
}
