// sliding_tile_attn: Sliding Tile Attention (Zhang et al., arXiv 2502.04507) on the CPU through
// the shared block-sparse core. The video tokens are regrouped so each 6x8x8 tile is contiguous;
// each query tile attends the box of key tiles its window covers plus every text token, and text
// tokens attend to everything. The window comes per step, layer and head from the mask-strategy
// file, or, without one, from window_size for all of them. The first `skip_time_steps` steps use
// full attention. sta_mode=STA_searching runs full attention and measures every candidate window
// to write a mask file (sta_search.h).
//
// Differences from upstream (FastVideo / SGLang), on purpose:
//  - any latent grid works: the tile grid is ceil(grid / tile) and edge tiles may be partial
//    (their valid lengths go to the block-sparse core), where upstream hard-codes three canvases;
//  - without a mask file it still runs (window_size), where upstream refuses;
//  - an even window covers exactly the tiles it names (see window_span in
//  attention/kernels/sta_tiling.h);
//  - a window larger than the canvas is clipped to it, so a file tuned for another resolution
//    still runs (a window covering the whole canvas is full attention).

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <utility>

#include "attention/backends/descriptor.h"
#include "attention/backends/sliding_tile_attn/sta_pattern.h"
#include "attention/backends/sliding_tile_attn/sta_search.h"
#include "attention/backends/sliding_tile_attn/sta_settings.h"
#include "attention/kernels/sta_tiling.h"
#include "core/error.h"
#include "core/limits.h"
#ifdef MMGEN_HAVE_CUDA
#include "attention/backends/sliding_tile_attn/sliding_tile_attn_cuda.h"
#endif

namespace mmgen::attention::sliding_tile_attn {

namespace {

using json = nlohmann::json;
using P = Platform;

class SlidingTileBackend final : public AttentionBackend {
 public:
  explicit SlidingTileBackend(Settings settings) : settings_(std::move(settings)) {}

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
    if (context.step_index < settings_.skip_time_steps || settings_.search) {
      if (stats) count_full(stats, batch * heads, blocks, blocks);
      Tensor out = full_attention(q, k, v, scale);
      if (settings_.search && context.step_index >= settings_.skip_time_steps)
        measure_candidates(q, k, v, out, scale, context, *tiling);
      return out;
    }
    log_windows(*tiling);

    std::vector<StaWindow> windows(static_cast<size_t>(heads));
    bool all_full = true, shared = true;
    for (int64_t h = 0; h < heads; ++h) {
      const auto window = settings_.window(context.step_index, context.layer_index, h);
      // Only a mask file can lack a window (window_size always has one); its error names it.
      if (!window)
        fail(
            "sliding_tile_attn: {} has no window for \"{}_{}_{}\" (step, layer, head); it must "
            "cover every step from skip_time_steps={} on, every layer and every head",
            settings_.mask->path().string(), context.step_index, context.layer_index, h,
            settings_.skip_time_steps);
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
  int64_t tile_volume() const { return settings_.tile[0] * settings_.tile[1] * settings_.tile[2]; }

  // STA_searching: each candidate window's output beside full attention's, per head, for the
  // search (sta_search.h). Runs in the tiled order; `full` is in the original order.
  void measure_candidates(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& full,
                          float scale, const AttentionContext& context, const BoxTiling& tiling) {
    const std::vector<StaWindow> candidates = search_candidates(tiling.boxes);
    const std::vector<int64_t>& order = tiling.order;
    const Tensor tq = gather_tokens(q, order), tk = gather_tokens(k, order),
                 tv = gather_tokens(v, order);
    const Tensor reference = gather_tokens(full, order).contiguous();
    const int64_t batch = q.size(0), tokens = q.size(1), heads = q.size(2), dim = q.size(3);
    const size_t count = candidates.size();
    std::vector<double> squared(size_t(heads) * count, 0.0), norms(size_t(heads), 0.0);
    const float* r = reference.data<float>();
    for (int64_t i = 0; i < batch * tokens; ++i)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t d = 0; d < dim; ++d) {
          const double x = r[(i * heads + h) * dim + d];
          norms[size_t(h)] += x * x;
        }
    for (size_t c = 0; c < count; ++c) {
      if (sta_window_is_full(tiling, candidates[c])) continue;  // it is full attention: no error
      const Tensor out = block_sparse_attention(tq, tk, tv, scale,
                                                {sta_pattern(tiling, candidates[c], tile_volume())})
                             .contiguous();
      const float* o = out.data<float>();
      for (int64_t i = 0; i < batch * tokens; ++i)
        for (int64_t h = 0; h < heads; ++h) {
          double sum = 0;
          for (int64_t d = 0; d < dim; ++d) {
            const size_t at = size_t((i * heads + h) * dim + d);
            const double diff = double(o[at]) - double(r[at]);
            sum += diff * diff;
          }
          squared[size_t(h) * count + c] += sum;
        }
    }
    settings_.search->record(tiling.boxes, context.step_index, context.num_steps,
                             context.layer_index, context.num_layers, squared, norms);
  }

