// The GPU sparse_video_gen_2_attn (attention/backends/sparse_video_gen_2_attn/svg2_cuda.h) against
// the CPU backend (svg2_attention.h) on the same bf16 inputs, call after call over a run's steps,
// each backend keeping its own state: the output (relative error < 1e-2), and, exactly, every
// head's query and key labels, the kept cluster pairs, the stored centroids (to the bit), the kept
// token-pair count and whether the clustering was warm. Cases: head sizes 64 and 128, batch 2,
// odd grids, cold and warm steps, the default 300/1000 clusters, cluster counts clamped to the
// tokens, kmeans_iter_step 0 (assign only), dense leading steps and layers (with and without
// zero_step_kmeans_init), two guidance branches of one layer kept apart, and ~10% density (top_p
// 0.115). The device plan alone (svg2_select_pairs) is also checked against the CPU's
// select_cluster_pairs on random centroids with exact ties: every row it does not hand to the
// host must be the CPU's.
#include "attention/backends/sparse_video_gen_2_attn/svg2_cuda.h"

#include <cuda_runtime.h>
#include <fmt/format.h>

#include <any>
#include <chrono>
#include <cmath>
#include <cstring>
#include <random>

#include "attention/backend.h"
#include "attention/backend_config.h"
#include "attention/backends/sparse_video_gen_2_attn/svg2_attention.h"
#include "attention/backends/sparse_video_gen_2_attn/svg2_kernels.h"
#include "attention/backends/sparse_video_gen_2_attn/svg2_kmeans.h"
#include "attention/sparse_self_attention_cuda.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/device_memory.h"
#include "cuda_test_support.h"

using namespace mmgen;
using namespace mmgen::cuda;
using namespace mmgen::cuda_testing;
using json = nlohmann::json;
namespace svg2 = mmgen::attention::svg2;

