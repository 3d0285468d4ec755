// The table of the subcommands' options (generate, encode, attention): one row per option with
// its type, built-in default and help, and the commands it belongs to. Each command's parser and
// --help, config-file validation, the dry-run's request object and docs/configuration.md all come
// from this table, so they cannot drift apart.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mmgen::cli {

enum class OptionType { String, Path, Int, Float, Bool, Flag, Choice, Spec };

// The subcommands that read their options from the table.
enum class Command { Generate, Encode, Attention, Convert };
// "generate", "encode", "attention", "convert"
std::string_view command_name(Command command);

struct OptionSpec {
  std::string_view name;  // flag name without dashes, words joined by '-'
  OptionType type;
  nlohmann::json builtin_default;  // null: unset unless given
  std::string_view help;
  std::vector<std::string_view> choices = {};  // for Choice
  bool in_config = true;                       // may appear in a --config file
  std::vector<Command> commands = {Command::Generate};
  bool repeatable = false;           // given several times, its values are kept in order
  std::string_view value_name = {};  // what --help shows after the flag ("" : VALUE)
};

// A command's options, in table order.
const std::vector<OptionSpec>& command_options(Command command);
const std::vector<OptionSpec>& generate_options();  // command_options(Command::Generate)
const OptionSpec* find_option(std::string_view name, Command command = Command::Generate);

// The "Options:" part of a command's --help: one line per option with its value, help and
// default: the built-in one, or what `describe_default` says (generate: the pipelines' configs/
// defaults too, generate/pipeline_defaults.h); an empty description shows none.
std::string options_help(
    Command command,
    const std::function<std::string(const OptionSpec&)>& describe_default = nullptr);

// "num_frames" and "num-frames" both name --num-frames.
std::string normalize_option_name(std::string_view name);

// Converts a command-line string or a config-file value to the option's JSON type; `where` names
// the source in errors ("--height", "config.yaml: height").
nlohmann::json convert_option_value(const OptionSpec& option, const nlohmann::json& value,
                                    const std::string& where);

}  // namespace mmgen::cli
