// `mmgen options`: every `generate` option from the option table (generate/options.h), as text or
// as the Markdown of docs/configuration.md or as JSON for tools, together with the settings
// precedence, the config-file format and each pipeline's defaults from configs/ (compiled in).
// Generated, so the reference cannot drift from the code; tests/docs_test.cpp checks the committed
// file.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace mmgen::cli {

std::string configuration_markdown();

// `mmgen options --json`: {"generate": [...], "encode": [...], "attention": [...]}, one object per
// option: name, flag, type, builtin_default, default (the words --help shows), configured_defaults
// (generate: what each pipeline's configs/ file sets, by variant), help, choices, in_config,
// repeatable, value_name.
nlohmann::json options_json();

int run_options(const std::vector<std::string>& arguments);

}  // namespace mmgen::cli
