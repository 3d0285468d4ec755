// vmoba_attn on the GPU, the CPU backend's two exact passes on the device:
//   1. own chunks: the video tokens regrouped chunk by chunk into whole key blocks
//      (attention/cuda/box_layout.h), each 64-query half attending its own chunk's blocks (static
//      lists), with the log-sum-exp kept;
//   2. experts: every query's chosen chunks (vmoba_kernels.h, this folder: the chunk mean keys
//      split into three bf16 parts so one tensor-core product gives float32 scores, then the
//      CPU's query_head rule per query), the queries that chose chunk c gathered into one run of
//      rows per (batch, head), each run attending chunk c; then every query's own and expert
//      results merged by log-sum-exp, chunks ascending, as the CPU merges them.
// The head_global and overall thresholds rank all of a head's (or batch's) scores together; they
// choose on the host with the CPU's code (select_chunks) and hand the choice to the same passes.
#include "attention/backends/vmoba_attn/vmoba_attn_cuda.h"

#include <algorithm>
#include <array>
#include <mutex>
#include <vector>

#include "attention/backends/vmoba_attn/vmoba_kernels.h"
#include "attention/backends/vmoba_attn/vmoba_settings.h"
#include "attention/kernels/block_sparse.h"
#include "attention/kernels/sta_tiling.h"
#include "attention/sparse_self_attention_cuda.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/gemm.h"
#include "core/dtype.h"
#include "core/error.h"

namespace mmgen::attention::vmoba_attn {

namespace {

using namespace mmgen::cuda;
using vmoba::ChunkKind;

int64_t round_up(int64_t value, int64_t step) {
  return (value + step - 1) / step * step;
}

// One chunking of one grid, with everything that depends only on it and the (batch, head) count.
struct Chunking {
  Grid3 grid{};
  int64_t pairs = 0;
  std::shared_ptr<const SlotLayout> slots;
  DeviceBuffer chunk_lengths;             // int32 per chunk
  DeviceBuffer own_offsets, own_indices;  // pass 1's lists, per (pair, 64-query half)
  std::vector<int64_t> slot_of_position;  // the CPU chunking's positions → slots (host path)
  std::vector<int64_t> order;             // the CPU chunking's token order (host path)
  BlockLayout chunks;                     // (host path)
};

class VmobaCuda final : public SparseSelfAttentionCuda {
 public:
  explicit VmobaCuda(const VmobaSettings& settings) : settings_(settings) {}

  std::string_view name() const override { return "vmoba_attn"; }

