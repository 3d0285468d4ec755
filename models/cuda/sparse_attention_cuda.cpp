#include "models/cuda/sparse_attention_cuda.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <vector>

#include "attention/backend_config.h"
#include "attention/cuda/box_layout.h"
#include "attention/cuda/flash_attention.h"
#include "attention/cuda/vsa_select.h"
#include "attention/sta_pattern.h"
#include "attention/sta_tiling.h"
#include "attention/vsa_coarse.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/device_memory.h"
#include "core/error.h"

namespace mmgen::cuda {
namespace {

using attention::BoxTiling;
using attention::Grid3;
using json = nlohmann::json;

template <typename T>
DeviceBuffer upload_vector(const std::vector<T>& values) {
  DeviceBuffer buffer(std::max<size_t>(values.size(), 1) * sizeof(T));
  if (!values.empty()) buffer.upload(values.data(), values.size() * sizeof(T));
  return buffer;
}

// Attention args over bf16 [batch, seq, heads·head_dim] buffers.
FlashAttentionArgs packed_args(const void* q, const void* k, const void* v, void* out,
                               int64_t batch, int64_t seq, int64_t heads, int64_t head_dim,
                               float scale) {
  FlashAttentionArgs args;
  args.q = q, args.k = k, args.v = v, args.out = out;
  args.batch = batch, args.heads = heads, args.seq_q = seq, args.seq_k = seq;
  args.head_dim = head_dim, args.scale = scale;
  const int64_t width = heads * head_dim;
  args.q_strides = args.k_strides = args.v_strides =
      args.out_strides = {seq * width, width, head_dim};
  return args;
}

void check_call(const char* backend, const SelfAttentionCall& call) {
  check(call.grid[0] > 0 && call.grid[1] > 0 && call.grid[2] > 0 &&
            call.tokens == call.grid[0] * call.grid[1] * call.grid[2],
        "{} on the GPU: the sequence must be the video tokens of the latent grid ({} tokens for "
        "{}x{}x{}), got {}",
        backend, call.grid[0] * call.grid[1] * call.grid[2], call.grid[0], call.grid[1],
        call.grid[2], call.tokens);
  check(flash_attention_supports_head_dim(call.head_dim),
        "{} on the GPU: head size {} is not compiled in (64 and 128 are); use --device cpu",
        backend, call.head_dim);
}

// The video tokens of a tiling in padded box order: box b is slots [b·stride, (b + 1)·stride),
// its valid tokens first (the CPU tiling's order inside the box), padding after.
struct SlotLayout {
  Grid3 grid{};
  int64_t boxes = 0, stride = 0, slots = 0;
  std::vector<int64_t> lengths;  // valid tokens per box
  DeviceBuffer token_of_slot, slot_of_token;
  DeviceBuffer key_lengths;  // valid tokens per key block of kFlashBlockN slots
};

std::shared_ptr<const SlotLayout> make_layout(const BoxTiling& tiling, int64_t stride) {
  auto layout = std::make_shared<SlotLayout>();
  layout->grid = tiling.grid;
  layout->boxes = tiling.box_count();
  layout->stride = stride;
  layout->slots = layout->boxes * stride;
  check(layout->slots < (int64_t(1) << 31), "GPU sparse attention: {} padded tokens is too many",
        layout->slots);
  std::vector<int32_t> token_of_slot(size_t(layout->slots), -1),
      slot_of_token(size_t(tiling.video_tokens)), key_lengths(size_t(layout->slots / kFlashBlockN));
  for (int64_t b = 0; b < layout->boxes; ++b) {
    const int64_t start = tiling.video_blocks.start[size_t(b)];
    const int64_t length = tiling.video_blocks.length[size_t(b)];
    layout->lengths.push_back(length);
    for (int64_t p = 0; p < length; ++p) {
      const int64_t token = tiling.order[size_t(start + p)], slot = b * stride + p;
      token_of_slot[size_t(slot)] = int32_t(token);
      slot_of_token[size_t(token)] = int32_t(slot);
    }
    for (int64_t j = 0; j < stride / kFlashBlockN; ++j)
      key_lengths[size_t(b * stride / kFlashBlockN + j)] =
          int32_t(std::clamp<int64_t>(length - j * kFlashBlockN, 0, kFlashBlockN));
  }
  layout->token_of_slot = upload_vector(token_of_slot);
  layout->slot_of_token = upload_vector(slot_of_token);
  layout->key_lengths = upload_vector(key_lengths);
  return layout;
}

// q, k and v regrouped into a layout's slots, attention through `args` (lists set by the caller),
// and the result put back in token order.
struct SlotBuffers {
  DeviceBuffer q, k, v, out;
  SlotBuffers(const SelfAttentionCall& call, const SlotLayout& layout) {
    const int64_t width = call.heads * call.head_dim;
    const size_t bytes = size_t(call.batch * layout.slots * width) * 2;
    q = DeviceBuffer(bytes), k = DeviceBuffer(bytes), v = DeviceBuffer(bytes),
    out = DeviceBuffer(bytes);
    gather_to_slots(call.q, q.data(), call.batch, call.tokens, layout.slots, width,
                    layout.token_of_slot.as<int32_t>());
    gather_to_slots(call.k, k.data(), call.batch, call.tokens, layout.slots, width,
                    layout.token_of_slot.as<int32_t>());
    gather_to_slots(call.v, v.data(), call.batch, call.tokens, layout.slots, width,
                    layout.token_of_slot.as<int32_t>());
  }
  FlashAttentionArgs args(const SelfAttentionCall& call, const SlotLayout& layout) {
    FlashAttentionArgs a = packed_args(q.data(), k.data(), v.data(), out.data(), call.batch,
                                       layout.slots, call.heads, call.head_dim, call.scale);
    a.key_block_lengths = layout.key_lengths.as<int32_t>();
    return a;
  }
};

FlashAttentionArgs dense_args(const SelfAttentionCall& call) {
  return (packed_args(call.q, call.k, call.v, call.out, call.batch, call.tokens, call.heads,
                      call.head_dim, call.scale));
}

// --- sliding_tile_attn --------------------------------------------------------------------------

Grid3 sta_tile(const json& config) {
  Grid3 tile = {6, 8, 8};
  if (config.contains("tile_size") && config["tile_size"].is_array()) {
    check(config["tile_size"].size() == 3, "sliding_tile_attn: tile_size must be [t, h, w], got {}",
          config["tile_size"].dump());
    for (size_t a = 0; a < 3; ++a) {
      tile[a] = config["tile_size"][a].get<int64_t>();
      check(tile[a] >= 1, "sliding_tile_attn: tile_size entries must be >= 1, got {}",
            config["tile_size"].dump());
    }
  }
  return tile;
}

class SlidingTileCuda final : public SparseSelfAttentionCuda {
 public:
  explicit SlidingTileCuda(const json& config)
      : tile_(sta_tile(config)), skip_time_steps_(config.value("skip_time_steps", int64_t(15))) {
    const std::string mode = config.value("sta_mode", std::string("STA_inference"));
    check(mode == "STA_inference",
          "sliding_tile_attn: sta_mode={} (mask search and tuning) is not available; use "
          "sta_mode=STA_inference with a mask_strategy_file_path",
          mode);
    check(
        config.contains("mask_strategy_file_path") && config["mask_strategy_file_path"].is_string(),
        "sliding_tile_attn: needs mask_strategy_file_path (a JSON file of \"step_layer_head\": "
        "[wt, wh, ww] windows); add mask_strategy_file_path=FILE to --attention-backend-config");
    mask_ = std::make_shared<const attention::StaMaskStrategy>(
        attention::StaMaskStrategy::load(config["mask_strategy_file_path"].get<std::string>()));
  }

