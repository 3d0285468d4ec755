// sliding_tile_attn's mask search (sta_mode=STA_searching): while a request runs with full
// attention, each self-attention call at a step >= skip_time_steps also runs every candidate
// window and records, per (step, layer, head), how far each candidate's output is from full
// attention's. After the run's last call it writes a mask-strategy file that STA_inference reads.
//
// Our rule, not SGLang's: SGLang tries a fixed list of windows made for one canvas (Wan at
// 69x768x1280) and keeps the one with the smallest L2 loss, which picks a sparse window however
// large its error is. We try every window the grid allows (odd sizes and the full count per
// axis) and keep the smallest one whose relative L2 error ||o_w - o_full|| / ||o_full|| is under
// mask_search_threshold, else the full window, so the threshold says how much accuracy a layer may
// lose and works at any resolution.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "attention/backends/sliding_tile_attn/sta_pattern.h"
#include "attention/kernels/sta_tiling.h"

namespace mmgen::attention::sliding_tile_attn {

namespace fs = std::filesystem;

// The windows the search tries on a grid of `boxes` tiles: per axis the odd sizes below the tile
// count and the count itself (a full axis), sorted by volume (visited key tiles), smallest first.
// Odd sizes because a window then sits centred on its query tile (window_span).
std::vector<StaWindow> search_candidates(const Grid3& boxes);

// The search state one run shares across its layers' backends (BackendResources::sta_search).
class StaSearch {
 public:
  StaSearch(fs::path output, double threshold, int64_t skip_time_steps);

  // One call's measurements: for each head h and candidate c (search_candidates(boxes) order),
  // squared[h * candidates + c] = sum of (o_c - o_full)^2 and reference[h] = sum of o_full^2 over
  // the batch, tokens and channels. Calls for the same (step, layer) add up (both guidance
  // branches, every prompt of a batch). After the call of the last step's last layer, when every
  // (step >= skip, layer, head) has a measurement, the file is written (again, if a later call
  // adds to it). Throws Error when the grid or head count changes within the search.
  void record(const Grid3& boxes, int64_t step, int64_t num_steps, int64_t layer,
              int64_t num_layers, const std::vector<double>& squared,
              const std::vector<double>& reference);

  const fs::path& output() const { return output_; }
  double threshold() const { return threshold_; }

 private:
  struct Entry {
    std::vector<double> squared;  // per candidate
    double reference = 0;
  };
  // The chosen window of one entry: the smallest candidate under the threshold, else the full.
  StaWindow choose(const Entry& entry) const;
  void write(int64_t num_steps, int64_t num_layers);

  fs::path output_;
  double threshold_;
  int64_t skip_time_steps_;
  std::mutex mutex_;
  Grid3 boxes_{};
  int64_t heads_ = 0;
  std::vector<StaWindow> candidates_;
  bool written_ = false;
  std::map<std::tuple<int64_t, int64_t, int64_t>, Entry> entries_;  // (step, layer, head)
};

}  // namespace mmgen::attention::sliding_tile_attn
