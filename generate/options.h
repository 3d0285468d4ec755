// The table of `generate` options: one row per option with its type, built-in default and help.
// The CLI, config-file validation, the dry-run's request object and docs/configuration.md all come
// from this table, so they cannot drift apart.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mmgen::cli {

enum class OptionType { String, Path, Int, Float, Bool, Flag, Choice, Spec };

struct OptionSpec {
  std::string_view name;  // flag name without dashes, words joined by '-'
  OptionType type;
  nlohmann::json builtin_default;  // null: unset unless given
  std::string_view help;
  std::vector<std::string_view> choices = {};  // for Choice
  bool in_config = true;                       // may appear in a --config file
};

const std::vector<OptionSpec>& generate_options();
const OptionSpec* find_option(std::string_view name);

// "num_frames" and "num-frames" both name --num-frames.
std::string normalize_option_name(std::string_view name);

// Converts a command-line string or a config-file value to the option's JSON type; `where` names
// the source in errors ("--height", "config.yaml: height").
nlohmann::json convert_option_value(const OptionSpec& option, const nlohmann::json& value,
                                    const std::string& where);

}  // namespace mmgen::cli
