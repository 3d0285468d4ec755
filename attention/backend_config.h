// --attention-backend-config: parsing the SPEC, validating it against the selected backend's
// settings in the catalogue (defaults filled in).
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
// flag in errors. Relative paths are read from `base` (empty: the current folder): a SPEC naming a
// file, and file settings (mask_strategy_file_path) given inline; file settings inside a
// .json/.yaml file are read from that file's folder.
nlohmann::json parse_backend_config_spec(const nlohmann::json& spec,
                                         const std::string& where = "--attention-backend-config",
                                         const fs::path& base = {});

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

// The keys of `settings` that none of `backends` takes (neither a setting, an alias nor a group).
std::vector<std::string> settings_unused_by(const nlohmann::json& settings,
                                            const std::vector<std::string>& backends);

// What a setting accepts, in words: "a number in [0, 1)", "one of threshold, topk".
std::string describe_accepted(const ConfigKey& key);

}  // namespace mmgen::attention