  void run(const SelfAttentionCall& call) override {
    check_call("vmoba_attn", call);
    const int64_t pairs = call.batch * call.heads;
    const double total_pairs = double(pairs) * double(call.tokens) * double(call.tokens);
    if (settings_.dense_at(call.step, call.layer)) {
      if (counting_) stats_.kept_pairs += total_pairs, stats_.total_pairs += total_pairs;
      return run_kernel(dense_args(call));
    }
    std::lock_guard lock(mutex_);
    const ChunkKind kind = settings_.kind_of_layer(call.layer);
    const Chunking& chunking = chunking_for(kind, call);
    const SlotLayout& layout = *chunking.slots;
    const int64_t chunks = layout.boxes, slots = layout.slots, D = call.head_dim;
    const int64_t width = call.heads * D, words = vmoba_mask_words(chunks);

    start_steps();
    SlotBuffers buffers(call, layout);
    mark_step("regroup q, k, v");
    // Pass 1: own chunks.
    DeviceBuffer own_lse(size_t(pairs * slots) * sizeof(float));
    FlashAttentionArgs own = buffers.args(call, layout);
    own.block_offsets = chunking.own_offsets.as<int32_t>();
    own.block_indices = chunking.own_indices.as<int32_t>();
    own.lists_per_half = true;
    own.lse = own_lse.as<float>();
    run_kernel(own);
    mark_step("own-chunk pass (kernel)");

    // The choices: a bitmask per query and the queries per (pair, chunk).
    DeviceBuffer chosen(size_t(pairs * slots * words) * sizeof(uint32_t));
    std::vector<int32_t> counts(size_t(pairs * chunks), 0);
    const vmoba::SelectOptions options = settings_.select_options(kind);
    if (options.group == vmoba::SelectGroup::QueryHead && chunks <= vmoba_max_chunks())
      select_on_device(call, chunking, options, buffers, chosen, counts);
    else
      select_on_host(call, chunking, options, chosen, counts);
    mark_step("choose: counts to the host");

    // Pass 2: the expert runs, padded to whole 64-row halves, one after another per pair.
    // run_start, then run_end, each [pairs, chunks].
    std::vector<int32_t> runs_host(2 * counts.size());
    int64_t rows = 0, entries = 0;
    for (int64_t p = 0; p < pairs; ++p) {
      int64_t row = 0;
      for (int64_t c = 0; c < chunks; ++c) {
        const int64_t n = counts[size_t(p * chunks + c)];
        runs_host[size_t(p * chunks + c)] = int32_t(row);
        row += round_up(n, 64);
        runs_host[counts.size() + size_t(p * chunks + c)] = int32_t(row);
        entries += n;
      }
      rows = std::max(rows, row);
    }
    check(rows < (int64_t(1) << 31) && entries < (int64_t(1) << 31),
          "vmoba_attn on the GPU: {} expert rows are too many", rows);
    DeviceBuffer entry_offset(size_t(std::max<int64_t>(pairs * slots, 1)) * sizeof(int32_t)),
        entry_rows(size_t(std::max<int64_t>(entries, 1)) * sizeof(int32_t)), expert, expert_lse;
    if (rows > 0) {
      const DeviceBuffer run_bounds = upload_vector(runs_host);
      const int32_t* starts = run_bounds.as<int32_t>();
      DeviceBuffer cursor(counts.size() * sizeof(int32_t)), total(sizeof(int32_t)),
          slot_of_row(size_t(pairs * rows) * sizeof(int32_t));
      MMGEN_CUDA_CHECK(cudaMemset(cursor.data(), 0, cursor.size()));
      MMGEN_CUDA_CHECK(cudaMemset(total.data(), 0, total.size()));
      MMGEN_CUDA_CHECK(cudaMemset(slot_of_row.data(), 0xff, slot_of_row.size()));
      VmobaRunsArgs runs;
      runs.chosen = chosen.as<uint32_t>(), runs.run_start = starts;
      runs.cursor = cursor.as<int32_t>(), runs.entry_total = total.as<int32_t>();
      runs.entry_offset = entry_offset.as<int32_t>(), runs.entry_rows = entry_rows.as<int32_t>();
      runs.slot_of_row = slot_of_row.as<int32_t>();
      runs.pairs = pairs, runs.slots = slots, runs.chunks = chunks, runs.rows = rows;
      vmoba_runs(runs);
      DeviceBuffer gathered(size_t(call.batch * rows * width) * 2);
      vmoba_gather_rows(buffers.q.data(), gathered.data(), slot_of_row.as<int32_t>(), call.batch,
                        slots, rows, call.heads, D);
      mark_step("expert runs and gather");
      expert = DeviceBuffer(gathered.size());
      expert_lse = DeviceBuffer(size_t(pairs * rows) * sizeof(float));
      FlashAttentionArgs args = buffers.args(call, layout);
      args.q = gathered.data(), args.out = expert.data(), args.seq_q = rows;
      args.q_strides = args.out_strides = {rows * width, width, D};
      const int64_t halves = rows / 64, blocks = layout.stride / kFlashBlockN;
      DeviceBuffer offsets(size_t(pairs * halves + 1) * sizeof(int32_t)),
          indices(size_t(pairs * halves * blocks) * sizeof(int32_t));
      vmoba_expert_lists(starts + counts.size(), pairs, chunks, halves, blocks,
                         offsets.as<int32_t>(), indices.as<int32_t>());
      args.block_offsets = offsets.as<int32_t>(), args.block_indices = indices.as<int32_t>();
      args.lists_per_half = true;
      args.lse = expert_lse.as<float>();
      mark_step("expert lists");
      run_kernel(args);
      mark_step("expert pass (kernel)");
    }

    VmobaMergeArgs merge;
    merge.own = buffers.out.data(), merge.own_lse = own_lse.as<float>();
    merge.expert = expert.data(), merge.expert_lse = expert_lse.as<float>();
    merge.chosen = chosen.as<uint32_t>(), merge.entry_offset = entry_offset.as<int32_t>();
    merge.entry_rows = entry_rows.as<int32_t>();
    merge.token_of_slot = layout.token_of_slot.as<int32_t>(), merge.out = call.out;
    merge.batch = call.batch, merge.heads = call.heads, merge.head_dim = D, merge.slots = slots;
    merge.rows = rows, merge.chunks = chunks, merge.tokens = call.tokens;
    vmoba_merge(merge);
    mark_step("merge");

    if (counting_) {
      for (int64_t p = 0; p < pairs; ++p)
        for (int64_t c = 0; c < chunks; ++c) {
          const double length = double(layout.lengths[size_t(c)]);
          stats_.kept_pairs += length * (length + double(counts[size_t(p * chunks + c)]));
        }
      stats_.total_pairs += total_pairs;
    }
  }