  std::string_view name() const override { return "sliding_tile_attn"; }

  void forward(const SelfAttentionCall& call) override {
    check_call("sliding_tile_attn", call);
    const double dense_pairs = double(call.batch * call.heads) * double(call.tokens * call.tokens);
    auto dense = [&] {
      if (counting_) stats_.kept_pairs += dense_pairs, stats_.total_pairs += dense_pairs;
      run_kernel(dense_args(call));
    };
    if (call.step < skip_time_steps_) return dense();
    std::lock_guard lock(mutex_);
    const Grid3 grid = {call.grid[0], call.grid[1], call.grid[2]};
    if (!tiling_ || tiling_->grid != grid) {
      tiling_ = std::make_shared<const BoxTiling>(attention::tile_video(grid, tile_, 0));
      const int64_t volume = tile_[0] * tile_[1] * tile_[2];
      // Whole query blocks per tile: a query block never mixes two tiles' lists.
      layout_ = make_layout(*tiling_, (volume + kFlashBlockM - 1) / kFlashBlockM * kFlashBlockM);
      lists_.clear();
    }
    std::vector<attention::StaWindow> windows(size_t(call.heads));
    bool all_full = true;
    for (int64_t h = 0; h < call.heads; ++h) {
      const auto window = mask_->window(call.step, call.layer, h);
      check(window.has_value(),
            "sliding_tile_attn: {} has no window for \"{}_{}_{}\" (step, layer, head); it must "
            "cover every step from skip_time_steps={} on, every layer and every head",
            mask_->path().string(), call.step, call.layer, h, skip_time_steps_);
      windows[size_t(h)] = *window;
      all_full &= attention::sta_window_is_full(*tiling_, *window);
    }
    if (all_full) return dense();

    const Lists& lists = lists_for(windows, call.batch);
    if (counting_) stats_.kept_pairs += lists.kept_pairs, stats_.total_pairs += dense_pairs;
    SlotBuffers buffers(call, *layout_);
    FlashAttentionArgs args = buffers.args(call, *layout_);
    args.block_offsets = lists.offsets.as<int32_t>();
    args.block_indices = lists.indices.as<int32_t>();
    run_kernel(args);
    scatter_from_slots(buffers.out.data(), call.out, call.batch, call.tokens, layout_->slots,
                       call.heads * call.head_dim, layout_->slot_of_token.as<int32_t>());
  }

