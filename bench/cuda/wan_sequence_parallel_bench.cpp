// A Wan2.1-14B-wide transformer (40 heads x 128, ffn 13824, random bf16 weights; --layers of its
// 40 blocks) at 720x1280x81 (75600 tokens) with 512 text tokens, one forward over N GPUs with
// Ulysses sequence parallel, one process per GPU (started as `mmgen generate --gpus N` starts
// them). Prints rank 0's seconds per forward (median of repeats after a warm-up). Run it with
// --gpus 1 and --gpus N for the scaling without the pipeline around it; --independent runs the
// whole one-GPU forward on every GPU at once with no exchange, which shows what sharing the host
// (power, memory, PCIe) costs by itself. MMGEN_OP_PROFILE=sync prints each rank's GPU time per
// operation (core/op_profile.h).
// usage: wan_sequence_parallel_bench [--gpus N] [--layers 4] [--frames 81] [--repeats 3]
//                                    [--independent 1]
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "core/cuda/device_memory.h"
#include "core/error.h"
#include "core/op_profile.h"
#include "core/safetensors.h"
#include "generate/multi_gpu.h"
#include "models/dit/wan/wan_random_checkpoint.h"
#include "models/dit/wan/wan_transformer.h"

using namespace mmgen;
namespace fs = std::filesystem;

int main(int argc, char** argv) try {
  if (cli::is_started_rank()) cli::prepare_started_rank();
  int64_t gpus = 1, layers = 4, frames = 81, repeats = 3, independent = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const int64_t value = std::stoll(argv[i + 1]);
    if (flag == "--gpus")
      gpus = value;
    else if (flag == "--layers")
      layers = value;
    else if (flag == "--frames")
      frames = value;
    else if (flag == "--repeats")
      repeats = value;
    else if (flag == "--independent")
      independent = value;
    else if (flag == "--seed")
      continue;  // what the leader adds for the ranks it starts
    else
      fail("unknown flag {}", flag);
  }
  dit::WanTransformerConfig config;
  config.num_attention_heads = 40;
  config.attention_head_dim = 128;
  config.ffn_dim = 13824;
  config.num_layers = layers;
  config.text_dim = 4096;
  // On tmpfs where there is one: the GPU machine's disk writes gigabytes slowly.
  const fs::path folder = fs::exists("/dev/shm") ? fs::path("/dev/shm") : fs::temp_directory_path();
  const fs::path file =
      folder / ("mmgen_wan_14b_wide_" + std::to_string(layers) + "_layers.safetensors");
  // The leader writes it before it starts the other ranks, which only read it.
  if (!cli::is_started_rank() && !fs::exists(file))
    write_safetensors(file, dit::random_checkpoint(config), {{"format", "pt"}});

  cli::JoinedRanks ranks;
  dist::Communicator* group = nullptr;
  if (gpus > 1) {
    Request request;
    request.gpus = int(gpus);
    request.device = "cuda";
    ranks = cli::join_ranks(request, find_pipeline("WanPipeline", "bench"));
    group = ranks.run->world.get();
  }
  const int rank = group ? group->rank() : 0;
  // Each rank's share of the cores, as `mmgen generate --gpus N` gives it.
  omp_set_num_threads(std::max(1, omp_get_num_procs() / int(gpus)));
  const int64_t latent_frames = (frames - 1) / 4 + 1, tokens = latent_frames * 45 * 80;
  attention::SequenceParallel sequence;
  if (group && !independent) {
    sequence.group = group;
    sequence.shards = dist::SequenceShards::balanced(tokens, group->size());
  }

  dit::WanTransformer gpu(config, WeightStore::open_file(file));
  gpu.set_device(Device::CUDA);
  const Tensor latents =
      dit::random_tensor({1, 16, latent_frames, 90, 160}, 0.0f, 1.7f, 101, DType::F32);
  const Tensor text = dit::random_tensor({1, 512, config.text_dim}, 0.0f, 0.3f, 102, DType::F32);
  attention::Layers attention;
  const attention::SequenceParallel* sharded = sequence.group ? &sequence : nullptr;
  gpu.forward(latents, 999.0f, text, {}, &attention, sharded);  // warm-up
  profile::reset();
  std::vector<double> seconds;
  for (int64_t i = 0; i < repeats; ++i) {
    if (group) {  // the ranks start together
      Tensor barrier = Tensor::zeros({1}, DType::F32, Device::CUDA);
      group->broadcast(barrier, 0);
      (void)barrier.to(Device::CPU);
    }
    const auto start = std::chrono::steady_clock::now();
    gpu.forward(latents, 999.0f - 10.0f * float(i), text, {}, &attention, sharded);
    seconds.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(seconds.begin(), seconds.end());
  if (rank == 0 || independent)
    std::printf(
        "rank %d: %lld layers of Wan2.1-14B width, %lld tokens, %lld GPU(s)%s: forward median "
        "%.3f s (min %.3f, max %.3f, %lld repeats), %.4f s per layer; peak GPU memory %.1f GiB\n",
        rank, (long long)layers, (long long)tokens, (long long)gpus,
        independent ? " each alone" : (group ? " in sequence parallel" : ""),
        seconds[seconds.size() / 2], seconds.front(), seconds.back(), (long long)repeats,
        seconds[seconds.size() / 2] / double(layers),
        double(cuda::CachingAllocator::instance().peak_bytes_in_use()) / double(1 << 30));
  ranks.run.reset();
  if (ranks.others && !ranks.others->wait_all()) return 1;
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "wan_sequence_parallel_bench: %s\n", e.what());
  return 1;
}
