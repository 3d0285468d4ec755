// sliding_tile_attn on the GPU: the tiles' key-block lists come from the host (static per
// window, built once per window set and batch) and drive the block-sparse attention kernel.
#include "attention/backends/sliding_tile_attn/sliding_tile_attn_cuda.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "attention/backends/sliding_tile_attn/sta_pattern.h"
#include "attention/backends/sliding_tile_attn/sta_settings.h"
#include "attention/kernels/sta_tiling.h"
#include "attention/sparse_self_attention_cuda.h"
#include "core/error.h"

namespace mmgen::attention::sliding_tile_attn {

namespace {

using namespace mmgen::cuda;

class SlidingTileCuda final : public cuda::SparseSelfAttentionCuda {
 public:
  explicit SlidingTileCuda(Settings settings) : settings_(std::move(settings)) {}

  std::string_view name() const override { return "sliding_tile_attn"; }

  void run(const SelfAttentionCall& call) override {
    check_call("sliding_tile_attn", call);
    const double dense_pairs = double(call.batch * call.heads) * double(call.tokens * call.tokens);
    auto dense = [&] {
      if (counting_) stats_.kept_pairs += dense_pairs, stats_.total_pairs += dense_pairs;
      run_kernel(dense_args(call));
    };
    if (call.step < settings_.skip_time_steps) return dense();
    std::lock_guard lock(mutex_);
    const Grid3 grid = {call.grid[0], call.grid[1], call.grid[2]};
    if (!tiling_ || tiling_->grid != grid) {
      tiling_ = std::make_shared<const BoxTiling>(tile_video(grid, settings_.tile, 0));
      const int64_t volume = settings_.tile[0] * settings_.tile[1] * settings_.tile[2];
      // Whole query blocks per tile: a query block never mixes two tiles' lists.
      layout_ = make_layout(*tiling_, (volume + kFlashBlockM - 1) / kFlashBlockM * kFlashBlockM);
      lists_.clear();
    }
    std::vector<StaWindow> windows(size_t(call.heads));
    bool all_full = true;
    for (int64_t h = 0; h < call.heads; ++h) {
      const auto window = settings_.window(call.step, call.layer, h);
      // Only a mask file can lack a window (window_size always has one); its error names it.
      if (!window)
        fail(
            "sliding_tile_attn: {} has no window for \"{}_{}_{}\" (step, layer, head); it must "
            "cover every step from skip_time_steps={} on, every layer and every head",
            settings_.mask->path().string(), call.step, call.layer, h, settings_.skip_time_steps);
      windows[size_t(h)] = *window;
      all_full &= sta_window_is_full(*tiling_, *window);
    }
    if (all_full) return dense();

    const Lists& lists = lists_for(windows, call.batch);
    if (counting_) stats_.kept_pairs += lists.kept_pairs, stats_.total_pairs += dense_pairs;
    SlotBuffers buffers(call, *layout_);
    FlashAttentionArgs args = buffers.args(call, *layout_);
    args.block_offsets = lists.offsets.as<int32_t>();
    args.block_indices = lists.indices.as<int32_t>();
    SlotBuffers::write_in_token_order(args, call, *layout_);
    run_kernel(args);
  }

 private:
  struct Lists {
    DeviceBuffer offsets, indices;
    double kept_pairs = 0;
  };

  // The kernel's lists for one window per head (the same for every batch entry), built once.
  const Lists& lists_for(const std::vector<StaWindow>& windows, int64_t batch) {
    auto key = std::make_pair(windows, batch);
    auto it = lists_.find(key);
    if (it != lists_.end()) return it->second;
    const SlotLayout& layout = *layout_;
    const int64_t q_blocks = layout.slots / kFlashBlockM;
    const int64_t q_per_box = layout.stride / kFlashBlockM,
                  k_per_box = layout.stride / kFlashBlockN;
    std::vector<int32_t> offsets{0}, indices;
    double kept = 0;
    std::map<StaWindow, BlockSparsePattern> patterns;
    for (int64_t b = 0; b < batch; ++b)
      for (const auto& window : windows) {
        auto p = patterns.find(window);
        if (p == patterns.end())
          p = patterns.emplace(window, sta_pattern(*tiling_, window, 1)).first;
        const BlockSparsePattern& pattern = p->second;
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

  const Settings settings_;
  std::mutex mutex_;
  std::shared_ptr<const BoxTiling> tiling_;
  std::shared_ptr<const SlotLayout> layout_;
  std::map<std::pair<std::vector<StaWindow>, int64_t>, Lists> lists_;
};

}  // namespace

std::unique_ptr<cuda::SparseSelfAttentionCuda> make_cuda(const nlohmann::json& settings,
                                                         const BackendResources& resources) {
  Settings parsed = Settings::from(settings, resources);
  // The plan refuses STA_searching with --device cuda; a library caller gets the same line.
  check(!parsed.search,
        "sliding_tile_attn: sta_mode=STA_searching runs on the CPU only (its candidates' errors "
        "are measured there); use --device cpu for the search, then STA_inference on the GPU");
  return std::make_unique<SlidingTileCuda>(std::move(parsed));
}

}  // namespace mmgen::attention::sliding_tile_attn
