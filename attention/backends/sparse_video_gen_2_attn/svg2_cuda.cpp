// sparse_video_gen_2_attn on the GPU, the CPU backend's algorithm (svg2_attention.h) with the
// big tensors kept on the device:
//   k-means:   per (batch, head) and side, on the device (attention/cuda/svg2_kernels.h): cold
//              starts gather the same seeded tokens as the CPU, every assignment is the CPU's
//              distance rule, every update the CPU's double sums over the members in token order
//              (a stable radix sort by label), each head stopping on its own; the centroids stay
//              on the device per (layer, guidance branch) and warm-start the next step;
//   plan:      the centroids and cluster sizes (a few MB) go to the host, where the CPU's own
//              select_cluster_pairs picks the kept cluster pairs, so equal centroids give the same
//              pairs; the block lists are built there too;
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
#include <vector>

#include "attention/backends/sparse_video_gen_2_attn/svg2_kmeans.h"
#include "attention/cuda/svg2_kernels.h"
#include "core/cuda/cuda_check.h"
#include "core/error.h"

namespace mmgen::attention::svg2 {

using namespace mmgen::cuda;

namespace {

// The CPU's k-means tolerance (svg2_kmeans.h's default).
constexpr float kTolerance = 1e-4f;

int64_t round_up(int64_t value, int64_t step) {
  return (value + step - 1) / step * step;
}

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

void Svg2Cuda::forward(const SelfAttentionCall& call) {
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

  // The plan on the host, from the centroids and key-cluster sizes: the CPU's own selection.
  const int64_t qc = state.q_clusters, kc = state.k_clusters;
  const std::vector<float> q_centroids =
      download_vector<float>(state.q_centroids, size_t(pairs * qc * D));
  const std::vector<float> k_centroids =
      download_vector<float>(state.k_centroids, size_t(pairs * kc * D));
  const std::vector<int32_t> q_counts =
      download_vector<int32_t>(queries.counts, size_t(pairs * qc));
  const std::vector<int32_t> k_counts = download_vector<int32_t>(keys.counts, size_t(pairs * kc));
  std::vector<std::vector<uint8_t>> selected(static_cast<size_t>(pairs));
  for (int64_t p = 0; p < pairs; ++p) {
    const std::vector<int64_t> k_sizes(k_counts.begin() + p * kc, k_counts.begin() + (p + 1) * kc);
    selected[size_t(p)] = select_cluster_pairs(
        q_centroids.data() + p * qc * D, qc, k_centroids.data() + p * kc * D, k_sizes.data(), kc, D,
        call.scale, options_.top_p_kmeans, options_.min_kc_ratio);
  }

  // Slots: per pair, its query clusters in order, each padded to 64 rows; its key clusters, each
  // padded to whole 64-key blocks. Lists per 64-query half: the blocks of the kept, non-empty key
  // clusters, ascending (the CPU pattern's order).
  std::vector<int32_t> q_slot_start(size_t(pairs * qc)), k_slot_start(size_t(pairs * kc)),
      key_lengths, offsets, indices;
  int64_t q_rows = 0, k_slots = 0;
  for (int64_t i = 0; i < pairs * qc; ++i) {
    q_slot_start[size_t(i)] = int32_t(q_rows);
    q_rows += round_up(q_counts[size_t(i)], 64);
  }
  for (int64_t i = 0; i < pairs * kc; ++i) {
    k_slot_start[size_t(i)] = int32_t(k_slots);
    for (int64_t left = k_counts[size_t(i)]; left > 0; left -= kFlashBlockN)
      key_lengths.push_back(int32_t(std::min<int64_t>(left, kFlashBlockN)));
    k_slots += round_up(k_counts[size_t(i)], kFlashBlockN);
  }
  check(q_rows < (int64_t(1) << 31) && k_slots < (int64_t(1) << 31),
        "sparse_video_gen_2_attn on the GPU: {} padded query rows and {} key slots are too many",
        q_rows, k_slots);
  offsets.reserve(size_t(q_rows / 64 + 1));
  double kept_pairs = 0;
  std::vector<int32_t> list;
  for (int64_t p = 0; p < pairs; ++p)
    for (int64_t i = 0; i < qc; ++i) {
      const int64_t rows = q_counts[size_t(p * qc + i)];
      if (rows == 0) continue;
      list.clear();
      const uint8_t* keep = selected[size_t(p)].data() + i * kc;
      for (int64_t j = 0; j < kc; ++j) {
        const int64_t keys_j = k_counts[size_t(p * kc + j)];
        if (!keep[j] || keys_j == 0) continue;
        kept_pairs += double(rows) * double(keys_j);
        const int64_t first = k_slot_start[size_t(p * kc + j)] / kFlashBlockN;
        for (int64_t block = 0; block < (keys_j + kFlashBlockN - 1) / kFlashBlockN; ++block)
          list.push_back(int32_t(first + block));
      }
      for (int64_t half = 0; half < round_up(rows, 64) / 64; ++half) {
        offsets.push_back(int32_t(indices.size()));
        indices.insert(indices.end(), list.begin(), list.end());
        check(indices.size() < (size_t(1) << 31),
              "sparse_video_gen_2_attn on the GPU: the block lists exceed 2^31 entries");
      }
    }
  offsets.push_back(int32_t(indices.size()));
  mark_step("plan (host)");

  // Permute into the slots.
  const Svg2KmeansShape q_shape = queries.shape, k_shape = keys.shape;
  DeviceBuffer q_token_of_slot(size_t(q_rows) * 4), k_token_of_slot(size_t(k_slots) * 4);
  MMGEN_CUDA_CHECK(cudaMemset(q_token_of_slot.data(), 0xff, q_token_of_slot.size()));
  MMGEN_CUDA_CHECK(cudaMemset(k_token_of_slot.data(), 0xff, k_token_of_slot.size()));
  const DeviceBuffer q_starts = upload_vector(q_slot_start), k_starts = upload_vector(k_slot_start);
  svg2_slots(queries.view(), q_starts.as<int32_t>(), q_token_of_slot.as<int32_t>(), q_shape);
  svg2_slots(keys.view(), k_starts.as<int32_t>(), k_token_of_slot.as<int32_t>(), k_shape);
  DeviceBuffer q_perm(size_t(q_rows * D) * 2), k_perm(size_t(k_slots * D) * 2),
      v_perm(size_t(k_slots * D) * 2), out_perm(size_t(q_rows * D) * 2);
  svg2_gather_rows(call.q, q_token_of_slot.as<int32_t>(), q_perm.data(), q_rows, q_shape);
  svg2_gather_rows(call.k, k_token_of_slot.as<int32_t>(), k_perm.data(), k_slots, k_shape);
  svg2_gather_rows(call.v, k_token_of_slot.as<int32_t>(), v_perm.data(), k_slots, k_shape);
  const DeviceBuffer device_offsets = upload_vector(offsets),
                     device_indices = upload_vector(indices),
                     device_lengths = upload_vector(key_lengths);
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
    last_plans_.resize(size_t(pairs));
    for (int64_t p = 0; p < pairs; ++p) {
      HeadPlan& plan = last_plans_[size_t(p)];
      plan.q_clusters = qc, plan.k_clusters = kc;
      plan.q_labels.assign(q_labels.begin() + p * S, q_labels.begin() + (p + 1) * S);
      plan.k_labels.assign(k_labels.begin() + p * S, k_labels.begin() + (p + 1) * S);
      plan.selected = std::move(selected[size_t(p)]);
    }
  }
}

std::unique_ptr<cuda::SparseSelfAttentionCuda> make_cuda(const nlohmann::json& settings,
                                                         const BackendResources&) {
  return std::make_unique<Svg2Cuda>(Options::from_json(settings));
}

}  // namespace mmgen::attention::svg2
