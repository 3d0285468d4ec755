// --attention-backend-config: parsing the SPEC, validating it against the selected backend's
// settings in the catalogue (defaults filled in), and the STA mask-strategy file.
//
// SPEC is tried in this order:
//   1. an existing file: .json or .yaml/.yml (another extension is an error);
//   2. a JSON object: '{"sparsity": 0.9}';
//   3. key=value pairs: 'sparsity=0.9,sta_mode=STA_inference', where true/false become booleans,
//      integers and floats (with sign and exponent) become numbers, [a,b,c] becomes a list, a
//      quoted value may hold commas, and a dotted key (moba_config.st_topk=3) nests.
// Unlike SGLang, unknown keys are errors that name the valid ones, and SGLang's code-level
// spellings (VSA_sparsity, STA_mode, moba_config, svg2_*) are accepted as aliases.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "attention/catalogue.h"

namespace mmgen::attention {

namespace fs = std::filesystem;

// Parses SPEC into a JSON object without validating it. `spec` is null (no settings: an empty
// object), a string as above, or an object (straight from a --config file). `where` names the
// flag in errors.
nlohmann::json parse_backend_config_spec(const nlohmann::json& spec,
                                         const std::string& where = "--attention-backend-config");

// Checks parsed settings against the DiT backend `backend` (canonical name) and returns them
// with aliases resolved, values coerced to their type (choices to their canonical spelling) and
// defaults filled in. With `ignore_unknown`, keys the backend does not know are dropped instead
// of rejected (used when several backends share one config).
nlohmann::json validate_backend_config(const nlohmann::json& settings, std::string_view backend,
                                       const std::string& where = "--attention-backend-config",
                                       bool ignore_unknown = false);

// Checks settings against several backends at once (components may use different backends): a
// key must belong to at least one of them. Returns one validated object per backend, in order.
std::vector<nlohmann::json> validate_backend_configs(
    const nlohmann::json& settings, const std::vector<std::string>& backends,
    const std::string& where = "--attention-backend-config");

// What a setting accepts, in words: "a number in [0, 1)", "one of threshold, topk".
std::string describe_accepted(const ConfigKey& key);

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
  fs::path path_;
  int64_t steps_ = 0, layers_ = 0, heads_ = 0;
  size_t entries_ = 0;
  std::vector<Window> table_;  // [steps][layers][heads]; {0,0,0} where the file has no entry
};

}  // namespace mmgen::attention
