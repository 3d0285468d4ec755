// `mmgen inspect --model-path DIR [generate options] [--json]`: what a model folder holds and
// what a request on it would need, without loading any weights: the pipeline, each component's
// class, parameter count, dtypes, on-disk and in-memory sizes and the attention backend the
// selector gives it, and the memory estimate of the request the other flags describe (the
// pipeline's defaults when none are given) against the free memory.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace mmgen::cli {

// The report as JSON (what --json prints): the inventory's fields, per component
// `attention_backend` and `attention_backend_source`, `request`, `memory` (the estimate's fields)
// and `available_memory_bytes` / `memory_fits` (null when the machine cannot be read).
nlohmann::json inspect_json(const std::vector<std::string>& arguments);

int run_inspect(const std::vector<std::string>& arguments);
std::string inspect_help();

}  // namespace mmgen::cli
