// `mmgen backends [--json] [--markdown]`: the attention-backend catalogue with each backend's
// status on this machine and build (available, falls back to X, unavailable, and why).
// --markdown prints docs/attention-backends.md, generated from the catalogue alone so that it is
// the same on every machine (a test keeps the committed file equal to it).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "attention/catalogue.h"

namespace mmgen::cli {

struct BackendStatus {
  std::string state;        // "available", "fallback", "unavailable"
  std::string fallback_to;  // for "fallback": the backend that runs instead
  std::string reason;       // empty when available
};

// The status of one catalogue entry on `machine` (its dtype; head size not checked).
BackendStatus backend_status(const attention::Machine& machine,
                             const attention::BackendInfo& backend);

// The catalogue with statuses, as printed by `mmgen backends --json`.
nlohmann::json backends_json(const attention::Machine& machine);
// The plain-text listing of `mmgen backends`.
std::string backends_text(const attention::Machine& machine);
// docs/attention-backends.md.
std::string backends_markdown();

int run_backends(const std::vector<std::string>& arguments);

}  // namespace mmgen::cli
