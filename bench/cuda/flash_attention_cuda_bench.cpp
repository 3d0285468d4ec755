// Times the CUDA attention kernel at Wan2.1-1.3B's self-attention shape (1 x 12 heads x 32760
// tokens x 128), dense and block-sparse at about 10% density, with CUDA events (median of
// repeats after warm-up). With --dump DIR it also writes the inputs, outputs and block lists so
// bench/cuda/torch_attention_reference.py can check them against torch and time torch's SDPA
// (flash and cuDNN) in the same run.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "attention/cuda/flash_attention.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/device_memory.h"
#include "core/dtype.h"
#include "event_timing.h"

using namespace mmgen;
using namespace mmgen::cuda;
namespace fs = std::filesystem;

namespace {

struct BlockLists {
  std::vector<int32_t> offsets{0}, indices;
  double pairs_flops = 0;  // 4·D·(valid query rows)·(valid keys) over the kept block pairs
};

void write_file(const fs::path& path, const void* data, size_t bytes) {
  std::ofstream file(path, std::ios::binary);
  file.write(static_cast<const char*>(data), std::streamsize(bytes));
}

std::vector<uint16_t> random_bf16(size_t count, uint32_t seed) {
  std::mt19937 generator(seed);
  std::normal_distribution<float> normal;
  std::vector<uint16_t> bits(count);
  for (auto& b : bits) b = f32_to_bf16(normal(generator));
  return bits;
}

// Each query block keeps `keep` key blocks: random ones, or the contiguous window centred on the
// query block's position (the locality STA and V-MoBA patterns have).
BlockLists make_lists(int64_t heads, int64_t seq, int64_t head_dim, int64_t keep, bool window,
                      std::mt19937& generator) {
  const int64_t q_blocks = (seq + kFlashBlockM - 1) / kFlashBlockM;
  const int64_t k_blocks = (seq + kFlashBlockN - 1) / kFlashBlockN;
  BlockLists lists;
  std::vector<int32_t> all(static_cast<size_t>(k_blocks));
  for (int32_t i = 0; i < k_blocks; ++i) all[size_t(i)] = i;
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t qb = 0; qb < q_blocks; ++qb) {
      std::vector<int32_t> kept;
      if (window) {
        const int64_t centre = qb * kFlashBlockM / kFlashBlockN;
        const int64_t first = std::clamp<int64_t>(centre - keep / 2, 0, k_blocks - keep);
        for (int64_t j = 0; j < keep; ++j) kept.push_back(int32_t(first + j));
      } else {
        std::shuffle(all.begin(), all.end(), generator);
        kept.assign(all.begin(), all.begin() + keep);
        std::sort(kept.begin(), kept.end());
      }
      const int64_t rows = std::min<int64_t>(kFlashBlockM, seq - qb * kFlashBlockM);
      for (int32_t kb : kept)
        lists.pairs_flops +=
            4.0 * double(head_dim) * double(rows) *
            double(std::min<int64_t>(kFlashBlockN, seq - int64_t(kb) * kFlashBlockN));
      lists.indices.insert(lists.indices.end(), kept.begin(), kept.end());
      lists.offsets.push_back(int32_t(lists.indices.size()));
    }
  return lists;
}

}  // namespace