 private:
  struct Lists {
    DeviceBuffer offsets, indices;
    double kept_pairs = 0;
  };

  // The kernel's lists for one window per head (the same for every batch entry), built once.
  const Lists& lists_for(const std::vector<attention::StaWindow>& windows, int64_t batch) {
    auto key = std::make_pair(windows, batch);
    auto it = lists_.find(key);
    if (it != lists_.end()) return it->second;
    const SlotLayout& layout = *layout_;
    const int64_t q_blocks = layout.slots / kFlashBlockM;
    const int64_t q_per_box = layout.stride / kFlashBlockM,
                  k_per_box = layout.stride / kFlashBlockN;
    std::vector<int32_t> offsets{0}, indices;
    double kept = 0;
    std::map<attention::StaWindow, attention::BlockSparsePattern> patterns;
    for (int64_t b = 0; b < batch; ++b)
      for (const auto& window : windows) {
        auto p = patterns.find(window);
        if (p == patterns.end())
          p = patterns.emplace(window, attention::sta_pattern(*tiling_, window, 1)).first;
        const attention::BlockSparsePattern& pattern = p->second;
        for (int64_t qb = 0; qb < q_blocks; ++qb) {
          const int64_t box = qb / q_per_box, row = (qb % q_per_box) * kFlashBlockM;
          const int64_t rows =
              std::clamp<int64_t>(layout.lengths[size_t(box)] - row, 0, kFlashBlockM);
          if (rows > 0)
            for (int64_t e = pattern.indptr[size_t(box)]; e < pattern.indptr[size_t(box) + 1];
                 ++e) {
              const int64_t key_box = pattern.indices[size_t(e)];
              const int64_t length = layout.lengths[size_t(key_box)];
              for (int64_t j = 0; j * kFlashBlockN < length; ++j)
                indices.push_back(int32_t(key_box * k_per_box + j));
              kept += double(rows) * double(length);
            }
          offsets.push_back(int32_t(indices.size()));
        }
      }
    Lists lists;
    lists.offsets = upload_vector(offsets);
    lists.indices = upload_vector(indices);
    lists.kept_pairs = kept;
    return lists_.emplace(std::move(key), std::move(lists)).first->second;
  }

  Grid3 tile_;
  int64_t skip_time_steps_;
  std::shared_ptr<const attention::StaMaskStrategy> mask_;
  std::mutex mutex_;
  std::shared_ptr<const BoxTiling> tiling_;
  std::shared_ptr<const SlotLayout> layout_;
  std::map<std::pair<std::vector<attention::StaWindow>, int64_t>, Lists> lists_;
};

// --- video_sparse_attn --------------------------------------------------------------------------

class VideoSparseCuda final : public SparseSelfAttentionCuda {
 public:
  explicit VideoSparseCuda(const json& config) : sparsity_(config.value("sparsity", 0.0)) {
    check(sparsity_ >= 0.0 && sparsity_ < 1.0,
          "video_sparse_attn: sparsity must be in [0, 1), got {}", sparsity_);
  }

  std::string_view name() const override { return "video_sparse_attn"; }
  bool wants_gate() const override { return true; }