 private:
  const Chunking& chunking_for(ChunkKind kind, const SelfAttentionCall& call) {
    const Grid3 grid = {call.grid[0], call.grid[1], call.grid[2]};
    const int64_t pairs = call.batch * call.heads;
    Chunking& chunking = chunkings_[size_t(kind)];
    if (chunking.slots && chunking.grid == grid && chunking.pairs == pairs) return chunking;
    chunking = Chunking{};
    chunking.grid = grid, chunking.pairs = pairs;
    const Grid3 shape = settings_.chunk_shape(kind, grid);
    const BoxTiling tiling = tile_video(grid, shape, 0);
    // Whole key blocks per chunk, so a 64-query half and a key block never span two chunks.
    const int64_t stride = round_up(shape[0] * shape[1] * shape[2], kFlashBlockN);
    chunking.slots = make_layout(tiling, stride);
    const int64_t chunks = tiling.box_count(), halves = chunks * stride / 64;
    std::vector<int32_t> lengths(static_cast<size_t>(chunks)), offsets, indices;
    for (int64_t c = 0; c < chunks; ++c)
      lengths[size_t(c)] = int32_t(tiling.video_blocks.length[size_t(c)]);
    const int64_t blocks = stride / kFlashBlockN;
    offsets.reserve(size_t(pairs * halves + 1));
    for (int64_t p = 0; p < pairs; ++p)
      for (int64_t half = 0; half < halves; ++half) {
        offsets.push_back(int32_t(indices.size()));
        const int64_t c = half * 64 / stride;
        for (int64_t j = 0; j < blocks; ++j) indices.push_back(int32_t(c * blocks + j));
      }
    offsets.push_back(int32_t(indices.size()));
    chunking.chunk_lengths = upload_vector(lengths);
    chunking.own_offsets = upload_vector(offsets);
    chunking.own_indices = upload_vector(indices);
    chunking.order = tiling.order;
    chunking.chunks = tiling.video_blocks;
    chunking.slot_of_position.resize(tiling.order.size());
    for (int64_t c = 0; c < chunks; ++c)
      for (int64_t i = 0; i < lengths[size_t(c)]; ++i)
        chunking.slot_of_position[size_t(tiling.video_blocks.start[size_t(c)] + i)] =
            c * stride + i;
    return chunking;
  }

  // Score rows up to this wide are formed by three in-place products (measured on an H200: 11
  // temporal chunks 0.33 -> 0.15 ms; 130 and 390 chunks were slower that way, 0.40 -> 0.52 and
  // 0.83 -> 1.94 ms).
  static constexpr int64_t kInPlaceScoreColumns = 32;

