// sliding_tile_attn: Sliding Tile Attention (Zhang et al., arXiv 2502.04507) on the CPU through
// the shared block-sparse core. The video tokens are regrouped so each 6x8x8 tile is contiguous;
// each query tile attends the box of key tiles its window covers (per step, layer and head, from
// the mask-strategy file) plus every text token, and text tokens attend to everything. The first
// `skip_time_steps` steps use full attention.
//
// Differences from upstream (FastVideo / SGLang), on purpose:
//  - any latent grid works: the tile grid is ceil(grid / tile) and edge tiles may be partial
//    (their valid lengths go to the block-sparse core), where upstream hard-codes three canvases;
//  - an even window covers exactly the tiles it names (see window_span in attention/sta_tiling.h);
//  - a window larger than the canvas is clipped to it, so a file tuned for another resolution
//    still runs (a window covering the whole canvas is full attention).

#include <map>
#include <memory>
#include <mutex>

#include "attention/backend_config.h"
#include "attention/backends/factories.h"
#include "attention/sta_pattern.h"
#include "attention/sta_tiling.h"
#include "core/error.h"

namespace mmgen::attention {

namespace {

using json = nlohmann::json;

// Mask files are loaded once per process however many layers build a backend from them.
std::shared_ptr<const StaMaskStrategy> shared_mask(const std::string& path) {
  static std::mutex mutex;
  static std::map<std::string, std::shared_ptr<const StaMaskStrategy>> loaded;
  std::lock_guard lock(mutex);
  auto& slot = loaded[path];
  if (!slot) slot = std::make_shared<const StaMaskStrategy>(StaMaskStrategy::load(path));
  return slot;
}

Grid3 tile_from_config(const json& config) {
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

class SlidingTileBackend final : public AttentionBackend {
 public:
  explicit SlidingTileBackend(const json& config)
      : tile_(tile_from_config(config)),
        skip_time_steps_(config.value("skip_time_steps", int64_t(15))) {
    const std::string mode = config.value("sta_mode", std::string("STA_inference"));
    check(mode == "STA_inference",
          "sliding_tile_attn: sta_mode={} (mask search and tuning) is not available on the CPU; "
          "use sta_mode=STA_inference with a mask_strategy_file_path",
          mode);
    check(
        config.contains("mask_strategy_file_path") && config["mask_strategy_file_path"].is_string(),
        "sliding_tile_attn: needs mask_strategy_file_path (a JSON file of \"step_layer_head\": "
        "[wt, wh, ww] windows); add mask_strategy_file_path=FILE to --attention-backend-config");
    mask_ = shared_mask(config["mask_strategy_file_path"].get<std::string>());
  }

  std::string_view name() const override { return "sliding_tile_attn"; }

  Tensor forward(const Tensor& q, const Tensor& k, const Tensor& v, float scale,
                 const AttentionContext& context, AttentionStats* stats) override {
    check(q.dim() == 4 && k.dim() == 4 && v.shape() == k.shape(),
          "sliding_tile_attn: expects q, k, v as [batch, seq, heads, head_dim]");
    const int64_t batch = q.size(0), q_len = q.size(1), heads = q.size(2);
    const Grid3 grid = context.grid;
    // Cross-attention and non-video calls have no tiles: plain (full) attention.
    if (context.is_cross || grid[0] <= 0 || grid[1] <= 0 || grid[2] <= 0) {
      if (stats)
        count_full(stats, batch * heads, (q_len + tile_volume() - 1) / tile_volume(),
                   (k.size(1) + tile_volume() - 1) / tile_volume());
      return full_attention(q, k, v, scale);
    }
    const int64_t text_length =
        text_tokens_in_sequence("sliding_tile_attn", q_len, k.size(1), grid, context.text_length);
    const std::shared_ptr<const BoxTiling> tiling = tiling_for(grid, text_length);
    // Blocks per side in the tile blocking, so full and windowed steps count alike.
    const int64_t blocks = tiling->box_count() + (text_length + tile_volume() - 1) / tile_volume();
    if (context.step_index < skip_time_steps_) {
      if (stats) count_full(stats, batch * heads, blocks, blocks);
      return full_attention(q, k, v, scale);
    }

    std::vector<StaWindow> windows(static_cast<size_t>(heads));
    bool all_full = true, shared = true;
    for (int64_t h = 0; h < heads; ++h) {
      const auto window = mask_->window(context.step_index, context.layer_index, h);
      check(window.has_value(),
            "sliding_tile_attn: {} has no window for \"{}_{}_{}\" (step, layer, head); it must "
            "cover every step from skip_time_steps={} on, every layer and every head",
            mask_->path().string(), context.step_index, context.layer_index, h, skip_time_steps_);
      windows[size_t(h)] = *window;
      all_full &= sta_window_is_full(*tiling, *window);
      shared &= *window == windows[0];
    }
    if (all_full) {
      if (stats) count_full(stats, batch * heads, blocks, blocks);
      return full_attention(q, k, v, scale);
    }

    // One pattern per head, or a single one when every head has the same window.
    const std::vector<BlockSparsePattern> patterns =
        patterns_for(tiling, shared ? std::vector<StaWindow>{windows[0]} : windows);
    if (stats)
      for (int64_t h = 0; h < heads; ++h) {
        const BlockSparsePattern& p = patterns[size_t(shared ? 0 : h)];
        stats->visited_blocks += batch * p.visited();
        stats->total_blocks += batch * p.total();
      }
    const std::vector<int64_t>& order = tiling->order;
    const Tensor out = block_sparse_attention(gather_tokens(q, order), gather_tokens(k, order),
                                              gather_tokens(v, order), scale, patterns);
    return scatter_tokens(out, order, q_len);
  }

 private:
  int64_t tile_volume() const { return tile_[0] * tile_[1] * tile_[2]; }

  // The tiling of this grid (the same every step of a run, so it is kept).
  std::shared_ptr<const BoxTiling> tiling_for(const Grid3& grid, int64_t text_length) {
    std::lock_guard lock(mutex_);
    if (!tiling_ || tiling_->grid != grid || tiling_->text_length != text_length) {
      tiling_ = std::make_shared<const BoxTiling>(tile_video(grid, tile_, text_length));
      patterns_.clear();
    }
    return tiling_;
  }

  // The pattern of each window, built once per (tiling, window) and kept.
  std::vector<BlockSparsePattern> patterns_for(const std::shared_ptr<const BoxTiling>& tiling,
                                               const std::vector<StaWindow>& windows) {
    std::lock_guard lock(mutex_);
    const bool cached = tiling == tiling_;
    std::vector<BlockSparsePattern> patterns;
    for (const auto& window : windows) {
      if (!cached) {
        patterns.push_back(sta_pattern(*tiling, window, tile_volume()));
        continue;
      }
      auto it = patterns_.find(window);
      if (it == patterns_.end())
        it = patterns_.emplace(window, sta_pattern(*tiling, window, tile_volume())).first;
      patterns.push_back(it->second);
    }
    return patterns;
  }

  static void count_full(AttentionStats* stats, int64_t pairs, int64_t q_blocks,
                         int64_t kv_blocks) {
    stats->visited_blocks += pairs * q_blocks * kv_blocks;
    stats->total_blocks += pairs * q_blocks * kv_blocks;
  }

  // Every query attends every key, in blocks of one tile volume, in the original token order.
  Tensor full_attention(const Tensor& q, const Tensor& k, const Tensor& v, float scale) const {
    return block_sparse_attention(
        q, k, v, scale,
        {BlockSparsePattern::dense(BlockLayout::uniform(q.size(1), tile_volume()),
                                   BlockLayout::uniform(k.size(1), tile_volume()))});
  }

  Grid3 tile_;
  int64_t skip_time_steps_;
  std::shared_ptr<const StaMaskStrategy> mask_;
  std::mutex mutex_;
  std::shared_ptr<const BoxTiling> tiling_;
  std::map<StaWindow, BlockSparsePattern> patterns_;
};

}  // namespace

BackendFactory sliding_tile_attn_factory() {
  return [](const json& config) -> std::unique_ptr<AttentionBackend> {
    return std::make_unique<SlidingTileBackend>(config);
  };
}

}  // namespace mmgen::attention
