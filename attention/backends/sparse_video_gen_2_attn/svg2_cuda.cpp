// sparse_video_gen_2_attn on the GPU, the CPU backend's algorithm (svg2_attention.h) with the
// big tensors kept on the device:
//   k-means:   per (batch, head) and side, on the device (svg2_kernels.h, this folder): cold
//              starts gather the same seeded tokens as the CPU, every assignment is the CPU's
//              distance rule, every update the CPU's double sums over the members in token order
//              (a stable radix sort by label), each head stopping on its own; the centroids stay
//              on the device per (layer, guidance branch) and warm-start the next step;
//   plan:      on the device (svg2_select_pairs): a CTA per query cluster scores its key
//              clusters in double, sorts the masses and walks the top-p, then proves that the
//              CPU's float32 scores (Eigen's summation order, which the device cannot repeat: its
//              kernels split some rows' sums into even and odd k) would give the same kept set;
//              the rows it cannot prove (near-ties, a few percent on flat random inputs) are
//              recomputed on the host with the CPU's own product and walk, and patched in. The
//              block lists, offsets and key-block lengths are built on the device (two scans),
//              so the host only downloads five totals (and, for flagged rows, their pairs'
//              centroids);
//   attention: every head's tokens permuted into cluster order on the device, each query cluster
//              padded to whole 64-row halves and each key cluster to whole 64-key blocks (the
//              padding masked by key_block_lengths), all heads laid end to end as one sequence,
//              so one launch of the block-sparse FlashAttention kernel, with a list per 64-query
//              half, attends every cluster to exactly its kept key clusters; then the rows go
//              back to token order.
// Padding rather than the CPU's gathered chunks: gathering each query cluster's keys would copy
// the kept keys once per query cluster (hundreds of times per head at the default 300 clusters),
// while padding costs at most 63 slots per cluster; on Wan-sized sequences (~30k tokens, 1000 key
// clusters of ~33 keys) that is up to about twice the key blocks of an ideal variable-size kernel.
//
// The GPU transformer's self-attention holds video tokens only, so there is no text cluster.
#include "attention/backends/sparse_video_gen_2_attn/svg2_cuda.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "attention/backends/sparse_video_gen_2_attn/svg2_kernels.h"
#include "attention/backends/sparse_video_gen_2_attn/svg2_kmeans.h"
#include "core/cuda/cuda_check.h"
#include "core/error.h"
#include "core/ops.h"