  void forward(const SelfAttentionCall& call) override {
    check_call("video_sparse_attn", call);
    std::lock_guard lock(mutex_);
    const Grid3 grid = {call.grid[0], call.grid[1], call.grid[2]};
    if (!layout_ || layout_->grid != grid)
      layout_ = make_layout(attention::tile_video(grid, {4, 4, 4}, 0), kVsaCube);
    const SlotLayout& layout = *layout_;
    const int64_t cubes = layout.boxes, pairs = call.batch * call.heads;
    check(cubes <= vsa_max_cubes(),
          "video_sparse_attn on the GPU: {} cubes exceed the {} its selection kernel holds", cubes,
          vsa_max_cubes());
    const int64_t topk = attention::vsa_topk(sparsity_, cubes);

    SlotBuffers buffers(call, layout);
    const size_t means_bytes = size_t(pairs * cubes * call.head_dim) * sizeof(float);
    DeviceBuffer qc(means_bytes), kc(means_bytes), vc, coarse;
    const int32_t* lengths = layout.key_lengths.as<int32_t>();  // one key block per cube
    vsa_cube_means(buffers.q.data(), qc.as<float>(), call.batch, cubes, call.heads, call.head_dim,
                   lengths);
    vsa_cube_means(buffers.k.data(), kc.as<float>(), call.batch, cubes, call.heads, call.head_dim,
                   lengths);
    if (call.gate) {
      vc = DeviceBuffer(means_bytes), coarse = DeviceBuffer(means_bytes);
      vsa_cube_means(buffers.v.data(), vc.as<float>(), call.batch, cubes, call.heads, call.head_dim,
                     lengths);
    }
    DeviceBuffer selected(size_t(pairs * cubes * topk) * sizeof(int32_t));
    vsa_select(qc.as<float>(), kc.as<float>(), call.gate ? vc.as<float>() : nullptr, call.scale,
               call.batch, call.heads, cubes, call.head_dim, topk, selected.as<int32_t>(),
               call.gate ? coarse.as<float>() : nullptr);
    // Every cube keeps topk key cubes: the lists per 64 query rows are `selected` itself.
    if (offsets_.size() != size_t(pairs * cubes + 1) * sizeof(int32_t) || offsets_topk_ != topk) {
      std::vector<int32_t> offsets(size_t(pairs * cubes + 1));
      for (size_t i = 0; i < offsets.size(); ++i) offsets[i] = int32_t(int64_t(i) * topk);
      offsets_ = upload_vector(offsets);
      offsets_topk_ = topk;
    }
    FlashAttentionArgs args = buffers.args(call, layout);
    args.block_offsets = offsets_.as<int32_t>();
    args.block_indices = selected.as<int32_t>();
    args.lists_per_half = true;
    run_kernel(args);
    if (call.gate)
      scatter_from_slots_gated(buffers.out.data(), call.out, call.batch, call.tokens, layout.slots,
                               call.heads, call.head_dim, layout.slot_of_token.as<int32_t>(),
                               coarse.as<float>(), call.gate);
    else
      scatter_from_slots(buffers.out.data(), call.out, call.batch, call.tokens, layout.slots,
                         call.heads * call.head_dim, layout.slot_of_token.as<int32_t>());
    if (counting_) count(selected, pairs, cubes, topk, call);
  }

 private:
  void count(const DeviceBuffer& selected, int64_t pairs, int64_t cubes, int64_t topk,
             const SelfAttentionCall& call) {
    std::vector<int32_t> host(size_t(pairs * cubes * topk));
    MMGEN_CUDA_CHECK(cudaDeviceSynchronize());
    selected.download(host.data(), host.size() * sizeof(int32_t));
    const std::vector<int64_t>& lengths = layout_->lengths;
    for (int64_t row = 0; row < pairs * cubes; ++row) {
      double keys = 0;
      for (int64_t e = 0; e < topk; ++e)
        keys += double(lengths[size_t(host[size_t(row * topk + e)])]);
      stats_.kept_pairs += double(lengths[size_t(row % cubes)]) * keys;
    }
    stats_.total_pairs += double(pairs) * double(call.tokens) * double(call.tokens);
  }

  double sparsity_;
  std::mutex mutex_;
  std::shared_ptr<const SlotLayout> layout_;
  DeviceBuffer offsets_;  // i·topk: the kernel's list offsets for the last shape
  int64_t offsets_topk_ = 0;
};

}  // namespace

void SparseSelfAttentionCuda::run_kernel(const FlashAttentionArgs& args) {
  if (!timing_) return flash_attention_forward(args);
  cudaEvent_t start, stop;
  MMGEN_CUDA_CHECK(cudaEventCreate(&start));
  MMGEN_CUDA_CHECK(cudaEventCreate(&stop));
  MMGEN_CUDA_CHECK(cudaEventRecord(start));
  flash_attention_forward(args);
  MMGEN_CUDA_CHECK(cudaEventRecord(stop));
  MMGEN_CUDA_CHECK(cudaEventSynchronize(stop));
  float milliseconds = 0;
  MMGEN_CUDA_CHECK(cudaEventElapsedTime(&milliseconds, start, stop));
  kernel_seconds_ += milliseconds / 1000.0;
  MMGEN_CUDA_CHECK(cudaEventDestroy(start));
  MMGEN_CUDA_CHECK(cudaEventDestroy(stop));
}

bool has_cuda_self_attention(std::string_view backend) {
  return backend == "sliding_tile_attn" || backend == "video_sparse_attn";
}

std::unique_ptr<SparseSelfAttentionCuda> make_sparse_self_attention_cuda(std::string_view backend,
                                                                         const json& config) {
  if (backend == "sliding_tile_attn") return std::make_unique<SlidingTileCuda>(config);
  if (backend == "video_sparse_attn") return std::make_unique<VideoSparseCuda>(config);
  fail("--device cuda: the {} attention backend has no GPU version yet; use --device cpu", backend);
}

}  // namespace mmgen::cuda
