// sliding_tile_attn's mask-strategy file: which window of key tiles each (step, layer, head)
// attends. The attention plan loads and checks it once per run (pipeline/attention_plan.h) and
// hands it to the backend through BackendResources.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <utility>
#include <vector>

namespace mmgen::attention {

namespace fs = std::filesystem;

// The STA mask-strategy file: a JSON object keyed "step_layer_head" with [wt, wh, ww] windows
// counted in tiles.
class StaMaskStrategy {
 public:
  using Window = std::array<int32_t, 3>;

  static StaMaskStrategy load(const fs::path& path);

  // The window for one (step, layer, head); nullopt when the file has no entry for it.
  std::optional<Window> window(int64_t step, int64_t layer, int64_t head) const;

  // Throws Error, naming the file, unless the file fits the model and the run: no layer or head
  // beyond the model's, and a window for every head of every layer at every step from
  // `skip_time_steps` (full attention before) to `steps`. Extra steps are fine (unused).
  void check(int64_t steps, int64_t layers, int64_t heads, int64_t skip_time_steps) const;

  const fs::path& path() const { return path_; }
  int64_t steps() const { return steps_; }  // 1 + the largest step in the file
  int64_t layers() const { return layers_; }
  int64_t heads() const { return heads_; }
  size_t entries() const { return entries_; }

 private:
  // (step, layer, head) as one number in their order: each index is below 2^20.
  static int64_t key(int64_t step, int64_t layer, int64_t head) {
    return (step << 40) | (layer << 20) | head;
  }

  fs::path path_;
  int64_t steps_ = 0, layers_ = 0, heads_ = 0;
  size_t entries_ = 0;
  // The file's windows sorted by key (as the entries sort): memory in proportion to the file, not to the grid its
  // largest indices span (one entry "0_16383_16383" would otherwise claim 3 GiB).
  std::vector<std::pair<int64_t, Window>> windows_;
};

}  // namespace mmgen::attention
