// `mmgen options`: every `generate` option from the option table (generate/options.h), as text or
// as the Markdown of docs/configuration.md, together with the settings precedence, the config-file
// format and each pipeline's defaults from configs/ (compiled in). Generated, so the reference
// cannot drift from the code; tests/docs_test.cpp checks the committed file.
#pragma once

#include <string>
#include <vector>

namespace mmgen::cli {

std::string configuration_markdown();

int run_options(const std::vector<std::string>& arguments);

}  // namespace mmgen::cli
