// Helpers shared by the tests: where the reference fixtures are, and how to compare tensors.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "core/tensor.h"

namespace mmgen {
struct WanGenerationInput;
struct FluxGenerationInput;
struct ZImageGenerationInput;
struct QwenImageGenerationInput;
}  // namespace mmgen

namespace mmgen::testing {

namespace fs = std::filesystem;

// ../shared (MMGEN_SHARED_DIR); empty when absent on this machine.
fs::path shared_dir();
fs::path source_dir();
fs::path mmgen_binary();

// ‖actual − expected‖ / ‖expected‖ over all elements, in double.
double relative_error(const Tensor& actual, const Tensor& expected);
double max_abs_diff(const Tensor& actual, const Tensor& expected);

// The message of the mmgen::Error that `action` throws; empty when it throws none.
std::string error_message(const std::function<void()>& action);

// A fresh empty folder under the system temp directory, removed at process exit.
fs::path scratch_dir(const std::string& name);

// Runs a shell command, capturing stdout and stderr separately.
struct CommandResult {
  int exit_code;
  std::string out;
  std::string err;
};
CommandResult run_command(const std::string& command);
// The one-line refusal a bad input gets: exit 1, "mmgen: error: " and `expected` on stderr's only
// line, nothing on stdout. `what` names the case in failures.
void expect_one_line_error(const CommandResult& result, const std::string& expected,
                           const std::string& what);

// One generate run's peak resident memory (its summary line), beside `mmgen inspect --json` for the
// same model and flags (its ["memory"]["total_bytes"] is the estimate). Asserts that both ran;
// the callers compare the numbers.
struct PeakAndInspection {
  double peak_mib = 0;
  nlohmann::json inspection;
};
PeakAndInspection measure_peak_and_inspect(const std::string& model, const std::string& flags,
                                           const fs::path& out);

// A private copy of examples/models/wan-tiny (2 MB, weights included) to edit, in a scratch
// folder named after `name`.
fs::path copy_of_wan_tiny(const std::string& name);
// The original Wan release's name of a diffusers WanTransformer3DModel tensor, as the
// community's Wan GGUF and FP8 files keep them ("blocks.0.self_attn.q.weight").
std::string original_wan_name(const std::string& name);
// Writes `value` as indented JSON, replacing the file.
void write_json_file(const fs::path& path, const nlohmann::json& value);
// Sets the copy's model_index.json entry `component` to [library, class_name].
void set_component_class(const fs::path& model, const std::string& component,
                         const std::string& library, const std::string& class_name);

// The Wan request a fixture's reference.json gives under "pipeline" (prompt, negative prompt,
// sizes, frames, steps, guidance, max_sequence_length) as WanPipeline's input.
WanGenerationInput wan_fixture_input(const nlohmann::json& pipeline);
// The same for FLUX (prompt, sizes, steps, guidance, max_sequence_length).
FluxGenerationInput flux_fixture_input(const nlohmann::json& pipeline);
// Z-Image (prompt, negative prompt, sizes, steps, guidance with its truncation,
// max_sequence_length).
ZImageGenerationInput zimage_fixture_input(const nlohmann::json& pipeline);
// Qwen-Image (prompt, negative prompt, true CFG, sizes, steps; diffusers' max_sequence_length,
// 512).
QwenImageGenerationInput qwenimage_fixture_input(const nlohmann::json& pipeline);

}  // namespace mmgen::testing

// Skips the test, visibly, when ../shared is not on this machine.
#define MMGEN_REQUIRE_SHARED()                                                                 \
  do {                                                                                         \
    if (::mmgen::testing::shared_dir().empty())                                                \
      GTEST_SKIP() << "../shared not found (set -DMMGEN_SHARED_DIR); reference check skipped"; \
  } while (0)
