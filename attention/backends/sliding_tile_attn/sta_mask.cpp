#include "attention/backends/sliding_tile_attn/sta_mask.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "core/json.h"

namespace mmgen::attention {

using json = nlohmann::json;

StaMaskStrategy StaMaskStrategy::load(const fs::path& path) {
  const json document = read_json_object(path, /*unique_keys=*/true);
  const std::string where = path.string();
  struct Entry {
    int64_t step, layer, head;
    Window window;
  };
  std::vector<Entry> entries;
  entries.reserve(document.size());
  StaMaskStrategy mask;
  mask.path_ = path;
  for (auto it = document.begin(); it != document.end(); ++it) {
    // "step_layer_head": three runs of digits joined by '_' (split by hand: std::regex recurses
    // per character and overflowed the stack on a 60 000-digit key).
    const std::string& key = it.key();
    std::array<std::string, 3> parts;
    size_t part = 0;
    bool well_formed = true;
    for (char c : key) {
      if (c == '_' && part < 2 && !parts[part].empty())
        ++part;
      else if (c >= '0' && c <= '9')
        parts[part] += c;
      else
        well_formed = false;
    }
    mmgen::check(well_formed && part == 2 && !parts[2].empty(),
                 "{}: key '{}' is not \"step_layer_head\" (three whole numbers, e.g. \"0_3_7\")",
                 where, key);
    Entry entry{};
    try {
      entry.step = std::stoll(parts[0]);
      entry.layer = std::stoll(parts[1]);
      entry.head = std::stoll(parts[2]);
    } catch (const std::out_of_range&) {
      fail("{}: key '{}' has a number too large", where, it.key());
    }
    mmgen::check(entry.step < (1 << 20) && entry.layer < (1 << 20) && entry.head < (1 << 20),
                 "{}: key '{}' has an index too large for a model", where, it.key());
    const json& value = *it;
    bool valid = value.is_array() && value.size() == 3;
    for (size_t i = 0; valid && i < 3; ++i) {
      valid = value[i].is_number_integer() && value[i].get<int64_t>() >= 1 &&
              value[i].get<int64_t>() < (1 << 20);
      if (valid) entry.window[i] = int32_t(value[i].get<int64_t>());
    }
    if (!valid)
      fail("{}: \"{}\" must be a window [wt, wh, ww] of three whole numbers >= 1 (tiles), got {}",
           where, it.key(), value.dump());
    mask.steps_ = std::max(mask.steps_, entry.step + 1);
    mask.layers_ = std::max(mask.layers_, entry.layer + 1);
    mask.heads_ = std::max(mask.heads_, entry.head + 1);
    entries.push_back(entry);
  }
  mmgen::check(!entries.empty(), "{}: the mask strategy has no windows", where);
  const auto order = [](const Entry& e) { return std::tuple(e.step, e.layer, e.head); };
  std::sort(entries.begin(), entries.end(),
            [&](const Entry& a, const Entry& b) { return order(a) < order(b); });
  // "1_0_0" and "01_0_0" are one entry: two windows for it would leave which one counts unsaid.
  const auto twice =
      std::adjacent_find(entries.begin(), entries.end(),
                         [&](const Entry& a, const Entry& b) { return order(a) == order(b); });
  if (twice != entries.end())
    fail("{}: the mask strategy gives two windows for step {}, layer {}, head {}; keep one", where,
         twice->step, twice->layer, twice->head);
  mask.windows_.reserve(entries.size());
  for (const auto& entry : entries)
    mask.windows_.emplace_back(key(entry.step, entry.layer, entry.head), entry.window);
  mask.entries_ = entries.size();
  return mask;
}

std::optional<StaMaskStrategy::Window> StaMaskStrategy::window(int64_t step, int64_t layer,
                                                               int64_t head) const {
  if (step < 0 || layer < 0 || head < 0 || step >= steps_ || layer >= layers_ || head >= heads_)
    return std::nullopt;
  const int64_t wanted = key(step, layer, head);
  const auto it = std::lower_bound(windows_.begin(), windows_.end(), wanted,
                                   [](const auto& entry, int64_t k) { return entry.first < k; });
  if (it == windows_.end() || it->first != wanted) return std::nullopt;
  return it->second;
}

void StaMaskStrategy::check(int64_t steps, int64_t layers, int64_t heads,
                            int64_t skip_time_steps) const {
  const std::string where = path_.string();
  mmgen::check(layers_ <= layers,
               "{}: the mask strategy has windows for layer {} but the model has {} layers; it "
               "was made for another model",
               where, layers_ - 1, layers);
  mmgen::check(heads_ <= heads,
               "{}: the mask strategy has windows for head {} but the model has {} heads; it was "
               "made for another model",
               where, heads_ - 1, heads);
  size_t missing = 0;
  std::string first;
  for (int64_t t = std::max<int64_t>(skip_time_steps, 0); t < steps; ++t)
    for (int64_t l = 0; l < layers; ++l)
      for (int64_t h = 0; h < heads; ++h)
        if (!window(t, l, h)) {
          if (missing++ == 0) first = fmt::format("{}_{}_{}", t, l, h);
        }
  mmgen::check(missing == 0,
               "{}: the mask strategy has no window for \"{}\" ({} of the {} step x layer x head "
               "entries that steps {} to {} need are missing); it must cover {} steps, {} layers "
               "and {} heads, or raise skip_time_steps",
               where, first, missing,
               (steps - std::max<int64_t>(skip_time_steps, 0)) * layers * heads,
               std::max<int64_t>(skip_time_steps, 0), steps - 1, steps, layers, heads);
}

}  // namespace mmgen::attention