namespace mmgen::attention::svg2 {

using namespace mmgen::cuda;

namespace {

// The CPU's k-means tolerance (svg2_kmeans.h's default).
constexpr float kTolerance = 1e-4f;

template <typename T>
std::vector<T> download_vector(const DeviceBuffer& buffer, size_t count) {
  std::vector<T> values(count);
  MMGEN_CUDA_CHECK(cudaDeviceSynchronize());
  if (count > 0) buffer.download(values.data(), count * sizeof(T));
  return values;
}

}  // namespace

// One side's clustering of the call: the labels and, sorted by cluster, the members.
struct KmeansSide {
  Svg2KmeansShape shape;
  DeviceBuffer labels, keys, tokens, keys_sorted, members, counts, starts, scratch;
  Svg2Members view() const {
    Svg2Members m;
    m.keys = keys.as<int32_t>(), m.tokens = tokens.as<int32_t>();
    m.keys_sorted = keys_sorted.as<int32_t>(), m.members = members.as<int32_t>();
    m.counts = counts.as<int32_t>(), m.starts = starts.as<int32_t>();
    m.scratch = scratch.data(), m.scratch_bytes = scratch.size();
    return m;
  }
};

namespace {

// k-means of one side of every (batch, head), from `centroids` (cold: the seeded tokens are
// gathered into it first), `iterations` updates at most; the CPU's kmeans() per head. Returns the
// most updates any head ran.
int64_t kmeans_side(const void* x, const Svg2KmeansShape& shape, DeviceBuffer& centroids, bool warm,
                    int64_t iterations, int64_t layer, int side, KmeansSide& out) {
  const int64_t pairs = shape.pairs(), points = pairs * shape.seq;
  const int64_t entries = pairs * shape.clusters;
  out.shape = shape;
  for (DeviceBuffer* b : {&out.labels, &out.keys, &out.tokens, &out.keys_sorted, &out.members})
    *b = DeviceBuffer(size_t(points) * sizeof(int32_t));
  out.counts = DeviceBuffer(size_t(entries) * sizeof(int32_t));
  out.starts = DeviceBuffer(size_t(entries) * sizeof(int32_t));
  out.scratch = DeviceBuffer(std::max<size_t>(svg2_sort_scratch_bytes(shape), 1));
  if (!warm) {
    // The CPU's seeded picks (they depend on the counts and the seed only, not on the values).
    std::vector<int32_t> picks;
    picks.reserve(size_t(entries));
    for (int64_t p = 0; p < pairs; ++p)
      for (int64_t token :
           seeded_initial_picks(shape.seq, shape.clusters, cold_start_seed(layer, p, side)))
        picks.push_back(int32_t(token));
    const DeviceBuffer device_picks = upload_vector(picks);
    svg2_gather_centroids(x, device_picks.as<int32_t>(), centroids.as<float>(), shape);
  }
  const std::vector<int32_t> ones(size_t(pairs), 1);
  const DeviceBuffer active = upload_vector(ones);
  DeviceBuffer done(size_t(pairs) * sizeof(int32_t)), shift(size_t(pairs) * sizeof(uint32_t)),
      norms(size_t(entries) * sizeof(float));
  MMGEN_CUDA_CHECK(cudaMemset(done.data(), 0, done.size()));
  const Svg2Members members = out.view();
  // As the CPU's loop: assign; stop there with no update left; else update, and a head whose
  // centroids moved less than the tolerance (or that spent its budget) stops with the labels of
  // this assignment, its centroids their means.
  for (int64_t iteration = 0;; ++iteration) {
    svg2_centroid_norms(centroids.as<float>(), norms.as<float>(), active.as<int32_t>(), shape);
    svg2_assign(x, centroids.as<float>(), norms.as<float>(), out.labels.as<int32_t>(),
                active.as<int32_t>(), shape);
    svg2_sort_members(out.labels.as<int32_t>(), members, shape);
    if (iteration >= iterations) break;
    MMGEN_CUDA_CHECK(cudaMemset(shift.data(), 0, shift.size()));
    svg2_update(x, members, centroids.as<float>(), shift.as<uint32_t>(), done.as<int32_t>(),
                active.as<int32_t>(), iterations, kTolerance, shape);
    const std::vector<int32_t> still = download_vector<int32_t>(active, size_t(pairs));
    if (std::none_of(still.begin(), still.end(), [](int32_t a) { return a != 0; })) break;
  }
  const std::vector<int32_t> ran = download_vector<int32_t>(done, size_t(pairs));
  return *std::max_element(ran.begin(), ran.end());
}

}  // namespace

const DeviceCentroids* Svg2Cuda::centroids(int64_t layer, int branch) const {
  const auto it = states_.find({layer, branch == 0 ? 0 : 1});
  return it == states_.end() ? nullptr : &it->second;
}

void Svg2Cuda::cluster(const SelfAttentionCall& call, DeviceCentroids& state, KmeansSide* queries,
                       KmeansSide* keys) {
  const int64_t B = call.batch, S = call.tokens, H = call.heads, D = call.head_dim;
  const int64_t q_clusters = std::min(options_.num_q_centroids, S);
  const int64_t k_clusters = std::min(options_.num_k_centroids, S);
  const bool warm = state.clusterings > 0 && state.batch == B && state.heads == H &&
                    state.dim == D && state.q_clusters == q_clusters &&
                    state.k_clusters == k_clusters;
  if (!warm) {
    state = DeviceCentroids{};
    state.batch = B, state.heads = H, state.dim = D;
    state.q_clusters = q_clusters, state.k_clusters = k_clusters;
    state.q_centroids = DeviceBuffer(size_t(B * H * q_clusters * D) * sizeof(float));
    state.k_centroids = DeviceBuffer(size_t(B * H * k_clusters * D) * sizeof(float));
  }
  const int64_t iterations = warm ? options_.kmeans_iter_step : options_.kmeans_iter_init;
  KmeansSide scratch_q, scratch_k;
  const int64_t most =
      std::max(kmeans_side(call.q, {B, S, H, D, q_clusters}, state.q_centroids, warm, iterations,
                           call.layer, 0, queries ? *queries : scratch_q),
               kmeans_side(call.k, {B, S, H, D, k_clusters}, state.k_centroids, warm, iterations,
                           call.layer, 1, keys ? *keys : scratch_k));
  ++state.clusterings;
  state.last_warm_start = warm;
  state.last_iterations = most;
}

// The rows the device flagged, as the CPU computes them (svg2_plan.cpp's select_cluster_pairs):
// per pair with a flagged row, the same Eigen product with the same arguments (so the same
// float32 scores: the pairs run one after another, as the CPU backend calls it, so Eigen splits
// each product over its threads the same way), then each flagged row's masses and walk in the
// CPU's double arithmetic. The CPU sorts growing prefixes; its order is a strict total order, so
// a full sort gives the same kept set and the same running sums. Only the flagged pairs'
// centroids and the flagged rows cross the bus.
void Svg2Cuda::patch_rows_on_host(const SelfAttentionCall& call, const DeviceCentroids& state,
                                  const KmeansSide& keys, const DeviceBuffer& flags,
                                  DeviceBuffer& selected) {
  const int64_t D = call.head_dim, qc = state.q_clusters, kc = state.k_clusters;
  const int64_t pairs = state.batch * state.heads;
  const std::vector<uint8_t> flagged = download_vector<uint8_t>(flags, size_t(pairs * qc));
  const std::vector<int32_t> k_counts = download_vector<int32_t>(keys.counts, size_t(pairs * kc));
  const double top_p = options_.top_p_kmeans;
  const int64_t always_kept = int64_t(std::floor(options_.min_kc_ratio * double(kc)));
  std::vector<int32_t> row_ids;
  std::vector<uint8_t> rows;
  std::vector<float> q_centroids(size_t(qc * D)), k_centroids(size_t(kc * D)),
      scores(size_t(qc * kc));
  for (int64_t p = 0; p < pairs; ++p) {
    const int64_t first_row = int64_t(row_ids.size());
    for (int64_t i = 0; i < qc; ++i)
      if (flagged[size_t(p * qc + i)]) row_ids.push_back(int32_t(p * qc + i));
    const int64_t count = int64_t(row_ids.size()) - first_row;
    if (count == 0) continue;
    MMGEN_CUDA_CHECK(cudaMemcpy(q_centroids.data(), state.q_centroids.as<float>() + p * qc * D,
                                q_centroids.size() * sizeof(float), cudaMemcpyDeviceToHost));
    MMGEN_CUDA_CHECK(cudaMemcpy(k_centroids.data(), state.k_centroids.as<float>() + p * kc * D,
                                k_centroids.size() * sizeof(float), cudaMemcpyDeviceToHost));
    ops::gemm_bt(q_centroids.data(), k_centroids.data(), scores.data(), qc, D, kc);
    rows.resize(size_t((first_row + count) * kc), 0);
    const int32_t* sizes = k_counts.data() + p * kc;
#pragma omp parallel for schedule(dynamic, 1) if (count > 1)
    for (int64_t r = 0; r < count; ++r) {
      const int64_t i = row_ids[size_t(first_row + r)] - p * qc;
      uint8_t* keep = rows.data() + (first_row + r) * kc;
      std::fill(keep, keep + kc, uint8_t(0));
      if (top_p >= 1.0) {
        std::fill(keep, keep + kc, uint8_t(1));
        continue;
      }
      const float* s = scores.data() + i * kc;
      std::vector<double> mass(static_cast<size_t>(kc));
      std::vector<int64_t> sorted(static_cast<size_t>(kc));
      double row_max = -INFINITY, total = 0;
      for (int64_t j = 0; j < kc; ++j) row_max = std::max(row_max, double(s[j]) * call.scale);
      for (int64_t j = 0; j < kc; ++j) {
        mass[size_t(j)] = double(int64_t(sizes[j])) * std::exp(double(s[j]) * call.scale - row_max);
        total += mass[size_t(j)];
      }
      for (auto& m : mass) m /= std::max(total, 1e-12);
      std::iota(sorted.begin(), sorted.end(), int64_t(0));
      std::sort(sorted.begin(), sorted.end(), [&](int64_t a, int64_t b) {
        return mass[size_t(a)] > mass[size_t(b)] || (mass[size_t(a)] == mass[size_t(b)] && a < b);
      });
      double before = 0;
      for (int64_t rank = 0; rank < kc; ++rank) {
        const int64_t j = sorted[size_t(rank)];
        if (rank == 0 || rank < always_kept || before <= top_p)
          keep[j] = 1;
        else
          break;
        before += mass[size_t(j)];
      }
    }
  }
  const DeviceBuffer device_rows = upload_vector(rows), device_ids = upload_vector(row_ids);
  svg2_patch_rows(device_rows.as<uint8_t>(), device_ids.as<int32_t>(), int64_t(row_ids.size()), kc,
                  selected.as<uint8_t>());
}

void Svg2Cuda::run(const SelfAttentionCall& call) {
  check_call("sparse_video_gen_2_attn", call);
  const int64_t B = call.batch, S = call.tokens, H = call.heads, D = call.head_dim;
  const int64_t pairs = B * H;
  const double total_pairs = double(pairs) * double(S) * double(S);
  std::lock_guard lock(mutex_);
  // The CPU keeps one state per guidance branch and clears it at step 0 (a new run).
  DeviceCentroids& state = states_[{call.layer, call.branch == 0 ? 0 : 1}];
  if (call.step == 0) state = DeviceCentroids{};
  last_plans_.clear();
  last_dense_ = true;
  if (call.layer < options_.dense_layers(call.num_layers) ||
      call.step < options_.dense_steps(call.num_steps)) {
    if (options_.zero_step_kmeans_init) cluster(call, state, nullptr, nullptr);
    if (counting_) stats_.kept_pairs += total_pairs, stats_.total_pairs += total_pairs;
    return run_kernel(dense_args(call));
  }
  start_steps();
  KmeansSide queries, keys;
  cluster(call, state, &queries, &keys);
  mark_step("k-means");

  // The plan on the device (svg2_kernels.h): the kept pairs of every query cluster, the CPU's
  // rule in exact arithmetic with the rows it cannot prove equal to the CPU's left to the host.
  const int64_t qc = state.q_clusters, kc = state.k_clusters;
  const Svg2PlanShape plan{pairs, qc, kc, D};
  const int64_t q_n = plan.q_rows(), k_n = plan.k_rows();
  DeviceBuffer selected(size_t(std::max<int64_t>(q_n * kc, 1))),
      flags(size_t(std::max<int64_t>(q_n, 1))), counters(16), totals(5 * sizeof(int64_t));
  int32_t* flag_count = counters.as<int32_t>();
  auto* kept_counter = reinterpret_cast<unsigned long long*>(counters.as<unsigned char>() + 8);
  MMGEN_CUDA_CHECK(cudaMemsetAsync(counters.data(), 0, counters.size()));
  svg2_select_pairs(state.q_centroids.as<float>(), state.k_centroids.as<float>(),
                    keys.counts.as<int32_t>(), call.scale, options_.top_p_kmeans,
                    options_.min_kc_ratio, plan, selected.as<uint8_t>(), flags.as<uint8_t>(),
                    flag_count);
  // Blocks per cluster and their exclusive sums (each array one longer: its last sum is the
  // total).
  DeviceBuffer q_blocks(size_t(q_n + 1) * 4), q_half_start(size_t(q_n + 1) * 4),
      k_blocks(size_t(k_n + 1) * 4), k_block_start(size_t(k_n + 1) * 4),
      list_len(size_t(std::max<int64_t>(q_n, 1)) * 4), entries(size_t(q_n + 1) * 8),
      entry_start(size_t(q_n + 1) * 8);
  const size_t scan_bytes = svg2_scan_scratch_bytes(std::max(q_n, k_n) + 1);
  DeviceBuffer scan_scratch(scan_bytes);
  svg2_block_counts(queries.counts.as<int32_t>(), q_n, q_blocks.as<int32_t>());
  svg2_exclusive_scan(q_blocks.as<int32_t>(), q_half_start.as<int32_t>(), q_n + 1,
                      scan_scratch.data(), scan_bytes);
  svg2_block_counts(keys.counts.as<int32_t>(), k_n, k_blocks.as<int32_t>());
  svg2_exclusive_scan(k_blocks.as<int32_t>(), k_block_start.as<int32_t>(), k_n + 1,
                      scan_scratch.data(), scan_bytes);
  // List lengths and the totals: the one download of the plan (five integers).
  auto count_lists = [&] {
    MMGEN_CUDA_CHECK(cudaMemsetAsync(kept_counter, 0, sizeof(unsigned long long)));
    svg2_list_lengths(selected.as<uint8_t>(), queries.counts.as<int32_t>(),
                      keys.counts.as<int32_t>(), plan, list_len.as<int32_t>(),
                      entries.as<int64_t>(), kept_counter);
    svg2_exclusive_scan(entries.as<int64_t>(), entry_start.as<int64_t>(), q_n + 1,
                        scan_scratch.data(), scan_bytes);
    svg2_plan_totals(flag_count, q_half_start.as<int32_t>(), k_block_start.as<int32_t>(),
                     entry_start.as<int64_t>(), kept_counter, plan, totals.as<int64_t>());
    return download_vector<int64_t>(totals, 5);
  };
  std::vector<int64_t> sums = count_lists();
  mark_step("plan (device)");
  if (sums[0] > 0) {
    patch_rows_on_host(call, state, keys, flags, selected);
    sums = count_lists();
    mark_step("plan (host, flagged rows)");
  }
  last_flagged_rows_ = sums[0];
  const int64_t q_halves = sums[1], k_block_count = sums[2], entry_count = sums[3];
  const double kept_pairs = double(sums[4]);
  const int64_t q_rows = q_halves * 64, k_slots = k_block_count * kFlashBlockN;
  check(q_rows < (int64_t(1) << 31) && k_slots < (int64_t(1) << 31),
        "sparse_video_gen_2_attn on the GPU: {} padded query rows and {} key slots are too many",
        q_rows, k_slots);
  check(entry_count < (int64_t(1) << 31),
        "sparse_video_gen_2_attn on the GPU: the block lists exceed 2^31 entries");

  // Slots: per pair, its query clusters in order, each padded to 64 rows; its key clusters, each
  // padded to whole 64-key blocks. Lists per 64-query half: the blocks of the kept, non-empty key
  // clusters, ascending (the CPU pattern's order).
  DeviceBuffer device_offsets(size_t(q_halves + 1) * 4),
      device_indices(size_t(std::max<int64_t>(entry_count, 1)) * 4),
      device_lengths(size_t(std::max<int64_t>(k_block_count, 1)) * 4),
      q_starts(size_t(std::max<int64_t>(q_n, 1)) * 4),
      k_starts(size_t(std::max<int64_t>(k_n, 1)) * 4);
  Svg2ListArgs lists;
  lists.selected = selected.as<uint8_t>();
  lists.q_counts = queries.counts.as<int32_t>(), lists.k_counts = keys.counts.as<int32_t>();
  lists.q_half_start = q_half_start.as<int32_t>(),
  lists.k_block_start = k_block_start.as<int32_t>();
  lists.list_len = list_len.as<int32_t>(), lists.entry_start = entry_start.as<int64_t>();
  lists.offsets = device_offsets.as<int32_t>(), lists.indices = device_indices.as<int32_t>();
  lists.key_lengths = device_lengths.as<int32_t>();
  lists.q_slot_start = q_starts.as<int32_t>(), lists.k_slot_start = k_starts.as<int32_t>();
  svg2_write_lists(lists, plan);
  mark_step("lists");

  // Permute into the slots.
  const Svg2KmeansShape q_shape = queries.shape, k_shape = keys.shape;
  DeviceBuffer q_token_of_slot(size_t(q_rows) * 4), k_token_of_slot(size_t(k_slots) * 4);
  MMGEN_CUDA_CHECK(cudaMemset(q_token_of_slot.data(), 0xff, q_token_of_slot.size()));
  MMGEN_CUDA_CHECK(cudaMemset(k_token_of_slot.data(), 0xff, k_token_of_slot.size()));
  svg2_slots(queries.view(), q_starts.as<int32_t>(), q_token_of_slot.as<int32_t>(), q_shape);
  svg2_slots(keys.view(), k_starts.as<int32_t>(), k_token_of_slot.as<int32_t>(), k_shape);
  DeviceBuffer q_perm(size_t(q_rows * D) * 2), k_perm(size_t(k_slots * D) * 2),
      v_perm(size_t(k_slots * D) * 2), out_perm(size_t(q_rows * D) * 2);
  svg2_gather_rows(call.q, q_token_of_slot.as<int32_t>(), q_perm.data(), q_rows, q_shape);
  svg2_gather_rows(call.k, k_token_of_slot.as<int32_t>(), k_perm.data(), k_slots, k_shape);
  svg2_gather_rows(call.v, k_token_of_slot.as<int32_t>(), v_perm.data(), k_slots, k_shape);
  mark_step("permute");

  // Every head end to end as one sequence of one head: lists and key-block lengths are global.
  FlashAttentionArgs args;
  args.q = q_perm.data(), args.k = k_perm.data(), args.v = v_perm.data();
  args.out = out_perm.data();
  args.batch = 1, args.heads = 1, args.seq_q = q_rows, args.seq_k = k_slots, args.head_dim = D;
  args.scale = call.scale;
  args.q_strides = args.out_strides = {q_rows * D, D, D};
  args.k_strides = args.v_strides = {k_slots * D, D, D};
  args.block_offsets = device_offsets.as<int32_t>();
  args.block_indices = device_indices.as<int32_t>();
  args.key_block_lengths = device_lengths.as<int32_t>();
  args.lists_per_half = true;
  run_kernel(args);
  mark_step("sparse pass (kernel)");
  svg2_scatter_rows(out_perm.data(), q_token_of_slot.as<int32_t>(), call.out, q_rows, q_shape);
  mark_step("unpermute");
  if (counting_) stats_.kept_pairs += kept_pairs, stats_.total_pairs += total_pairs;
  last_dense_ = false;

  if (keep_plans_) {
    const std::vector<int32_t> q_labels =
        download_vector<int32_t>(queries.labels, size_t(pairs * S));
    const std::vector<int32_t> k_labels = download_vector<int32_t>(keys.labels, size_t(pairs * S));
    const std::vector<uint8_t> kept = download_vector<uint8_t>(selected, size_t(q_n * kc));
    last_plans_.resize(size_t(pairs));
    for (int64_t p = 0; p < pairs; ++p) {
      HeadPlan& head = last_plans_[size_t(p)];
      head.q_clusters = qc, head.k_clusters = kc;
      head.q_labels.assign(q_labels.begin() + p * S, q_labels.begin() + (p + 1) * S);
      head.k_labels.assign(k_labels.begin() + p * S, k_labels.begin() + (p + 1) * S);
      head.selected.assign(kept.begin() + p * qc * kc, kept.begin() + (p + 1) * qc * kc);
    }
  }
}

std::unique_ptr<cuda::SparseSelfAttentionCuda> make_cuda(const nlohmann::json& settings,
                                                         const BackendResources&) {
  return std::make_unique<Svg2Cuda>(Options::from_json(settings));
}

}  // namespace mmgen::attention::svg2
