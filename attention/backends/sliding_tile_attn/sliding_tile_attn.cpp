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

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>

#include "attention/backends/descriptor.h"
#include "attention/backends/sliding_tile_attn/sta_pattern.h"
#include "attention/backends/sliding_tile_attn/sta_settings.h"
#include "attention/sta_tiling.h"
#include "core/error.h"
#ifdef MMGEN_HAVE_CUDA
#include "attention/backends/sliding_tile_attn/sliding_tile_attn_cuda.h"
#endif

namespace mmgen::attention::sliding_tile_attn {

namespace {

using json = nlohmann::json;
using P = Platform;

class SlidingTileBackend final : public AttentionBackend {
 public:
  explicit SlidingTileBackend(const Settings& settings)
      : tile_(settings.tile), skip_time_steps_(settings.skip_time_steps), mask_(settings.mask) {}

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

const BackendDescriptor& descriptor() {
  static const BackendDescriptor d = {
      .info = {.name = "sliding_tile_attn",
               .family = Family::Dit,
               .summary =
                   "Sliding Tile Attention: each query tile of 6x8x8 tokens attends a window of "
                   "key tiles chosen per step, layer and head",
               .aliases = {},
               .platforms = {P::Cuda, P::Cpu},
               .build_needs = "CUDA: the STA kernel; CPU: mmgen's block-sparse kernel",
               .gpu_arch = "sm90",
               .dtypes = {"bf16", "fp32 (CPU)"},
               .head_sizes = "GPU: 128; CPU: any",
               .sparse = true,
               .per_step_state = "step index, layer index, latent grid; windows from the "
                                 "mask-strategy file",
               .config =
                   {
                       {.name = "mask_strategy_file_path",
                        .type = ConfigType::Path,
                        .default_value = nullptr,
                        .help = "JSON file of \"step_layer_head\": [wt, wh, ww] windows in tiles",
                        .required_when = "sta_mode=STA_inference"},
                       {.name = "sta_mode",
                        .type = ConfigType::Choice,
                        .default_value = "STA_inference",
                        .help = "run with a mask file, or search / tune one",
                        .choices = {"STA_inference", "STA_searching", "STA_tuning",
                                    "STA_tuning_cfg"},
                        .aliases = {"STA_mode"}},
                       {.name = "skip_time_steps",
                        .type = ConfigType::Int,
                        .default_value = 15,
                        .help = "leading denoising steps that use full attention",
                        .min = 0},
                       {.name = "tile_size",
                        .type = ConfigType::IntList,
                        .default_value = {6, 8, 8},
                        .help = "tile size in latent tokens [t, h, w]",
                        .min = 1,
                        .list_length = 3},
                   }},
      .kernels = {cpu_kernel("sliding_tile_attn")
#ifdef MMGEN_HAVE_CUDA
                      ,
                  hopper_kernel("sliding_tile_attn")
#endif
      },
      .cpu = [](const json& settings,
                const BackendResources& resources) -> std::unique_ptr<AttentionBackend> {
        return std::make_unique<SlidingTileBackend>(Settings::from(settings, resources));
      },
#ifdef MMGEN_HAVE_CUDA
      .cuda = make_cuda,
#endif
      .extra_weights = {},
      .load_resources = load_resources,
      .dense_steps = [](const json& settings, int64_t steps) -> DenseSteps {
        const int64_t skip = settings.at("skip_time_steps").get<int64_t>();
        return {std::clamp<int64_t>(skip, 0, steps), fmt::format("skip_time_steps {}", skip)};
      },
  };
  return d;
}

}  // namespace mmgen::attention::sliding_tile_attn
