// The GPU sliding_tile_attn, video_sparse_attn, vmoba_attn, sla_attn, sage_attn, sage_sla_attn and
// sparse_video_gen_2_attn backends at Wan2.1-1.3B's self-attention shape (1 x 12 heads x 32760
// tokens x 128: the 21x30x52 patch grid of 480x832x81) on random inputs, beside our dense fa kernel
// in the same run: per call the whole backend (regrouping into tiles/cubes, VSA's coarse branch and
// lists, the kernel, the inverse regrouping) and the block-sparse kernel alone (CUDA events, median
// of repeats after a warm-up), the density in query-key pairs and the kernel's TFLOP/s on the kept
// pairs (4·D per pair; padding excluded). The dense sage_attn rows (INT8 Q·Kᵀ) also give their
// accuracy against fa's output the way the SageAttention papers do: cosine similarity and relative
// L1 distance.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "attention/backend.h"
#include "attention/backend_config.h"
#include "attention/backends/video_sparse_attn/vsa_select.h"
#include "attention/cuda/box_layout.h"
#include "attention/cuda/flash_attention.h"
#include "attention/sparse_self_attention_cuda.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/device_memory.h"
#include "core/dtype.h"
#include "event_timing.h"

using namespace mmgen;
using namespace mmgen::cuda;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

std::vector<uint16_t> random_bf16(size_t count, uint32_t seed) {
  std::mt19937 generator(seed);
  std::normal_distribution<float> normal;
  std::vector<uint16_t> bits(count);
  for (auto& b : bits) b = f32_to_bf16(normal(generator));
  return bits;
}

// An STA mask giving every head of `layers` layers at step 0 the window `window`.
fs::path write_sta_mask(const std::array<int, 3>& window, int64_t layers, int64_t heads) {
  json mask = json::object();
  for (int64_t l = 0; l < layers; ++l)
    for (int64_t h = 0; h < heads; ++h)
      mask["0_" + std::to_string(l) + "_" + std::to_string(h)] = {window[0], window[1], window[2]};
  const fs::path path =
      fs::temp_directory_path() / ("mmgen_sta_" + std::to_string(window[0]) +
                                   std::to_string(window[1]) + std::to_string(window[2]) + ".json");
  std::ofstream(path) << mask.dump();
  return path;
}

}  // namespace

