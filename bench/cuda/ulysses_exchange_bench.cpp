// The Ulysses exchanges alone, at a Wan2.1-14B 720x1280x81 self-attention shape (75600 tokens,
// 40 heads x 128, bf16) over N GPUs, one process per GPU (the bench starts its ranks as
// `mmgen generate --gpus N` does): per layer a forward sends q, k and v to heads and the output
// back. Times, per rank 0 (median of repeats): the packing copies alone (cudaMemcpy2D of the head
// slices), a plain all-to-all of the same bytes from contiguous buffers, and the two exchanges
// as the model runs them; bytes each rank sends and the rate. What it is for: telling how much of
// a sharded step is the exchange, and whether the packing or the link limits it.
// usage: ulysses_exchange_bench --gpus N [--tokens 75600] [--heads 40] [--repeats 20]
// (set NCCL_DEBUG=INFO to see which transport NCCL chose).
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "attention/ulysses.h"
#include "core/cuda/cuda_check.h"
#include "core/error.h"
#include "core/ops.h"
#include "core/pitched_copy.h"
#include "generate/multi_gpu.h"

using namespace mmgen;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <typename F>
double time_ms(int repeats, dist::Communicator& world, F&& body) {
  std::vector<double> times;
  for (int i = 0; i < repeats + 2; ++i) {
    Tensor barrier = Tensor::zeros({1}, DType::F32, Device::CUDA);
    world.broadcast(barrier, 0);  // the ranks start together
    MMGEN_CUDA_CHECK(cudaDeviceSynchronize());
    const auto start = std::chrono::steady_clock::now();
    body();
    MMGEN_CUDA_CHECK(cudaDeviceSynchronize());
    if (i >= 2)
      times.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
              .count());
  }
  return median(times);
}

}  // namespace

int main(int argc, char** argv) try {
  if (cli::is_started_rank()) cli::prepare_started_rank();
  int64_t gpus = 2, tokens = 75600, heads = 40, repeats = 20;
  const int64_t dim = 128;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const int64_t value = std::stoll(argv[i + 1]);
    if (flag == "--gpus")
      gpus = value;
    else if (flag == "--tokens")
      tokens = value;
    else if (flag == "--heads")
      heads = value;
    else if (flag == "--repeats")
      repeats = value;
    else if (flag == "--seed")
      continue;  // what the leader adds for the ranks it starts
    else
      fail("unknown flag {}", flag);
  }
  Request request;
  request.gpus = gpus;
  request.device = "cuda";
  cli::JoinedRanks ranks = cli::join_ranks(request, find_pipeline("WanPipeline", "bench"));
  dist::Communicator& world = *ranks.run->world;
  const int n = world.size(), me = world.rank();
  const dist::SequenceShards shards = dist::SequenceShards::balanced(tokens, n);
  const int64_t rows = shards.sizes[size_t(me)], part = heads / n;
  const Tensor x = ops::random_uniform({1, rows, heads, dim}, DType::BF16, Device::CUDA, 7, 1.0f);

  // Packing only: the head slices into contiguous buffers, as sequence_to_heads does.
  std::vector<Tensor> packed;
  for (int j = 0; j < n; ++j)
    packed.push_back(Tensor::empty({1, rows, part, dim}, DType::BF16, Device::CUDA));
  const double pack_ms = time_ms(int(repeats), world, [&] {
    for (int j = 0; j < n; ++j)
      copy_pitched(packed[size_t(j)], x.slice(2, j * part, (j + 1) * part));
  });
  // The link only: the same bytes between contiguous buffers.
  std::vector<Tensor> recv;
  for (int i = 0; i < n; ++i)
    recv.push_back(
        Tensor::empty({1, shards.sizes[size_t(i)], part, dim}, DType::BF16, Device::CUDA));
  const double link_ms = time_ms(int(repeats), world, [&] { world.all_to_all(packed, recv); });
  // The model's exchanges: one tensor to heads and back (a layer does q, k, v and the output).
  Tensor by_heads;
  const double to_heads_ms = time_ms(
      int(repeats), world, [&] { by_heads = attention::sequence_to_heads(x, shards, world); });
  const double to_sequence_ms = time_ms(
      int(repeats), world, [&] { attention::heads_to_sequence(by_heads, shards, world, heads); });
  const double sent_gb = double(rows * (heads - part) * dim * 2) / 1e9;
  if (me == 0) {
    std::printf(
        "ulysses exchange: %d GPUs, %lld tokens, %lld heads x %lld, bf16; rank 0 holds %lld rows\n",
        n, (long long)tokens, (long long)heads, (long long)dim, (long long)rows);
    std::printf("  pack (cudaMemcpy2D)  %8.3f ms  %7.1f GB/s copied\n", pack_ms,
                double(x.nbytes()) / 1e6 / pack_ms);
    std::printf("  all-to-all (link)    %8.3f ms  %7.1f GB/s sent per rank\n", link_ms,
                sent_gb * 1e3 / link_ms);
    std::printf("  sequence_to_heads    %8.3f ms\n", to_heads_ms);
    std::printf("  heads_to_sequence    %8.3f ms\n", to_sequence_ms);
    std::printf("  per forward (40 layers x (3 to heads + 1 back)): %.1f ms\n",
                40 * (3 * to_heads_ms + to_sequence_ms));
  }
  ranks.run.reset();
  if (ranks.others && !ranks.others->wait_all()) return 1;
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "ulysses_exchange_bench: %s\n", e.what());
  return 1;
}