namespace {

struct Call {
  int64_t step = 0;
  int branch = 0;
  bool sparse = true;  // what the settings should make of it
};

struct Case {
  std::string label;
  json config;
  int64_t batch = 1, heads = 2, head_dim = 128;
  std::array<int64_t, 3> grid{};
  int64_t layer = 0, num_layers = 1, num_steps = 1;
  std::vector<Call> calls;
};

// Inputs that drift from step to step (x ← 0.9·x + 0.3·noise, rounded to bf16), so a warm start
// begins near, not at, the answer.
struct Inputs {
  Bf16Values q, k, v;
};
Bf16Values drift(const Bf16Values& previous, std::mt19937& generator) {
  std::normal_distribution<float> normal;
  Bf16Values next;
  next.bits.resize(previous.values.size());
  next.values.resize(previous.values.size());
  for (size_t i = 0; i < next.values.size(); ++i) {
    next.bits[i] = f32_to_bf16(0.9f * previous.values[i] + 0.3f * normal(generator));
    next.values[i] = bf16_to_f32(next.bits[i]);
  }
  return next;
}

DeviceBuffer upload(const std::vector<uint16_t>& bits) {
  DeviceBuffer buffer(bits.size() * 2);
  buffer.upload(bits.data(), bits.size() * 2);
  return buffer;
}

int64_t count_differences(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return int64_t(std::max(a.size(), b.size()));
  int64_t n = 0;
  for (size_t i = 0; i < a.size(); ++i) n += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
  return n;
}

void run_case(const Case& c, std::mt19937& generator) {
  const int64_t B = c.batch, H = c.heads, D = c.head_dim, pairs = B * H;
  const int64_t S = c.grid[0] * c.grid[1] * c.grid[2], count = B * S * H * D;
  const float scale = 1.0f / std::sqrt(float(D));
  const json config = attention::validate_backend_config(c.config, "sparse_video_gen_2_attn");
  const svg2::Options options = svg2::Options::from_json(config);
  svg2::Svg2Attention cpu(options);
  svg2::Svg2Cuda gpu(options);
  gpu.keep_plans(true);
  gpu.count_pairs(true);
  std::array<attention::LayerState, 2> states;  // per branch, as the Wan transformer keeps them
  std::array<Inputs, 2> inputs;
  std::array<bool, 2> used{};
  for (auto& in : inputs) {
    in.q = random_bf16(size_t(count), generator);
    in.k = random_bf16(size_t(count), generator);
    in.v = random_bf16(size_t(count), generator);
  }
  auto host = [&](const Bf16Values& x) { return Tensor::from_vector({B, S, H, D}, x.values); };

  for (size_t n = 0; n < c.calls.size(); ++n) {
    const Call& call_info = c.calls[n];
    Inputs& in = inputs[size_t(call_info.branch)];
    if (used[size_t(call_info.branch)])
      in.q = drift(in.q, generator), in.k = drift(in.k, generator), in.v = drift(in.v, generator);
    used[size_t(call_info.branch)] = true;
    const std::string name =
        fmt::format("svg2 {} B={} H={} D={} grid {}x{}x{} step {} branch {}", c.label, B, H, D,
                    c.grid[0], c.grid[1], c.grid[2], call_info.step, call_info.branch);

    attention::AttentionContext context;
    context.step_index = call_info.step;
    context.num_steps = c.num_steps;
    context.layer_index = c.layer;
    context.num_layers = c.num_layers;
    context.grid = c.grid;
    context.state = &states[size_t(call_info.branch)];
    attention::AttentionStats cpu_stats;
    const Tensor expected_tensor =
        cpu.forward(host(in.q), host(in.k), host(in.v), scale, context, &cpu_stats);

    const DeviceBuffer dq = upload(in.q.bits), dk = upload(in.k.bits), dv = upload(in.v.bits);
    DeviceBuffer out(size_t(count) * 2);
    out.fill_bytes(0xff);  // NaN: an unwritten element cannot pass
    SelfAttentionCall call;
    call.q = dq.data(), call.k = dk.data(), call.v = dv.data(), call.out = out.data();
    call.batch = B, call.tokens = S, call.heads = H, call.head_dim = D, call.grid = c.grid;
    call.step = call_info.step, call.layer = c.layer, call.scale = scale;
    call.num_steps = c.num_steps, call.num_layers = c.num_layers, call.branch = call_info.branch;
    const double kept_before = gpu.stats().kept_pairs, total_before = gpu.stats().total_pairs;
    gpu.run(call);
    MMGEN_CUDA_CHECK(cudaDeviceSynchronize());

    std::vector<uint16_t> bits(static_cast<size_t>(count));
    out.download(bits.data(), bits.size() * 2);
    std::vector<double> actual(bits.size()), expected(bits.size());
    bool finite = true;
    for (size_t i = 0; i < bits.size(); ++i) {
      actual[i] = bf16_to_f32(bits[i]);
      expected[i] = expected_tensor.data<float>()[i];
      finite = finite && std::isfinite(actual[i]);
    }
    const double error = relative_error(actual, expected);
    expect(finite, name + ": every output element written and finite");
    expect(error < 1e-2,
           fmt::format("{}: relative error {:.2e} vs the CPU backend < 1e-2", name, error));
    expect(gpu.last_was_dense() == cpu.last_was_dense() && cpu.last_was_dense() != call_info.sparse,
           fmt::format("{}: {} on both", name, call_info.sparse ? "sparse" : "dense"));
    const double kept = gpu.stats().kept_pairs - kept_before,
                 total = gpu.stats().total_pairs - total_before;
    expect(kept == double(cpu_stats.visited_blocks) && total == double(cpu_stats.total_blocks),
           fmt::format("{}: kept token pairs {} of {} (CPU {} of {}), density {:.3f}", name, kept,
                       total, cpu_stats.visited_blocks, cpu_stats.total_blocks,
                       total > 0 ? kept / total : 1.0));

    // The clustering itself: labels, kept pairs, centroids.
    const auto* cpu_state = std::any_cast<svg2::LayerCentroids>(&context.state->value);
    const svg2::DeviceCentroids* gpu_state = gpu.centroids(c.layer, call_info.branch);
    if (cpu_state && cpu_state->clusterings > 0) {
      expect(gpu_state && gpu_state->clusterings == cpu_state->clusterings &&
                 gpu_state->last_warm_start == cpu_state->last_warm_start &&
                 gpu_state->last_iterations == cpu_state->last_iterations,
             fmt::format("{}: clustering {} ({}), {} k-means updates at most (CPU: clustering {} "
                         "({}), {})",
                         name, gpu_state ? gpu_state->clusterings : -1,
                         gpu_state && gpu_state->last_warm_start ? "warm" : "cold",
                         gpu_state ? gpu_state->last_iterations : -1, cpu_state->clusterings,
                         cpu_state->last_warm_start ? "warm" : "cold", cpu_state->last_iterations));
      if (gpu_state) {
        const int64_t qc = gpu_state->q_clusters, kc = gpu_state->k_clusters;
        std::vector<float> q_centroids(size_t(pairs * qc * D)), k_centroids(size_t(pairs * kc * D));
        gpu_state->q_centroids.download(q_centroids.data(), q_centroids.size() * 4);
        gpu_state->k_centroids.download(k_centroids.data(), k_centroids.size() * 4);
        std::vector<float> cpu_q, cpu_k;
        for (int64_t p = 0; p < pairs; ++p) {
          cpu_q.insert(cpu_q.end(), cpu_state->q_centroids[size_t(p)].begin(),
                       cpu_state->q_centroids[size_t(p)].end());
          cpu_k.insert(cpu_k.end(), cpu_state->k_centroids[size_t(p)].begin(),
                       cpu_state->k_centroids[size_t(p)].end());
        }
        const int64_t q_diff = count_differences(q_centroids, cpu_q),
                      k_diff = count_differences(k_centroids, cpu_k);
        expect(q_diff == 0 && k_diff == 0,
               fmt::format("{}: {} x {} query and {} key centroids equal the CPU's to the bit "
                           "({} and {} floats differ)",
                           name, pairs, qc, kc, q_diff, k_diff));
      }
    }
    if (call_info.sparse) {
      std::printf("%s: %lld query clusters' kept pairs recomputed on the host\n", name.c_str(),
                  static_cast<long long>(gpu.last_flagged_rows()));
      const auto& cpu_plans = cpu.last_plans();
      const auto& gpu_plans = gpu.last_plans();
      int64_t q_labels = 0, k_labels = 0, selected = 0, kept_cpu = 0;
      bool shapes = cpu_plans.size() == gpu_plans.size();
      for (size_t p = 0; shapes && p < cpu_plans.size(); ++p) {
        const svg2::HeadPlan &a = gpu_plans[p], &b = cpu_plans[p];
        shapes = a.q_labels.size() == b.q_labels.size() && a.k_labels.size() == b.k_labels.size() &&
                 a.selected.size() == b.selected.size();
        if (!shapes) break;
        for (size_t i = 0; i < a.q_labels.size(); ++i) q_labels += a.q_labels[i] != b.q_labels[i];
        for (size_t i = 0; i < a.k_labels.size(); ++i) k_labels += a.k_labels[i] != b.k_labels[i];
        for (size_t i = 0; i < a.selected.size(); ++i) {
          selected += a.selected[i] != b.selected[i];
          kept_cpu += b.selected[i];
        }
      }
      expect(shapes && q_labels == 0 && k_labels == 0 && selected == 0,
             fmt::format("{}: same clusters and kept cluster pairs as the CPU ({} query and {} "
                         "key labels differ, {} of the pairs; the CPU keeps {})",
                         name, q_labels, k_labels, selected, kept_cpu));
    }
  }
}

// One assignment pass alone, GPU against the CPU's kmeans(…, 0) on the same points and centroids
// (means-like float32 values, not bf16): the labels should agree; where the two float32 dot
// products (the GPU's one fused chain, the CPU's Eigen product) round a near-tie apart they may
// not, and then the two centroids must be equally near in exact arithmetic (relative gap below
// 1e-5). This is what any label difference of the whole runs above goes back to.
void check_assignment(std::mt19937& generator) {
  const int64_t H = 4, S = 4096, D = 128, C = 1000;
  const Bf16Values x = random_bf16(size_t(S * H * D), generator);
  std::normal_distribution<float> normal;
  std::vector<float> centroids(size_t(H * C * D));
  for (auto& value : centroids) value = 0.3f * normal(generator);
  const DeviceBuffer dx = upload(x.bits);
  DeviceBuffer dc(centroids.size() * 4), norms(size_t(H * C) * 4), labels(size_t(H * S) * 4);
  dc.upload(centroids.data(), dc.size());
  const DeviceBuffer active = upload_vector(std::vector<int32_t>(size_t(H), 1));
  const Svg2KmeansShape shape{1, S, H, D, C};
  svg2_centroid_norms(dc.as<float>(), norms.as<float>(), active.as<int32_t>(), shape);
  svg2_assign(dx.data(), dc.as<float>(), norms.as<float>(), labels.as<int32_t>(),
              active.as<int32_t>(), shape);
  std::vector<int32_t> gpu(size_t(H * S));
  MMGEN_CUDA_CHECK(cudaDeviceSynchronize());
  labels.download(gpu.data(), gpu.size() * 4);
  int64_t differ = 0, near_ties = 0;
  double widest = 0;
  for (int64_t h = 0; h < H; ++h) {
    std::vector<float> rows(size_t(S * D));
    for (int64_t s = 0; s < S; ++s)
      for (int64_t d = 0; d < D; ++d)
        rows[size_t(s * D + d)] = x.values[size_t((s * H + h) * D + d)];
    const std::vector<float> initial(centroids.begin() + h * C * D,
                                     centroids.begin() + (h + 1) * C * D);
    const svg2::KMeansResult cpu = svg2::kmeans(rows.data(), S, D, initial, 0);
    for (int64_t s = 0; s < S; ++s) {
      const int32_t a = gpu[size_t(h * S + s)], b = cpu.labels[size_t(s)];
      if (a == b) continue;
      ++differ;
      double da = 0, db = 0, scale_sum = 0;
      for (int64_t d = 0; d < D; ++d) {
        const double p = rows[size_t(s * D + d)], ca = initial[size_t(a * D + d)],
                     cb = initial[size_t(b * D + d)];
        da += (p - ca) * (p - ca), db += (p - cb) * (p - cb), scale_sum += p * p;
      }
      const double gap = std::abs(da - db) / (scale_sum + da);
      widest = std::max(widest, gap);
      near_ties += gap < 1e-5;
    }
  }
  expect(
      differ == near_ties,
      fmt::format("one assignment of {} points to {} centroids: {} labels differ from the CPU's, "
                  "{} of them near-ties (largest relative gap {:.1e})",
                  H * S, C, differ, near_ties, widest));
}

// The device plan alone (svg2_select_pairs) against the CPU's select_cluster_pairs on the same
// random centroids and sizes (some clusters empty, some key centroids repeated with equal sizes:
// exact ties), at several top_p and min_kc_ratio: every row the device does not flag must equal
// the CPU's exactly (the flagged ones go to the host in the backend; their share is printed).
void check_selection(std::mt19937& generator) {
  const int64_t pairs = 3, qc = 300, kc = 1000, D = 128;
  const float scale = 1.0f / std::sqrt(float(D));
  std::normal_distribution<float> normal;
  std::uniform_int_distribution<int32_t> size(0, 60);
  std::vector<float> q(size_t(pairs * qc * D)), k(size_t(pairs * kc * D));
  for (auto& x : q) x = 0.5f * normal(generator);
  for (auto& x : k) x = 0.5f * normal(generator);
  std::vector<int32_t> sizes(size_t(pairs * kc));
  for (auto& n : sizes) n = size(generator) < 3 ? 0 : size(generator);
  for (int64_t p = 0; p < pairs; ++p)
    for (int64_t j = 0; j < 40; ++j) {  // cluster 2j+1 repeats cluster 2j
      std::copy_n(k.begin() + (p * kc + 2 * j) * D, D, k.begin() + (p * kc + 2 * j + 1) * D);
      sizes[size_t(p * kc + 2 * j + 1)] = sizes[size_t(p * kc + 2 * j)];
    }
  DeviceBuffer dq(q.size() * 4), dk(k.size() * 4), flags(size_t(pairs * qc)),
      selected(size_t(pairs * qc * kc)), flag_count(4);
  dq.upload(q.data(), dq.size()), dk.upload(k.data(), dk.size());
  const DeviceBuffer dsizes = upload_vector(sizes);
  for (const auto& [top_p, ratio] :
       std::vector<std::pair<double, double>>{{0.115, 0.0}, {0.5, 0.1}, {0.9, 0.1}, {0.999, 0}}) {
    MMGEN_CUDA_CHECK(cudaMemset(flag_count.data(), 0, 4));
    svg2_select_pairs(dq.as<float>(), dk.as<float>(), dsizes.as<int32_t>(), scale, top_p, ratio,
                      {pairs, qc, kc, D}, selected.as<uint8_t>(), flags.as<uint8_t>(),
                      flag_count.as<int32_t>());
    MMGEN_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<uint8_t> gpu(selected.size()), flagged(flags.size());
    selected.download(gpu.data(), gpu.size());
    flags.download(flagged.data(), flagged.size());
    int64_t flagged_rows = 0, wrong_rows = 0;
    for (int64_t p = 0; p < pairs; ++p) {
      const std::vector<int64_t> k_sizes(sizes.begin() + p * kc, sizes.begin() + (p + 1) * kc);
      const std::vector<uint8_t> cpu =
          svg2::select_cluster_pairs(q.data() + p * qc * D, qc, k.data() + p * kc * D,
                                     k_sizes.data(), kc, D, scale, top_p, ratio);
      for (int64_t i = 0; i < qc; ++i) {
        if (flagged[size_t(p * qc + i)]) {
          ++flagged_rows;
          continue;
        }
        wrong_rows += !std::equal(cpu.begin() + i * kc, cpu.begin() + (i + 1) * kc,
                                  gpu.begin() + (p * qc + i) * kc);
      }
    }
    expect(wrong_rows == 0,
           fmt::format("device plan, top_p {} min_kc_ratio {}: {} of {} rows unflagged and "
                       "unlike the CPU's ({} flagged for the host)",
                       top_p, ratio, wrong_rows, pairs * qc, flagged_rows));
  }
}

// --time: Wan-1.3B-sized calls (480p, 81 frames: 21x30x52 tokens, 12 heads of 128), GPU only,
// cold (step 0) and then warm, with the time of each step (each step's times summed over the
// calls so far), per setting: the defaults (top_p 0.9: random inputs have no structure, so the
// size-weighted centroid softmax is nearly flat and the density high), and top_p 0.115 without
// the min_kc_ratio floor (docs/performance-history.md's ~10% setting) at 300 / 1000 clusters and at
// 130 / 436 (the tokens per cluster of the CPU bench's 65 / 218 at 16384 tokens). flagged: query
// clusters whose kept pairs the host recomputed.
void time_wan_sized() {
  const int64_t B = 1, H = 12, D = 128;
  const std::array<int64_t, 3> grid = {21, 30, 52};
  const int64_t S = grid[0] * grid[1] * grid[2], count = B * S * H * D;
  std::mt19937 generator(7);
  std::vector<DeviceBuffer> inputs;
  for (int i = 0; i < 3; ++i) inputs.push_back(upload(random_bf16(size_t(count), generator).bits));
  DeviceBuffer out(size_t(count) * 2);
  SelfAttentionCall call;
  call.q = inputs[0].data(), call.k = inputs[1].data(), call.v = inputs[2].data();
  call.out = out.data();
  call.batch = B, call.tokens = S, call.heads = H, call.head_dim = D, call.grid = grid;
  call.scale = 1.0f / std::sqrt(float(D)), call.num_steps = 50, call.num_layers = 30;
  const json dense_start = {{"first_layers_fp", 0}, {"first_times_fp", 0}};
  json ten_percent = dense_start;
  ten_percent["top_p_kmeans"] = 0.115, ten_percent["min_kc_ratio"] = 0;
  json fewer = ten_percent;
  fewer["num_q_centroids"] = 130, fewer["num_k_centroids"] = 436;
  for (const json& settings : {dense_start, ten_percent, fewer}) {
    std::printf("time: settings %s\n", settings.dump().c_str());
    svg2::Svg2Cuda backend(svg2::Options::from_json(
        attention::validate_backend_config(settings, "sparse_video_gen_2_attn")));
    backend.count_pairs(true);
    backend.time_kernel(true);
    for (int64_t step = 0; step < 5; ++step) {
      call.step = step;
      MMGEN_CUDA_CHECK(cudaDeviceSynchronize());
      const double kept_before = backend.stats().kept_pairs,
                   total_before = backend.stats().total_pairs;
      const auto start = std::chrono::steady_clock::now();
      backend.run(call);
      MMGEN_CUDA_CHECK(cudaDeviceSynchronize());
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::string steps;
      for (const auto& [name, spent] : backend.step_seconds())
        steps += fmt::format(" {} {:.2f} ms;", name, spent * 1e3);
      std::printf(
          "time: step %lld (%s) %.2f ms in all; so far:%s density %.3f, flagged %lld\n",
          static_cast<long long>(step), step == 0 ? "cold" : "warm", seconds * 1e3, steps.c_str(),
          (backend.stats().kept_pairs - kept_before) / (backend.stats().total_pairs - total_before),
          static_cast<long long>(backend.last_flagged_rows()));
    }
  }
  // The dense kernel on the same call, for scale.
  FlashAttentionArgs dense = dense_args(call);
  flash_attention_forward(dense);
  MMGEN_CUDA_CHECK(cudaDeviceSynchronize());
  const auto start = std::chrono::steady_clock::now();
  flash_attention_forward(dense);
  MMGEN_CUDA_CHECK(cudaDeviceSynchronize());
  std::printf(
      "time: dense FlashAttention %.2f ms\n",
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() * 1e3);
}

}  // namespace

