#include "attention/backends/sliding_tile_attn/sta_search.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <utility>

#include "core/error.h"
#include "core/file.h"

namespace mmgen::attention::sliding_tile_attn {

namespace {

int64_t volume(const StaWindow& window) {
  return int64_t(window[0]) * window[1] * window[2];
}

}  // namespace

std::vector<StaWindow> search_candidates(const Grid3& boxes) {
  std::vector<int32_t> sizes[3];
  for (size_t a = 0; a < 3; ++a) {
    for (int64_t w = 1; w < boxes[a]; w += 2) sizes[a].push_back(int32_t(w));
    sizes[a].push_back(int32_t(boxes[a]));
  }
  std::vector<StaWindow> out;
  for (int32_t t : sizes[0])
    for (int32_t h : sizes[1])
      for (int32_t w : sizes[2]) out.push_back({t, h, w});
  // Stable: equal volumes keep the t, h, w order, so the choice does not depend on the sort.
  std::stable_sort(out.begin(), out.end(),
                   [](const StaWindow& a, const StaWindow& b) { return volume(a) < volume(b); });
  return out;
}

StaSearch::StaSearch(fs::path output, double threshold, int64_t skip_time_steps)
    : output_(std::move(output)), threshold_(threshold), skip_time_steps_(skip_time_steps) {}

void StaSearch::record(const Grid3& boxes, int64_t step, int64_t num_steps, int64_t layer,
                       int64_t num_layers, const std::vector<double>& squared,
                       const std::vector<double>& reference) {
  std::lock_guard lock(mutex_);
  const int64_t heads = int64_t(reference.size());
  if (candidates_.empty()) {
    boxes_ = boxes;
    heads_ = heads;
    candidates_ = search_candidates(boxes);
  }
  check(boxes == boxes_ && heads == heads_,
        "sliding_tile_attn: STA_searching: a call with {}x{}x{} tiles and {} heads after calls "
        "with {}x{}x{} tiles and {} heads; one search covers one latent grid (run one size per "
        "search)",
        boxes[0], boxes[1], boxes[2], heads, boxes_[0], boxes_[1], boxes_[2], heads_);
  const size_t count = candidates_.size();
  check(squared.size() == size_t(heads) * count,
        "sliding_tile_attn: STA_searching: {} measurements for {} heads x {} candidates",
        squared.size(), heads, count);
  for (int64_t h = 0; h < heads; ++h) {
    Entry& entry = entries_[{step, layer, h}];
    if (entry.squared.empty()) entry.squared.assign(count, 0.0);
    for (size_t c = 0; c < count; ++c) entry.squared[c] += squared[size_t(h) * count + c];
    entry.reference += reference[size_t(h)];
  }
  if (step != num_steps - 1 || layer != num_layers - 1) return;
  for (int64_t t = skip_time_steps_; t < num_steps; ++t)
    for (int64_t l = 0; l < num_layers; ++l)
      for (int64_t h = 0; h < heads_; ++h)
        if (!entries_.count({t, l, h}))
          fail(
              "sliding_tile_attn: STA_searching: step {} layer {} head {} was never measured, so "
              "{} cannot be written",
              t, l, h, output_.string());
  write(num_steps, num_layers);
}

StaWindow StaSearch::choose(const Entry& entry) const {
  const StaWindow full = {int32_t(boxes_[0]), int32_t(boxes_[1]), int32_t(boxes_[2])};
  // candidates_ is sorted by volume: the first under the threshold is the smallest, and among
  // equal volumes the one with the smaller error wins.
  for (size_t c = 0; c < candidates_.size();) {
    size_t best = candidates_.size();
    double best_error = 0;
    const int64_t v = volume(candidates_[c]);
    for (; c < candidates_.size() && volume(candidates_[c]) == v; ++c) {
      const double error =
          entry.reference > 0 ? std::sqrt(entry.squared[c] / entry.reference) : 0.0;
      if (error < threshold_ && (best == candidates_.size() || error < best_error))
        best = c, best_error = error;
    }
    if (best != candidates_.size()) return candidates_[best];
  }
  return full;
}

void StaSearch::write(int64_t num_steps, int64_t num_layers) {
  const StaWindow full = {int32_t(boxes_[0]), int32_t(boxes_[1]), int32_t(boxes_[2])};
  std::string text = "{";
  double visited = 0, total = 0;
  for (int64_t t = 0; t < num_steps; ++t)
    for (int64_t l = 0; l < num_layers; ++l)
      for (int64_t h = 0; h < heads_; ++h) {
        // Steps before skip_time_steps run full attention (upstream's files say so too).
        const StaWindow w = t < skip_time_steps_ ? full : choose(entries_.at({t, l, h}));
        if (t >= skip_time_steps_) visited += double(volume(w)), total += double(volume(full));
        text += fmt::format("{}\n  \"{}_{}_{}\": [{}, {}, {}]", text.size() > 1 ? "," : "", t, l, h,
                            w[0], w[1], w[2]);
      }
  text += "\n}\n";
  write_atomically(output_, [&](const fs::path& temporary) {
    std::ofstream file(temporary, std::ios::binary);
    file << text;
    check(bool(file.flush()), "sliding_tile_attn: STA_searching: cannot write {}",
          temporary.string());
  });
  // The last step's later calls (the other guidance branch, further prompts) rewrite the file
  // with their measurements added; the first write is the one the log shows.
  spdlog::log(
      written_ ? spdlog::level::debug : spdlog::level::info,
      "attention: sliding_tile_attn wrote {}: windows of {}x{}x{} tiles for {} step(s) x {} "
      "layer(s) x {} head(s); the searched steps {}..{} visit {:.1f}% of the key tiles (the "
      "smallest of {} candidate windows under relative L2 error {}); run it with "
      "sta_mode=STA_inference,mask_strategy_file_path={}",
      output_.string(), boxes_[0], boxes_[1], boxes_[2], num_steps, num_layers, heads_,
      skip_time_steps_, num_steps - 1, total > 0 ? 100.0 * visited / total : 100.0,
      candidates_.size(), threshold_, output_.string());
  written_ = true;
}

}  // namespace mmgen::attention::sliding_tile_attn