  // Once per process and (grid, tile, window_size): the windows window_size runs as on this grid.
  void log_windows(const BoxTiling& tiling) const {
    if (settings_.mask) return;  // the plan's note names the file
    static std::mutex mutex;
    static std::set<std::array<int64_t, 9>> logged;
    const StaWindow& w = settings_.window_size;
    const std::array<int64_t, 9> key = {tiling.grid[0], tiling.grid[1], tiling.grid[2],
                                        tiling.box[0],  tiling.box[1],  tiling.box[2],
                                        w[0],           w[1],           w[2]};
    std::lock_guard lock(mutex);
    if (!logged.insert(key).second) return;
    StaWindow runs{};
    for (size_t a = 0; a < 3; ++a) runs[a] = int32_t(std::min<int64_t>(w[a], tiling.boxes[a]));
    spdlog::info(
        "attention: sliding_tile_attn: the {}x{}x{} latent grid is {}x{}x{} tiles of {}x{}x{}; "
        "window_size [{}, {}, {}] runs as [{}, {}, {}]{}",
        tiling.grid[0], tiling.grid[1], tiling.grid[2], tiling.boxes[0], tiling.boxes[1],
        tiling.boxes[2], tiling.box[0], tiling.box[1], tiling.box[2], w[0], w[1], w[2], runs[0],
        runs[1], runs[2], sta_window_is_full(tiling, w) ? " (the whole grid: full attention)" : "");
  }