// --quick (the memcheck run): without the default-cluster case, whose CPU side is the slow part.
int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::string(argv[1]) == "--quick";
  if (argc > 1 && std::string(argv[1]) == "--time") return time_wan_sized(), 0;
  std::mt19937 generator(20250611);
  const std::vector<Case> cases = {
      {"cold then warm",
       {{"num_q_centroids", 16},
        {"num_k_centroids", 48},
        {"top_p_kmeans", 0.7},
        {"kmeans_iter_init", 10},
        {"first_layers_fp", 0},
        {"first_times_fp", 0}},
       1,
       2,
       128,
       {3, 10, 12},
       0,
       1,
       3,
       {{0}, {1}, {2}}},
      {"batch 2, head 64, odd grid",
       {{"num_q_centroids", 20},
        {"num_k_centroids", 40},
        {"top_p_kmeans", 0.9},
        {"min_kc_ratio", 0.2},
        {"first_layers_fp", 0},
        {"first_times_fp", 0}},
       2,
       3,
       64,
       {2, 9, 13},
       0,
       1,
       2,
       {{0}, {1}}},
      {"default clusters",
       {{"first_layers_fp", 0}, {"first_times_fp", 0}},
       1,
       2,
       128,
       {4, 16, 24},
       3,
       30,
       50,
       {{0}, {1}}},
      {"clusters clamped, iter_step 0",
       {{"num_q_centroids", 8},
        {"num_k_centroids", 1000},
        {"kmeans_iter_step", 0},
        {"first_layers_fp", 0},
        {"first_times_fp", 0}},
       1,
       2,
       64,
       {1, 4, 5},
       0,
       1,
       2,
       {{0}, {1}}},
      // About 10% density (docs/performance-history.md's CPU setting): the top-p crossing early in
      // the walk, no floor.
      {"top_p 0.115, no floor",
       {{"num_q_centroids", 24},
        {"num_k_centroids", 96},
        {"top_p_kmeans", 0.115},
        {"min_kc_ratio", 0},
        {"first_layers_fp", 0},
        {"first_times_fp", 0}},
       1,
       2,
       128,
       {3, 12, 16},
       0,
       1,
       3,
       {{0}, {1}, {2}}},
      // 40 layers: floor(0.03 · 40) = 1 dense layer; layer 0 is dense at every step.
      {"dense layer",
       {{"num_q_centroids", 16}, {"num_k_centroids", 32}},
       1,
       2,
       128,
       {2, 8, 8},
       0,
       40,
       10,
       {{0, 0, false}, {5, 0, false}}},
      // Two dense steps (first_times_fp 2) that cluster anyway, then warm sparse steps.
      {"dense steps with zero_step_kmeans_init",
       {{"num_q_centroids", 16},
        {"num_k_centroids", 32},
        {"zero_step_kmeans_init", true},
        {"first_times_fp", 2},
        {"first_layers_fp", 0}},
       1,
       2,
       128,
       {2, 8, 10},
       1,
       30,
       5,
       {{0, 0, false}, {1, 0, false}, {2}, {3}}},
      // Guidance branches interleaved: each warm-starts from its own centroids.
      {"two branches",
       {{"num_q_centroids", 12},
        {"num_k_centroids", 36},
        {"top_p_kmeans", 0.8},
        {"first_layers_fp", 0},
        {"first_times_fp", 0.2}},
       1,
       2,
       64,
       {3, 8, 9},
       2,
       30,
       5,
       {{0, 0, false}, {0, 1, false}, {1, 0}, {1, 1}, {2, 0}, {2, 1}}},
  };
  check_assignment(generator);
  check_selection(generator);
  for (const Case& c : cases)
    if (!quick || c.label != "default clusters") run_case(c, generator);

  const std::string refused = error_message([] {
    auto backend = make_sparse_self_attention_cuda("sparse_video_gen_2_attn", json::object());
    DeviceBuffer x(size_t(1 * 16 * 2 * 96) * 2), out(x.size());
    SelfAttentionCall call;
    call.q = call.k = call.v = x.data(), call.out = out.data();
    call.batch = 1, call.tokens = 16, call.heads = 2, call.head_dim = 96, call.grid = {1, 4, 4};
    backend->run(call);
  });
  expect(refused.find("head size 96") != std::string::npos,
         "head size 96 is refused with a clear error: " + refused);
  return finish("svg2_cuda_test");
}