int main(int argc, char** argv) try {
  int repeats = 10;
  std::string only;  // --only TEXT: the rows whose name contains it (profiling one backend)
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--repeats")
      repeats = std::stoi(argv[i + 1]);
    else if (flag == "--only")
      only = argv[i + 1];
    else
      throw std::runtime_error("usage: sparse_attention_cuda_bench [--repeats N] [--only TEXT]");
  }
  cudaDeviceProp properties{};
  MMGEN_CUDA_CHECK(cudaGetDeviceProperties(&properties, 0));
  std::printf("device: %s, %d SMs\n", properties.name, properties.multiProcessorCount);

  const int64_t heads = 12, head_dim = 128;
  const std::array<int64_t, 3> grid = {21, 30, 52};
  const int64_t tokens = grid[0] * grid[1] * grid[2];
  const size_t count = size_t(tokens * heads * head_dim);
  DeviceBuffer q(count * 2), k(count * 2), v(count * 2), out(count * 2);
  q.upload(random_bf16(count, 1).data(), count * 2);
  k.upload(random_bf16(count, 2).data(), count * 2);
  v.upload(random_bf16(count, 3).data(), count * 2);
  SelfAttentionCall call;
  call.q = q.data(), call.k = k.data(), call.v = v.data(), call.out = out.data();
  call.batch = 1, call.tokens = tokens, call.heads = heads, call.head_dim = head_dim;
  call.grid = grid, call.scale = 1.0f / std::sqrt(float(head_dim));

  FlashAttentionArgs dense;
  dense.q = q.data(), dense.k = k.data(), dense.v = v.data(), dense.out = out.data();
  dense.batch = 1, dense.heads = heads, dense.seq_q = tokens, dense.seq_k = tokens;
  dense.head_dim = head_dim, dense.scale = call.scale;
  dense.q_strides = dense.k_strides = dense.v_strides =
      dense.out_strides = {tokens * heads * head_dim, heads * head_dim, head_dim};
  const double dense_flops = 4.0 * double(heads) * double(tokens) * double(tokens) * head_dim;
  for (int i = 0; i < 3; ++i) flash_attention_forward(dense);
  std::vector<double> dense_times;
  for (int i = 0; i < repeats; ++i)
    dense_times.push_back(bench::event_ms([&] { flash_attention_forward(dense); }));
  const double dense_ms = bench::median(dense_times);
  std::vector<uint16_t> fa_out(count), row_out(count);
  out.download(fa_out.data(), count * 2);
  std::printf("Wan2.1-1.3B self-attention: 1 x %ld heads x %ld tokens (grid %ldx%ldx%ld) x %ld\n",
              long(heads), long(tokens), long(grid[0]), long(grid[1]), long(grid[2]),
              long(head_dim));
  std::printf("%-40s %8s %9s %9s %12s %8s\n", "case", "density", "call ms", "kernel ms",
              "kept TFLOP/s", "speedup");
  std::printf("%-40s %8.3f %9.3f %9.3f %12.1f %7.1fx\n", "fa dense", 1.0, dense_ms, dense_ms,
              dense_flops / dense_ms * 1e-9, 1.0);

  struct Row {
    std::string name, backend;
    json config;
    int64_t layer = 0;        // V-MoBA: 0 temporal, 1 spatial, 2 spatio-temporal chunks
    bool projection = false;  // SLA: with proj_l weights (the linear branch)
    bool accuracy = false;    // dense: cosine similarity and relative L1 against fa's output
    int64_t step = 0;         // SVG2: 1, so every call after the (cold) warm-up is a warm step
  };
  // V-MoBA at FastVideo's 1.3B chunk sizes: 2-frame temporal chunks (11), 3x4 spatial (130),
  // 4x6x4 spatio-temporal (390); top-k chosen for about 10% density, and the default threshold.
  auto moba = [](json extra) {
    json config = {{"first_full_step", 0}, {"moba_select_mode", "topk"}};
    for (auto& [key, value] : extra.items()) config[key] = value;
    return config;
  };
  const std::vector<Row> rows = {
      {"sliding_tile_attn 6x8x8, window 2x2x3",
       "sliding_tile_attn",
       {{"mask_strategy_file_path", write_sta_mask({2, 2, 3}, 1, heads).string()},
        {"skip_time_steps", 0}}},
      {"sliding_tile_attn 6x8x8, window 3x3x3",
       "sliding_tile_attn",
       {{"mask_strategy_file_path", write_sta_mask({3, 3, 3}, 1, heads).string()},
        {"skip_time_steps", 0}}},
      {"sliding_tile_attn 6x8x8, window 2x2x2",
       "sliding_tile_attn",
       {{"mask_strategy_file_path", write_sta_mask({2, 2, 2}, 1, heads).string()},
        {"skip_time_steps", 0}}},
      {"video_sparse_attn sparsity 0.9", "video_sparse_attn", {{"sparsity", 0.9}}},
      {"vmoba_attn temporal, top-1 of 11", "vmoba_attn", moba({{"temporal_topk", 1}}), 0},
      {"vmoba_attn spatial, top-13 of 130", "vmoba_attn", moba({{"spatial_topk", 13}}), 1},
      {"vmoba_attn spatio-temporal, top-39 of 390", "vmoba_attn", moba({{"st_topk", 39}}), 2},
      {"vmoba_attn spatial, threshold 0.25", "vmoba_attn", {{"first_full_step", 0}}, 1},
      {"vmoba_attn spatio-temporal, threshold 0.25", "vmoba_attn", {{"first_full_step", 0}}, 2},
      {"sla_attn top 10% (no proj_l)", "sla_attn", {{"topk", 0.1}}},
      {"sla_attn top 10% + linear branch", "sla_attn", {{"topk", 0.1}}, 0, true},
      {"sage_attn per_block (dense, INT8 QK, FP8 PV)", "sage_attn", json::object(), 0, false, true},
      {"sage_attn per_thread (dense, INT8 QK, FP8 PV)",
       "sage_attn",
       {{"qk_quant_gran", "per_thread"}},
       0,
       false,
       true},
      {"sage_attn per_block (dense, INT8 QK, bf16 PV)",
       "sage_attn",
       {{"pv_dtype", "bf16"}},
       0,
       false,
       true},
      {"sage_sla_attn top 10% (no proj_l)", "sage_sla_attn", {{"topk", 0.1}}},
      {"sage_sla_attn top 10% + linear branch", "sage_sla_attn", {{"topk", 0.1}}, 0, true},
      // SVG2 at about 10% density (docs/performance-history.md's CPU setting: top_p 0.115, no
      // min_kc_ratio floor), timed warm (k-means warm-started from the previous call's centroids,
      // on the same inputs): the default 300 / 1000 clusters, and 130 / 436, the tokens per
      // cluster of the CPU bench's 65 / 218 at 16384 tokens.
      {"sparse_video_gen_2_attn top_p 0.115, 300/1000",
       "sparse_video_gen_2_attn",
       {{"top_p_kmeans", 0.115},
        {"min_kc_ratio", 0},
        {"first_layers_fp", 0},
        {"first_times_fp", 0}},
       0,
       false,
       false,
       1},
      {"sparse_video_gen_2_attn top_p 0.115, 130/436",
       "sparse_video_gen_2_attn",
       {{"top_p_kmeans", 0.115},
        {"min_kc_ratio", 0},
        {"num_q_centroids", 130},
        {"num_k_centroids", 436},
        {"first_layers_fp", 0},
        {"first_times_fp", 0}},
       0,
       false,
       false,
       1},
  };
  // Random proj_l weights for the SLA row with a linear branch.
  attention::LayerWeights projection;
  {
    std::vector<float> w(size_t(head_dim * head_dim)), b(static_cast<size_t>(head_dim));
    std::mt19937 generator(5);
    std::normal_distribution<float> normal(0.0f, 0.05f);
    for (auto& x : w) x = normal(generator);
    for (auto& x : b) x = normal(generator);
    projection["proj_l.weight"] =
        Tensor::from_vector({head_dim, head_dim}, w).to(DType::BF16).to(Device::CUDA);
    projection["proj_l.bias"] = Tensor::from_vector({head_dim}, b).to(Device::CUDA);
  }
  for (const Row& row : rows) {
    if (row.name.find(only) == std::string::npos) continue;
    auto backend = make_sparse_self_attention_cuda(
        row.backend, attention::validate_backend_config(row.config, row.backend));
    call.layer = row.layer, call.step = row.step;
    call.weights = row.projection ? &projection : nullptr;
    backend->run(call);  // warm-up: tiling, lists, kernel setup
    backend->count_pairs(true);
    backend->run(call);
    const double kept = backend->stats().kept_pairs, density = backend->stats().density();
    backend->count_pairs(false);
    std::vector<double> call_times, kernel_times;
    for (int i = 0; i < repeats; ++i)
      call_times.push_back(bench::event_ms([&] { backend->run(call); }));
    backend->time_kernel(true);
    for (int i = 0; i < repeats; ++i) {
      const double before = backend->kernel_seconds();
      backend->run(call);
      kernel_times.push_back((backend->kernel_seconds() - before) * 1e3);
    }
    const double call_ms = bench::median(call_times), kernel_ms = bench::median(kernel_times);
    std::printf("%-40s %8.3f %9.3f %9.3f %12.1f %7.1fx\n", row.name.c_str(), density, call_ms,
                kernel_ms, 4.0 * head_dim * kept / kernel_ms * 1e-9, dense_ms / call_ms);
    if (row.accuracy) {
      backend->run(call);
      MMGEN_CUDA_CHECK(cudaDeviceSynchronize());
      out.download(row_out.data(), count * 2);
      double dot = 0, norm_a = 0, norm_b = 0, l1 = 0, l1_ref = 0;
      for (size_t i = 0; i < count; ++i) {
        const double a = bf16_to_f32(row_out[i]), b = bf16_to_f32(fa_out[i]);
        dot += a * b, norm_a += a * a, norm_b += b * b;
        l1 += std::abs(a - b), l1_ref += std::abs(b);
      }
      std::printf("    against fa: cosine similarity %.6f, relative L1 %.2e\n",
                  dot / std::sqrt(norm_a * norm_b), l1 / l1_ref);
    }
    if (!backend->step_seconds().empty()) {
      std::printf("    steps (mean of the timed calls):");
      for (const auto& [step, seconds] : backend->step_seconds())
        std::printf(" %s %.3f ms;", step.c_str(), seconds * 1e3 / repeats);
      std::printf("\n");
    }
  }
  std::printf(
      "(call ms: the whole backend; kernel ms: the block-sparse kernel alone, separate "
      "runs; speedup: dense ms / call ms)\n");

  // Where VSA's time outside the kernel goes: its steps alone at this shape (6x8x13 cubes of 64
  // slots). On Hopper the kernel reads the cubes in place and writes the tokens itself: only the
  // means and the selection run beside it. The portable kernel's regrouping is timed too (its
  // slot map here is a stand-in of the same size; the costs do not depend on it).
  const int64_t cubes = 6 * 8 * 13, slots = cubes * kVsaCube, width = heads * head_dim;
  const int64_t topk = 63;
  std::vector<int32_t> token_of_slot(static_cast<size_t>(slots)),
      lengths(static_cast<size_t>(cubes), kVsaCube);
  for (int64_t i = 0; i < slots; ++i) token_of_slot[size_t(i)] = i < tokens ? int32_t(i) : -1;
  DeviceBuffer to_slot(token_of_slot.size() * 4), cube_lengths(lengths.size() * 4),
      padded(size_t(slots * width) * 2), qc(size_t(heads * cubes * head_dim) * 4),
      kc(size_t(heads * cubes * head_dim) * 4), selected(size_t(heads * cubes * topk) * 4);
  to_slot.upload(token_of_slot.data(), token_of_slot.size() * 4);
  cube_lengths.upload(lengths.data(), lengths.size() * 4);
  auto step_ms = [&](const std::function<void()>& work) {
    work();
    std::vector<double> times;
    for (int i = 0; i < repeats; ++i) times.push_back(bench::event_ms(work));
    return bench::median(times);
  };
  const double gather_ms = step_ms([&] {
    gather_to_slots(q.data(), padded.data(), 1, tokens, slots, width, to_slot.as<int32_t>());
  });
  const double fused_ms = step_ms([&] {
    vsa_gather_with_means(q.data(), padded.data(), qc.as<float>(), 1, tokens, cubes, heads,
                          head_dim, to_slot.as<int32_t>(), cube_lengths.as<int32_t>());
  });
  vsa_gather_with_means(k.data(), padded.data(), kc.as<float>(), 1, tokens, cubes, heads, head_dim,
                        to_slot.as<int32_t>(), cube_lengths.as<int32_t>());
  const void* operands[2] = {q.data(), k.data()};
  float* means[2] = {qc.as<float>(), kc.as<float>()};
  const double in_place_ms =
      step_ms([&] { vsa_cube_means(operands, means, 2, 1, grid, heads, head_dim); });
  const double select_ms = step_ms([&] {
    vsa_select(qc.as<float>(), kc.as<float>(), nullptr, call.scale, 1, heads, cubes, cubes,
               head_dim, topk, selected.as<int32_t>(), nullptr);
  });
  std::printf(
      "VSA steps alone: cube means of q and k read in place (the Hopper path) %.3f ms; scores + "
      "top-%ld %.3f ms; the portable kernel's regrouping: gather with cube means %.3f ms (x2: "
      "q, k), gather %.3f ms (v)\n",
      in_place_ms, long(topk), select_ms, fused_ms, gather_ms);
  return 0;
} catch (const std::exception& error) {
  std::fprintf(stderr, "sparse_attention_cuda_bench: %s\n", error.what());
  return 1;
}