  // The tiling of this grid (the same every step of a run, so it is kept).
  std::shared_ptr<const BoxTiling> tiling_for(const Grid3& grid, int64_t text_length) {
    std::lock_guard lock(mutex_);
    if (!tiling_ || tiling_->grid != grid || tiling_->text_length != text_length) {
      tiling_ = std::make_shared<const BoxTiling>(tile_video(grid, settings_.tile, text_length));
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

  const Settings settings_;
  std::mutex mutex_;
  std::shared_ptr<const BoxTiling> tiling_;
  std::map<StaWindow, BlockSparsePattern> patterns_;
};

}  // namespace

const BackendDescriptor& descriptor() {
  static const BackendDescriptor d = {
      .info =
          {.name = "sliding_tile_attn",
           .family = Family::Dit,
           .summary = "Sliding Tile Attention: each query tile of 6x8x8 tokens attends a window of "
                      "key tiles chosen per step, layer and head",
           .aliases = {"sta"},
           .platforms = {P::Cuda, P::Cpu},
           .build_needs = "CUDA: the STA kernel; CPU: mmgen's block-sparse kernel",
           .gpu_arch = "sm90",
           .dtypes = {"bf16", "fp32 (CPU)"},
           .head_sizes = "GPU: 128; CPU: any",
           .sparse = true,
           .per_step_state = "step index, layer index, latent grid; windows from the "
                             "mask-strategy file or window_size",
           .config =
               {
                   {.name = "mask_strategy_file_path",
                    .type = ConfigType::Path,
                    .default_value = nullptr,
                    .help = "JSON file of \"step_layer_head\": [wt, wh, ww] windows in "
                            "tiles (STA_inference); without one every step, layer and head "
                            "runs window_size"},
                   {.name = "window_size",
                    .type = ConfigType::IntList,
                    .default_value = {3, 3, 3},
                    .help = "the window [wt, wh, ww] in tiles when there is no mask file; "
                            "each axis is clamped to the grid's tile count, so any grid "
                            "runs (a window beyond the grid is full attention). [3, 3, 3] "
                            "is one of upstream's Wan candidates and covers 15% of Wan "
                            "720p's 3x6x10 tiles",
                    .min = 1,
                    .max = 4096,
                    .list_length = 3},
                   {.name = "sta_mode",
                    .type = ConfigType::Choice,
                    .default_value = "STA_inference",
                    .help = "STA_inference runs windows; STA_searching runs full attention "
                            "and writes mask_search_output by measuring every window (CPU); "
                            "the tuning modes are not available",
                    .choices = {"STA_inference", "STA_searching", "STA_tuning", "STA_tuning_cfg"},
                    .aliases = {"STA_mode"}},
                   {.name = "skip_time_steps",
                    .type = ConfigType::Int,
                    .default_value = 15,
                    .help = "leading denoising steps that use full attention",
                    .min = 0,
                    .max = Limits::kMaxInferenceSteps},
                   {.name = "mask_search_output",
                    .type = ConfigType::String,
                    .default_value = nullptr,
                    .help = "the mask-strategy file STA_searching writes: per step >= "
                            "skip_time_steps, layer and head the smallest window whose "
                            "relative L2 error vs full attention is under "
                            "mask_search_threshold (full windows before)",
                    .required_when = "sta_mode=STA_searching"},
                   {.name = "mask_search_threshold",
                    .type = ConfigType::Float,
                    .default_value = 0.05,
                    .help = "STA_searching: the largest relative L2 error "
                            "||o_window - o_full|| / ||o_full|| a chosen window may have (0: "
                            "full windows only)",
                    .min = 0},
                   {.name = "tile_size",
                    .type = ConfigType::IntList,
                    .default_value = {6, 8, 8},
                    .help = "tile size in latent tokens [t, h, w]",
                    .min = 1,
                    .max = 4096,
                    .list_length = 3},
               },
           .config_guide =
               "**Windows without a mask file.** With no `mask_strategy_file_path`, every "
               "step from `skip_time_steps` on, every layer and every head runs `window_size` "
               "([3, 3, 3] tiles by default). Each axis is clamped to the latent grid's tile "
               "count, ceil(grid / `tile_size`), so it runs on any grid (upstream STA refuses "
               "all but three canvases), and a window at least as large as the grid is full "
               "attention. The dry run and the run log which windows run and where they come "
               "from (`window_size`, or the file and its entry count); the run also logs what "
               "the window becomes on its grid (`window_size [3, 3, 3] runs as [2, 3, 3]`).\n\n"
               "**Searching a mask file.** `sta_mode=STA_searching` with "
               "`mask_search_output=FILE` runs the request with full attention (its output is "
               "the dense run's, bit for bit) and, at each step from `skip_time_steps` on, in "
               "every layer, also runs every candidate window: per axis the odd sizes below "
               "the tile count and the full count. For each (step, layer, head) it measures the "
               "relative L2 error ||o_window - o_full|| / ||o_full|| over the batch, tokens and "
               "channels, pooled over both guidance branches (and over the prompts of a "
               "`--prompt-file-path` batch). FILE gets the smallest window (fewest key tiles; "
               "ties: the smaller error) whose error is under `mask_search_threshold`, or the "
               "full window when none is, and the full window at the skipped steps; it is "
               "written when the last step's last layer has run. SGLang instead tries a fixed "
               "list of windows made for one Wan canvas and keeps the smallest loss however "
               "large; here the threshold bounds the error and the candidates fit the grid. "
               "The search runs on the CPU (`--device cpu`); `STA_tuning` and `STA_tuning_cfg` "
               "are refused. The file fits the search's grid, `tile_size` and steps: run it "
               "with the same `tile_size` and `--num-inference-steps` (on another grid its "
               "windows are clamped, and fewer steps leave entries unused).\n\n"
               "Worked example on the wan-tiny example (2 layers x 2 heads; at 128x128 and 9 "
               "frames its latent grid is 3x8x8, 3x4x4 tiles of 1x2x2 tokens):\n\n"
               "```sh\n"
               "W='--model-path examples/models/wan-tiny --prompt kite --height 128 --width "
               "128 --num-frames 9 --num-inference-steps 3 --max-sequence-length 16 "
               "--attention-backend sliding_tile_attn'\n"
               "# default windows: [3, 3, 3] tiles at steps 1 and 2\n"
               "mmgen generate $W --attention-backend-config "
               "'tile_size=[1,2,2],skip_time_steps=1'\n"
               "# search: a full-attention run that writes wan-tiny-mask.json\n"
               "mmgen generate $W --attention-backend-config "
               "'tile_size=[1,2,2],skip_time_steps=1,sta_mode=STA_searching,"
               "mask_search_output=wan-tiny-mask.json,mask_search_threshold=0.5'\n"
               "# run the windows it found\n"
               "mmgen generate $W --attention-backend-config "
               "'tile_size=[1,2,2],skip_time_steps=1,mask_strategy_file_path=wan-tiny-mask."
               "json'\n"
               "```\n\n"
               "On wan-tiny the search keeps the full window everywhere up to a threshold of "
               "0.2 (its attention is spread out); at 0.3 the searched steps visit 93.8% of "
               "the key tiles, at 0.5 70.3% ([3, 4, 3] and [3, 3, 3] windows), and with a huge "
               "threshold 2.1% ([1, 1, 1] everywhere)."},
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
        if (settings.at("sta_mode") == "STA_searching")
          return {steps, "STA_searching's full attention", true};
        const int64_t skip = settings.at("skip_time_steps").get<int64_t>();
        return {std::clamp<int64_t>(skip, 0, steps), fmt::format("skip_time_steps {}", skip)};
      },
  };
  return d;
}

}  // namespace mmgen::attention::sliding_tile_attn
