// sliding_tile_attn without a mask file and its mask search (issue 51), through the real
// `mmgen generate` on examples/models/wan-tiny (2 layers, 2 heads, patch 1x2x2) and in process:
// window_size runs on any grid and equals a mask file holding the same window everywhere, a window
// beyond the grid is dense attention, STA_searching writes a file STA_inference accepts, picks by
// its rule (checked against errors measured here), and outputs dense attention's result, and the
// dry run refuses exactly what the run refuses, in one line.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "attention/backend.h"
#include "attention/backend_config.h"
#include "core/file.h"
#include "core/json.h"
#include "core/npy.h"
#include "core/random.h"
#include "tests/test_support.h"

namespace mmgen {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using testing::run_command;
using Window = std::array<int, 3>;

// Two latent grids with STA tiles of 1x2x2 tokens (the 6x8x8 default would make one tile):
// 128x128, 9 frames -> a 3x8x8 grid of 3x4x4 tiles; 160x96, 5 frames -> 2x6x10, 2x3x5 tiles.
const std::string kTiny = "--height 128 --width 128 --num-frames 9";
const std::string kOther = "--height 96 --width 160 --num-frames 5";
constexpr int kSteps = 3, kSkip = 1, kLayers = 2, kHeads = 2;

std::string generate_flags(const std::string& size, const std::string& config) {
  return testing::mmgen_binary().string() + " generate --model-path " +
         (testing::source_dir() / "examples/models/wan-tiny").string() + " --prompt kite " + size +
         " --num-inference-steps " + std::to_string(kSteps) +
         " --max-sequence-length 16 --seed 3 --attention-backend sliding_tile_attn "
         "--attention-backend-config '" +
         config + "'";
}

// One run to `dir`/`name`.npy; the command's result.
testing::CommandResult run(const fs::path& dir, const std::string& name, const std::string& size,
                           const std::string& config) {
  return run_command(generate_flags(size, config) +
                     " --output-format npy --overwrite --output-path " + dir.string() +
                     " --output-file-name " + name);
}

testing::CommandResult dry_run(const std::string& size, const std::string& config) {
  return run_command(generate_flags(size, config) + " --dry-run");
}

std::string bytes(const fs::path& path) {
  return read_text_file(path, size_t(1) << 30);
}

// A mask file with `window` for every step from kSkip on, layer and head.
fs::path uniform_mask(const fs::path& path, const Window& window) {
  json mask = json::object();
  for (int t = kSkip; t < kSteps; ++t)
    for (int l = 0; l < kLayers; ++l)
      for (int h = 0; h < kHeads; ++h)
        mask[fmt::format("{}_{}_{}", t, l, h)] = {window[0], window[1], window[2]};
  std::ofstream(path) << mask.dump();
  return path;
}

const std::string kTiles = "tile_size=[1,2,2],skip_time_steps=1";

// ------------------------------------------------------------------ default windows

TEST(StaDefaults, WindowSizeEqualsAMaskFileWithTheSameWindowOnTwoGrids) {
  const fs::path dir = testing::scratch_dir("sta-defaults-window");
  for (const auto& [size, runs_as] :
       {std::pair{kTiny, std::string("window_size [3, 3, 3] runs as [3, 3, 3]")},
        std::pair{kOther, std::string("window_size [3, 3, 3] runs as [2, 3, 3]")}}) {
    // No window_size given: the default [3, 3, 3], clamped to the grid.
    const auto defaults = run(dir, "default", size, kTiles);
    ASSERT_EQ(defaults.exit_code, 0) << defaults.err;
    EXPECT_NE(defaults.err.find("window_size [3, 3, 3] tiles of 1x2x2 tokens for every layer and "
                                "head at steps 1..2 (no mask_strategy_file_path)"),
              std::string::npos)
        << defaults.err;
    EXPECT_NE(defaults.err.find(runs_as), std::string::npos) << defaults.err;
    const fs::path mask = uniform_mask(dir / "mask.json", {3, 3, 3});
    const auto masked =
        run(dir, "masked", size, kTiles + ",mask_strategy_file_path=" + mask.string());
    ASSERT_EQ(masked.exit_code, 0) << masked.err;
    EXPECT_NE(masked.err.find("windows per layer and head from mask_strategy_file_path"),
              std::string::npos)
        << masked.err;
    EXPECT_EQ(bytes(dir / "default.npy"), bytes(dir / "masked.npy")) << size;
    // And it is sparse: not what full attention gives.
    const auto dense = run(dir, "dense", size, "tile_size=[1,2,2],skip_time_steps=100");
    ASSERT_EQ(dense.exit_code, 0) << dense.err;
    const double difference =
        testing::relative_error(read_npy(dir / "default.npy"), read_npy(dir / "dense.npy"));
    EXPECT_GT(difference, 1e-6) << size;  // rounding is ~1e-7; wan-tiny decodes ~7e-5 apart
    std::printf("[ sta ] %s: window_size [3,3,3] vs dense: rel diff %.2e\n", size.c_str(),
                difference);
  }
}

TEST(StaDefaults, AWindowLargerThanTheGridIsDenseAttention) {
  const fs::path dir = testing::scratch_dir("sta-defaults-large");
  ASSERT_EQ(run(dir, "large", kOther, kTiles + ",window_size=[9,9,9]").exit_code, 0);
  ASSERT_EQ(run(dir, "dense", kOther, "tile_size=[1,2,2],skip_time_steps=100").exit_code, 0);
  EXPECT_EQ(bytes(dir / "large.npy"), bytes(dir / "dense.npy"));
  // STA's dense path is dense attention: torch_sdpa agrees to rounding.
  const auto sdpa = run_command(generate_flags(kOther, "") +
                                " --attention-backend torch_sdpa --output-format npy "
                                "--overwrite --output-path " +
                                dir.string() + " --output-file-name sdpa");
  ASSERT_EQ(sdpa.exit_code, 0) << sdpa.err;
  EXPECT_LT(testing::relative_error(read_npy(dir / "large.npy"), read_npy(dir / "sdpa.npy")), 1e-5);
}

// ------------------------------------------------------------------ the search

// The search's file, read back: window per "step_layer_head".
std::map<std::string, Window> read_windows(const fs::path& path) {
  std::map<std::string, Window> out;
  const json document = read_json_object(path);
  for (const auto& [key, value] : document.items())
    out[key] = {value.at(0).get<int>(), value.at(1).get<int>(), value.at(2).get<int>()};
  return out;
}

std::map<std::string, Window> search(const fs::path& dir, const std::string& name,
                                     const std::string& threshold) {
  const fs::path file = dir / (name + ".json");
  const auto result = run(dir, name, kTiny,
                          kTiles + ",sta_mode=STA_searching,mask_search_output=" + file.string() +
                              (threshold.empty() ? "" : ",mask_search_threshold=" + threshold));
  EXPECT_EQ(result.exit_code, 0) << result.err;
  EXPECT_NE(result.err.find("sliding_tile_attn wrote " + file.string()), std::string::npos)
      << result.err;
  // Dense on purpose: no "runs dense in all steps" warning.
  EXPECT_EQ(result.err.find("runs dense in all"), std::string::npos) << result.err;
  return read_windows(file);
}

TEST(StaDefaults, SearchingWritesAFileThatInferenceAcceptsAndOutputsDenseAttention) {
  const fs::path dir = testing::scratch_dir("sta-defaults-search");
  const auto windows = search(dir, "found", "");
  // Every step (the skipped one with the full window), layer and head; valid windows.
  EXPECT_EQ(windows.size(), size_t(kSteps * kLayers * kHeads));
  for (int t = 0; t < kSteps; ++t)
    for (int l = 0; l < kLayers; ++l)
      for (int h = 0; h < kHeads; ++h) {
        const std::string key = fmt::format("{}_{}_{}", t, l, h);
        ASSERT_TRUE(windows.count(key)) << key;
        const Window w = windows.at(key);
        const Window tiles = {3, 4, 4};
        for (size_t a = 0; a < 3; ++a) {
          EXPECT_GE(w[a], 1) << key;
          EXPECT_LE(w[a], tiles[a]) << key;
        }
        if (t < kSkip) {
          EXPECT_EQ(w, tiles) << key;
        }
      }
  const auto inference = run(dir, "inference", kTiny,
                             kTiles + ",mask_strategy_file_path=" + (dir / "found.json").string());
  ASSERT_EQ(inference.exit_code, 0) << inference.err;
  ASSERT_EQ(run(dir, "dense", kTiny, "tile_size=[1,2,2],skip_time_steps=100").exit_code, 0);
  EXPECT_EQ(bytes(dir / "found.npy"), bytes(dir / "dense.npy"));
}

TEST(StaDefaults, ThresholdZeroPicksTheFullWindowAndAHugeOneTheSmallest) {
  const fs::path dir = testing::scratch_dir("sta-defaults-threshold");
  const auto strict = search(dir, "strict", "0");
  const auto loose = search(dir, "loose", "1e9");
  const auto middle = search(dir, "middle", "0.5");
  int full = 0, smallest = 0;
  for (const auto& [key, window] : strict) {
    if (key.rfind("0_", 0) == 0) continue;  // the skipped step
    EXPECT_EQ(window, (Window{3, 4, 4})) << key;
    EXPECT_EQ(loose.at(key), (Window{1, 1, 1})) << key;
    full += middle.at(key) == Window{3, 4, 4};
    smallest += middle.at(key) == Window{1, 1, 1};
  }
  // In between, on wan-tiny, something in between (measured: [3, 4, 3] and [3, 3, 3]).
  EXPECT_LT(full, (kSteps - kSkip) * kLayers * kHeads);
  EXPECT_LT(smallest, (kSteps - kSkip) * kLayers * kHeads);
}

// The rule, in process against errors measured here with STA_inference backends: for one call,
// each head gets the smallest-volume candidate whose ||o_w - o_full|| / ||o_full|| is under the
// threshold (ties: the smaller error), the full window when none is.
TEST(StaDefaults, TheSearchPicksTheSmallestWindowUnderTheThreshold) {
  const fs::path dir = testing::scratch_dir("sta-defaults-rule");
  const int64_t heads = 3, dim = 16;
  const std::array<int64_t, 3> grid = {2, 4, 6};  // tiles 1x2x2: 2x2x3 tiles
  // Local attention, more so in head 0 than in head 2: each token's query and key get its tile's
  // one-hot direction times 4, 2 and 0.5 by head over half-scale noise, so the heads need
  // different windows.
  TorchCpuGenerator generator(11);
  const Shape shape = {1, grid[0] * grid[1] * grid[2], heads, dim};
  Tensor q = generator.randn(shape), k = generator.randn(shape);
  const Tensor v = generator.randn(shape);
  const float strength[3] = {4.0f, 2.0f, 0.5f};
  for (int64_t t = 0; t < grid[0]; ++t)
    for (int64_t y = 0; y < grid[1]; ++y)
      for (int64_t x = 0; x < grid[2]; ++x) {
        const int64_t token = (t * grid[1] + y) * grid[2] + x, tile = (t * 2 + y / 2) * 3 + x / 2;
        for (int64_t h = 0; h < heads; ++h)
          for (Tensor* x_ : {&q, &k}) {
            float* row = x_->data<float>() + (token * heads + h) * dim;
            for (int64_t d = 0; d < dim; ++d) row[d] *= 0.5f;
            row[tile] += strength[h];
          }
      }
  attention::AttentionContext context;
  context.num_steps = 1;
  context.num_layers = 1;
  context.grid = grid;
  // The errors of every window, measured with STA_inference backends of one window each.
  const auto output_of = [&](const Window& w) {
    const json config = {
        {"tile_size", {1, 2, 2}}, {"skip_time_steps", 0}, {"window_size", {w[0], w[1], w[2]}}};
    return attention::make_dit_backend("sliding_tile_attn", config)
        ->forward(q, k, v, 0.5f, context);
  };
  const Tensor full = output_of({2, 2, 3});
  struct Measured {
    Window window;
    std::vector<double> error;  // per head
  };
  std::vector<Measured> measured;
  for (int t : {1, 2})
    for (int h : {1, 2})
      for (int w : {1, 3}) {
        const Tensor out = output_of({t, h, w});
        Measured m{{t, h, w}, {}};
        for (int64_t head = 0; head < heads; ++head)
          m.error.push_back(testing::relative_error(out.slice(2, head, head + 1).contiguous(),
                                                    full.slice(2, head, head + 1).contiguous()));
        measured.push_back(m);
      }
  for (double threshold : {0.02, 0.1, 0.3, 0.6}) {
    const fs::path file = dir / fmt::format("rule-{}.json", threshold);
    const json config = {{"tile_size", {1, 2, 2}},
                         {"skip_time_steps", 0},
                         {"sta_mode", "STA_searching"},
                         {"mask_search_output", file.string()},
                         {"mask_search_threshold", threshold}};
    const Tensor searched =
        attention::make_dit_backend("sliding_tile_attn", config)->forward(q, k, v, 0.5f, context);
    EXPECT_EQ(testing::max_abs_diff(searched, full), 0.0);  // the output is full attention's
    const auto windows = read_windows(file);
    for (int64_t head = 0; head < heads; ++head) {
      Window expected = {2, 2, 3};
      int64_t volume = 2 * 2 * 3;
      double error = 0;
      for (const Measured& m : measured) {
        const int64_t v_m = int64_t(m.window[0]) * m.window[1] * m.window[2];
        const double e = m.window == Window{2, 2, 3} ? 0.0 : m.error[size_t(head)];
        if (e >= threshold) continue;
        if (v_m < volume || (v_m == volume && e < error))
          expected = m.window, volume = v_m, error = e;
      }
      EXPECT_EQ(windows.at(fmt::format("0_0_{}", head)), expected)
          << "threshold " << threshold << " head " << head;
      std::printf("[ sta ] threshold %.2f head %lld: [%d, %d, %d] (error %.3f)\n", threshold,
                  static_cast<long long>(head), expected[0], expected[1], expected[2], error);
    }
  }
}

// ------------------------------------------------------------------ dry run = run

TEST(StaDefaults, TheDryRunAndTheRunRefuseTheSameSettingsInOneLine) {
  const fs::path dir = testing::scratch_dir("sta-defaults-refusals");
  const fs::path mask = uniform_mask(dir / "mask.json", {1, 1, 1});
  const std::string out = (dir / "found.json").string();
  const std::vector<std::pair<std::string, std::string>> refused = {
      {"window_size=[0,1,1]", "window_size"},
      {"window_size=[1,2]", "window_size"},
      {"sta_mode=STA_searching", "needs mask_search_output"},
      {"sta_mode=STA_searching,mask_search_output=" + out +
           ",mask_strategy_file_path=" + mask.string(),
       "reads no mask_strategy_file_path"},
      {"mask_search_output=" + out, "written by sta_mode=STA_searching only"},
      {"sta_mode=STA_tuning", "is not available"},
      {"sta_mode=STA_searching,skip_time_steps=3,mask_search_output=" + out,
       "leaves none of the 3 step(s) to search"},
      {"skip_time_steps=1,sta_mode=STA_searching,mask_search_output=" +
           (dir / "missing" / "x.json").string(),
       "no such folder"},
      {"skip_time_steps=1,sta_mode=STA_searching,mask_search_output=" + dir.string(),
       "is a folder"},
      {"sta_mode=STA_searching,mask_search_output=" + out + ",mask_search_threshold=-1",
       "mask_search_threshold"},
  };
  for (const auto& [config, reason] : refused) {
    const auto dry = dry_run(kTiny, "tile_size=[1,2,2]," + config);
    const auto ran = run(dir, "refused", kTiny, "tile_size=[1,2,2]," + config);
    EXPECT_NE(dry.exit_code, 0) << config;
    EXPECT_NE(ran.exit_code, 0) << config;
    EXPECT_NE(dry.err.find(reason), std::string::npos) << config << ": " << dry.err;
    EXPECT_EQ(dry.err, ran.err) << config;
    EXPECT_EQ(std::count(dry.err.begin(), dry.err.end(), '\n'), 1) << config << ": " << dry.err;
    EXPECT_FALSE(fs::exists(dir / "refused.npy")) << config;
  }
  // What the run accepts, the dry run accepts, and says which windows run.
  const std::vector<std::pair<std::string, std::string>> accepted = {
      {kTiles, "window_size [3, 3, 3] tiles"},
      {kTiles + ",window_size=[1,9,2]", "window_size [1, 9, 2] tiles"},
      {kTiles + ",mask_strategy_file_path=" + mask.string(), "from mask_strategy_file_path"},
      {kTiles + ",sta_mode=STA_searching,mask_search_output=" + out,
       "STA_searching runs full attention in every step"},
  };
  for (const auto& [config, note] : accepted) {
    const auto dry = dry_run(kTiny, config);
    EXPECT_EQ(dry.exit_code, 0) << config << ": " << dry.err;
    EXPECT_NE(dry.err.find(note), std::string::npos) << config << ": " << dry.err;
    const auto ran = run(dir, "accepted", kTiny, config);
    EXPECT_EQ(ran.exit_code, 0) << config << ": " << ran.err;
    EXPECT_NE(ran.err.find(note), std::string::npos) << config << ": " << ran.err;
  }
}

}  // namespace
}  // namespace mmgen