int main(int argc, char** argv) try {
  fs::path dump;
  int repeats = 20;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--dump" && i + 1 < argc)
      dump = argv[++i];
    else if (arg == "--repeats" && i + 1 < argc)
      repeats = std::stoi(argv[++i]);
    else {
      std::fprintf(stderr, "usage: %s [--dump DIR] [--repeats N]\n", argv[0]);
      return 2;
    }
  }
  cudaDeviceProp properties{};
  MMGEN_CUDA_CHECK(cudaGetDeviceProperties(&properties, 0));
  std::printf("device: %s, %d SMs\n", properties.name, properties.multiProcessorCount);

  const int64_t batch = 1, heads = 12, seq = 32760;
  nlohmann::json results = nlohmann::json::array();
  std::printf("%-34s %4s %9s %9s %8s %8s\n", "case", "D", "ms", "TFLOP/s", "density", "speedup");
  for (const int64_t head_dim : {128, 64}) {
    const size_t count = size_t(batch * seq * heads * head_dim);
    DeviceBuffer q(count * 2), k(count * 2), v(count * 2), out(count * 2);
    q.upload(random_bf16(count, 1).data(), count * 2);
    k.upload(random_bf16(count, 2).data(), count * 2);
    v.upload(random_bf16(count, 3).data(), count * 2);
    FlashAttentionArgs args;
    args.q = q.data(), args.k = k.data(), args.v = v.data(), args.out = out.data();
    args.batch = batch, args.heads = heads, args.seq_q = seq, args.seq_k = seq;
    args.head_dim = head_dim;
    args.scale = 1.0f / std::sqrt(float(head_dim));
    args.q_strides = args.k_strides = args.v_strides =
        args.out_strides = {seq * heads * head_dim, heads * head_dim, head_dim};

    const double dense_flops = 4.0 * double(batch * heads) * double(seq) * double(seq) * head_dim;
    // The portable (mma.sync) kernel first, for comparison; then the default one (Hopper's on an
    // H100/H200), whose output is dumped and checked.
    FlashAttentionArgs portable = args;
    portable.kernel = FlashKernel::Portable;
    const double portable_ms =
        bench::median_event_ms([&] { flash_attention_forward(portable); }, repeats, 3);
    std::printf("%-34s %4ld %9.3f %9.1f %8.3f\n", "fa dense, portable mma.sync kernel",
                long(head_dim), portable_ms, dense_flops / portable_ms * 1e-9, 1.0);
    results.push_back({{"case", "dense_portable"},
                       {"head_dim", head_dim},
                       {"ms", portable_ms},
                       {"tflops", dense_flops / portable_ms * 1e-9},
                       {"density", 1.0}});
    const double dense_ms =
        bench::median_event_ms([&] { flash_attention_forward(args); }, repeats, 3);
    std::printf("%-34s %4ld %9.3f %9.1f %8.3f %8s\n", "fa dense", long(head_dim), dense_ms,
                dense_flops / dense_ms * 1e-9, 1.0, "1.0x");
    results.push_back({{"case", "dense"},
                       {"head_dim", head_dim},
                       {"ms", dense_ms},
                       {"tflops", dense_flops / dense_ms * 1e-9},
                       {"density", 1.0}});
    if (!dump.empty() && head_dim == 128) {
      fs::create_directories(dump);
      std::vector<uint16_t> host(count);
      for (auto [name, buffer] : {std::pair{"q", &q}, {"k", &k}, {"v", &v}, {"out_dense", &out}}) {
        buffer->download(host.data(), count * 2);
        write_file(dump / (std::string(name) + ".bf16"), host.data(), count * 2);
      }
    }

    // Wan's cross-attention: the same queries over 512 text keys (the first 512 rows of k, v).
    FlashAttentionArgs cross = args;
    cross.seq_k = 512;
    const double cross_flops = 4.0 * double(batch * heads) * double(seq) * 512.0 * head_dim;
    const double cross_ms =
        bench::median_event_ms([&] { flash_attention_forward(cross); }, repeats, 3);
    std::printf("%-34s %4ld %9.3f %9.1f %8.3f\n", "fa cross-attention, 512 keys", long(head_dim),
                cross_ms, cross_flops / cross_ms * 1e-9, 1.0);
    results.push_back({{"case", "cross_512"},
                       {"head_dim", head_dim},
                       {"ms", cross_ms},
                       {"tflops", cross_flops / cross_ms * 1e-9},
                       {"density", 1.0}});

    std::mt19937 generator(7);
    const int64_t k_blocks = (seq + kFlashBlockN - 1) / kFlashBlockN;
    const int64_t keep = (k_blocks + 9) / 10;  // about 10% of the key blocks
    for (const bool window : {false, true}) {
      const BlockLists lists = make_lists(heads, seq, head_dim, keep, window, generator);
      DeviceBuffer offsets(lists.offsets.size() * 4), indices(lists.indices.size() * 4);
      offsets.upload(lists.offsets.data(), lists.offsets.size() * 4);
      indices.upload(lists.indices.data(), lists.indices.size() * 4);
      FlashAttentionArgs sparse = args;
      sparse.block_offsets = offsets.as<int32_t>();
      sparse.block_indices = indices.as<int32_t>();
      const double ms =
          bench::median_event_ms([&] { flash_attention_forward(sparse); }, repeats, 3);
      const double density = lists.pairs_flops / dense_flops;
      const std::string name =
          window ? "block-sparse, local window ~10%" : "block-sparse, random ~10%";
      std::printf("%-34s %4ld %9.3f %9.1f %8.3f %7.1fx\n", name.c_str(), long(head_dim), ms,
                  lists.pairs_flops / ms * 1e-9, density, dense_ms / ms);
      results.push_back({{"case", window ? "sparse_window" : "sparse_random"},
                         {"head_dim", head_dim},
                         {"ms", ms},
                         {"tflops_kept", lists.pairs_flops / ms * 1e-9},
                         {"density", density},
                         {"speedup_vs_dense", dense_ms / ms}});
      if (!dump.empty() && head_dim == 128 && !window) {
        std::vector<uint16_t> host(count);  // the timed runs left the sparse output in `out`
        out.download(host.data(), count * 2);
        write_file(dump / "out_sparse.bf16", host.data(), count * 2);
        write_file(dump / "block_offsets.i32", lists.offsets.data(), lists.offsets.size() * 4);
        write_file(dump / "block_indices.i32", lists.indices.data(), lists.indices.size() * 4);
      }
    }
  }
  if (!dump.empty()) {
    nlohmann::json meta = {{"batch", batch},
                           {"heads", heads},
                           {"seq", seq},
                           {"head_dim", 128},
                           {"block_m", kFlashBlockM},
                           {"block_n", kFlashBlockN},
                           {"device", properties.name},
                           {"results", results}};
    std::ofstream(dump / "meta.json") << meta.dump(2);
  }
  return 0;
} catch (const std::exception& error) {
  std::fprintf(stderr, "flash_attention_cuda_bench: %s\n", error.what());
  return 1;
}
