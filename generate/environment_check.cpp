#include "generate/environment_check.h"

#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/system_memory.h"
#include "core/thread_placement.h"

namespace mmgen::cli {

namespace {

struct Variable {
  const char* name;
  const char* takes;  // what a good value is, for the error line
  std::function<bool(const std::string&)> valid;
};

bool one_of(const std::string& value, std::initializer_list<const char*> choices) {
  for (const char* choice : choices)
    if (value == choice) return true;
  return false;
}

const std::vector<Variable>& variables() {
  static const std::vector<Variable> table = {
      {"MMGEN_AVAILABLE_MEMORY", "a size such as 24G, 20000M or a number of bytes",
       [](const std::string& v) { return parse_byte_size(v).has_value(); }},
      {"MMGEN_ATTENTION_BACKEND", "a backend name (see `mmgen backends`)",
       [](const std::string& v) { return !v.empty(); }},
      {"MMGEN_OP_PROFILE", "0, 1 or sync",
       [](const std::string& v) {
         return one_of(v, {"0", "1", "sync"});
       }},
      {"MMGEN_GEMM_AUTOTUNE", "0 or 1",
       [](const std::string& v) {
         return one_of(v, {"0", "1"});
       }},
      // Set by a --gpus N leader for the ranks it starts (generate/multi_gpu.h).
      {"MMGEN_CPUS", "a CPU list such as 0-3,8",
       [](const std::string& v) { return !parse_cpu_list(v).empty(); }},
      {"MMGEN_RANK", "a rank number",
       [](const std::string& v) {
         return !v.empty() && v.find_first_not_of("0123456789") == std::string::npos;
       }},
      {"MMGEN_NCCL_ID", "the leader's NCCL id", [](const std::string& v) { return !v.empty(); }},
  };
  return table;
}

}  // namespace

void check_environment() {
  for (const Variable& variable : variables()) {
    const char* value = std::getenv(variable.name);
    if (!value) continue;
    check(variable.valid(value), "environment: {}='{}' is not {}; fix or unset it", variable.name,
          value, variable.takes);
  }
}

}  // namespace mmgen::cli