  void select_on_device(const SelfAttentionCall& call, const Chunking& chunking,
                        const vmoba::SelectOptions& options, const SlotBuffers& buffers,
                        DeviceBuffer& chosen, std::vector<int32_t>& counts) {
    const SlotLayout& layout = *chunking.slots;
    const int64_t chunks = layout.boxes, slots = layout.slots, D = call.head_dim;
    const int64_t pairs = call.batch * call.heads, words = vmoba_mask_words(chunks);
    // Score rows padded to 8 floats (the product's output rows stay 32-byte aligned); the extra
    // means are zero and never read.
    const int64_t padded = round_up(chunks, 8);
    DeviceBuffer parts(size_t(pairs * padded * 3 * D) * 2), device_counts(counts.size() * 4),
        tripled(padded > kInPlaceScoreColumns ? size_t(slots * 3 * D) * 2 : 0);
    MMGEN_CUDA_CHECK(cudaMemset(parts.data(), 0, parts.size()));
    MMGEN_CUDA_CHECK(cudaMemset(device_counts.data(), 0, device_counts.size()));
    vmoba_split_means(buffers.k.data(), parts.as<uint16_t>(), padded, call.batch, chunks,
                      layout.stride, call.heads, D, chunking.chunk_lengths.as<int32_t>());
    mark_step("choose: chunk means");
    // Pairs in groups whose scores take at most 512 MiB; one selection launch per group.
    const int64_t pair_bytes = slots * padded * int64_t(sizeof(float));
    const int64_t group = std::clamp<int64_t>((int64_t(512) << 20) / pair_bytes, 1, pairs);
    DeviceBuffer scores(size_t(group * pair_bytes));
    for (int64_t first = 0; first < pairs; first += group) {
      const int64_t count = std::min(group, pairs - first);
      // Scores q·hi + q·mid + q·lo. Few chunks (temporal): three batched products over the heads
      // of one batch row, q read in place, each added to the last in its epilogue (float32). Many
      // chunks: the three passes over the wide score rows would cost more than copying q three
      // times along its row for one product of k = 3D per head.
      const int64_t width = call.heads * D;
      for (int64_t p = first; p < first + count;) {
        const int64_t b = p / call.heads, h0 = p % call.heads;
        float* out = scores.as<float>() + (p - first) * slots * padded;
        if (padded > kInPlaceScoreColumns) {
          vmoba_tripled_queries(buffers.q.data(), tripled.as<uint16_t>(), b, h0, slots, call.heads,
                                D);
          linear_bf16(tripled.data(), parts.as<uint16_t>() + p * padded * 3 * D, nullptr, out,
                      slots, padded, 3 * D, GemmOutput::F32);
          ++p;
          continue;
        }
        const int64_t heads = std::min(call.heads - h0, first + count - p);
        const MatrixOperand queries{buffers.q.as<uint16_t>() + b * slots * width + h0 * D, width,
                                    D};
        for (int64_t part = 0; part < 3; ++part) {
          const MatrixOperand means{parts.as<uint16_t>() + p * padded * 3 * D + part * D, 3 * D,
                                    padded * 3 * D, true};
          MatmulEpilogue epilogue;
          if (part > 0) epilogue.accumulate = out;
          matmul_bf16(queries, means, out, padded, slots * padded, slots, padded, D, heads,
                      GemmOutput::F32, nullptr, epilogue);
        }
        p += heads;
      }
      mark_step("choose: scores");
      VmobaSelectArgs select;
      select.scores = scores.as<float>(), select.lengths = chunking.chunk_lengths.as<int32_t>();
      select.pairs = count, select.slots = slots, select.chunks = chunks;
      select.stride = layout.stride, select.score_stride = padded;
      select.topk_mode = options.mode == vmoba::SelectMode::TopK;
      select.topk = options.topk, select.threshold = options.threshold;
      select.chosen = chosen.as<uint32_t>() + first * slots * words;
      select.chunk_counts = device_counts.as<int32_t>() + first * chunks;
      vmoba_select(select);
      mark_step("choose: select");
    }
    device_counts.download(counts.data(), counts.size() * sizeof(int32_t));
  }

  // The CPU's select_chunks on the call's q and k (bf16 values in float32), its choices written
  // in the device's form.
  void select_on_host(const SelfAttentionCall& call, const Chunking& chunking,
                      const vmoba::SelectOptions& options, DeviceBuffer& chosen,
                      std::vector<int32_t>& counts) {
    const SlotLayout& layout = *chunking.slots;
    const int64_t chunks = layout.boxes, slots = layout.slots, words = vmoba_mask_words(chunks);
    const int64_t count = call.batch * call.tokens * call.heads * call.head_dim;
    auto host = [&](const void* device) {
      std::vector<uint16_t> bits(static_cast<size_t>(count));
      MMGEN_CUDA_CHECK(cudaMemcpy(bits.data(), device, bits.size() * 2, cudaMemcpyDeviceToHost));
      std::vector<float> values(bits.size());
      std::transform(bits.begin(), bits.end(), values.begin(), bf16_to_f32);
      return gather_tokens(
          Tensor::from_vector({call.batch, call.tokens, call.heads, call.head_dim}, values),
          chunking.order);
    };
    const std::vector<vmoba::ChunkSelection> selections =
        vmoba::select_chunks(host(call.q), host(call.k), chunking.chunks, options);
    std::vector<uint32_t> mask(size_t(call.batch * call.heads * slots * words), 0);
    for (size_t p = 0; p < selections.size(); ++p) {
      const vmoba::ChunkSelection& selection = selections[p];
      for (int64_t c = 0; c < chunks; ++c) {
        const int64_t begin = selection.indptr[size_t(c)], end = selection.indptr[size_t(c) + 1];
        counts[p * size_t(chunks) + size_t(c)] = int32_t(end - begin);
        for (int64_t e = begin; e < end; ++e) {
          const int64_t slot = chunking.slot_of_position[size_t(selection.queries[size_t(e)])];
          mask[(p * size_t(slots) + size_t(slot)) * size_t(words) + size_t(c / 32)] |= 1u
                                                                                       << (c % 32);
        }
      }
    }
    chosen.upload(mask.data(), mask.size() * sizeof(uint32_t));
  }

  VmobaSettings settings_;
  std::mutex mutex_;
  std::array<Chunking, 3> chunkings_;  // one per chunk kind
};

}  // namespace

std::unique_ptr<cuda::SparseSelfAttentionCuda> make_cuda(const nlohmann::json& settings,
                                                         const BackendResources&) {
  return std::make_unique<VmobaCuda>(VmobaSettings::from_json(settings));
}

}  // namespace mmgen::attention::vmoba_attn
