// The attention-backend catalogue: every backend mmgen knows by name, in one table. Selection,
// fallbacks, config validation, `mmgen backends` and docs/attention-backends.md all read this
// table, so a backend's name, platforms, needs, fallback and settings are written down once. The
// DiT family's rows are the descriptors listed in attention/backends/all.cpp (one folder per
// backend); the paged family's rows are in catalogue.cpp.
//
// Two families share some names: the DiT family (diffusion attention over [batch, seq, heads,
// head_dim]) and the paged family (LLM-style attention over a paged KV cache, used by text
// encoders). `fa3`, `fa4` and `aiter` exist in both; in the DiT family `fa3`/`fa4` are aliases
// of `fa` (the platform decides the FlashAttention version, not the name).
//
// What this build can actually run is a separate, smaller table: compiled_kernels(). A backend
// in the catalogue without a kernel here is still known; it answers with the reason it cannot run.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "attention/model_attention.h"

namespace mmgen::attention {

enum class Family { Dit, Paged };
enum class Platform { Cuda, Rocm, Xpu, Musa, Mps, Npu, Cpu };

std::string_view family_name(Family family);  // "dit", "paged"

std::string_view platform_name(Platform platform);

// One setting of a backend's --attention-backend-config.
enum class ConfigType { Bool, Int, Float, String, Choice, Path, IntList };

struct ConfigKey {
  std::string_view name = {};
  ConfigType type = {};
  nlohmann::json default_value = {};  // null: no default
  std::string_view help = {};
  std::vector<std::string_view> choices = {};  // Choice: accepted spellings (case-insensitive)
  std::optional<double> min = {};              // numbers and list items
  std::optional<double> max = {};
  bool min_inclusive = true;
  bool max_inclusive = true;
  size_t list_length = 0;                      // IntList: exact length (0: any, at least 1)
  std::vector<std::string_view> aliases = {};  // other spellings (SGLang's code-level names)
  std::string_view required_when = {};         // "other_key=value": required in that case
};

struct BackendInfo {
  std::string_view name = {};
  Family family = {};
  std::string_view summary = {};
  std::vector<std::string_view> aliases = {};  // names normalised to this one
  std::vector<Platform> platforms = {};        // where the design can run
  std::string_view build_needs = {};           // compiled features / packages the build needs
  std::string_view gpu_arch = {};              // GPU architecture it needs ("" : none / any)
  // The oldest NVIDIA GPU (compute capability x10) with the hardware it needs, where older ones
  // lack it whatever the build (100: Blackwell's FP4 and its MMA); 0: no such limit.
  int min_gpu_sm = 0;
  std::vector<std::string_view> dtypes = {};  // input dtypes across its platforms
  std::string_view head_sizes = {};           // e.g. "any", "64, 128"
  std::string_view page_sizes = {};           // paged family: native page sizes; "" for DiT
  bool sparse = false;                        // DiT: skips key blocks (not allowed on dense layers)
  std::string_view extra_weights = {};        // weights it needs beyond a plain checkpoint
  std::string_view per_step_state = {};       // what it reads or keeps across steps / layers
  std::string_view fallback = {};             // used when this one cannot run here ("" : none)
  std::string_view paged_counterpart = {};    // DiT entries: the paged backend text encoders use
  ModelAttention model_attention = ModelAttention::Plain;  // paged entries: the models it runs
  std::vector<ConfigKey> config = {};  // its --attention-backend-config settings
  // A key that holds a group of its settings as a nested object (SGLang's `moba_config` for
  // V-MoBA); "" : none.
  std::string_view config_group = {};
  std::string_view config_group_label = {};  // what the group holds, for errors ("V-MoBA")
  // Markdown after its settings table in docs/attention-backends.md: how the settings work
  // together (STA's default windows and mask search); "" : none.
  std::string_view config_guide = {};
};

// The whole catalogue, DiT family first, in documentation order.
const std::vector<BackendInfo>& backend_catalogue();

// The entry named `name` (or one of its aliases) in `family`; null when none. Case-insensitive.
const BackendInfo* find_backend(Family family, std::string_view name);
// `name` in either family (DiT first).
bool is_known_backend(std::string_view name);
// All names (canonical and aliases) of a family, for error messages.
std::vector<std::string> backend_names(Family family, bool with_aliases = false);
// Lower-case, trimmed; the DiT family's aliases (fa3, fa4) become their canonical name.
std::string normalize_backend_name(Family family, std::string_view name);

// One kernel this build has: a backend on one platform, with what that kernel accepts.
struct KernelBuild {
  Family family = {};
  std::string_view backend = {};
  Platform platform = {};
  std::vector<std::string_view> dtypes = {};  // "fp32", "bf16", "fp16", ...
  std::vector<int> head_sizes = {};           // empty: any head size
  int min_sm = 0;                             // GPU kernels: compute capability x10 (90 = Hopper)
  int max_sm = 0;                             // 0: no upper bound
};

// The paged backends among `names` that run layers of `kind` (their entries' model_attention).
std::vector<std::string_view> paged_backends_for(const std::vector<std::string_view>& names,
                                                 ModelAttention kind);

// The kernels this build has. A DiT backend's rows come from its descriptor
// (attention/backends/<name>/), the paged family's from attention/paged/ (CUDA:
// attention/paged/cuda/); selection, auto choice, fallbacks and `mmgen backends` read this table.
const std::vector<KernelBuild>& compiled_kernels();

// The machine and build selection runs against. Tests build hypothetical ones.
struct Machine {
  Platform platform = Platform::Cpu;
  int sm = 0;                  // CUDA compute capability x10; 0 when there is no GPU
  std::string dtype = "fp32";  // the dtype the models run in
  std::vector<KernelBuild> kernels;
  std::string description;  // for messages: "cpu", "cuda sm90"
};

// This process: the CPU, this build's kernels.
const Machine& this_machine();

// The machine behind --device: "cuda" is this process's GPU (its compute capability; sm 0 when
// none is found) with this build's CUDA kernels (none without -DMMGEN_CUDA=ON); anything else is
// this_machine().
const Machine& machine_for_device(std::string_view device);

// Whether `backend` (canonical name) can run on `machine` for this dtype and head size (0:
// unknown, not checked). `reason` says why not, in words a user can act on.
struct Availability {
  bool ok = false;
  std::string reason;
};
Availability kernel_availability(const Machine& machine, Family family, std::string_view backend,
                                 std::string_view dtype, int64_t head_size);

// The best backend of `family` that runs here for this dtype and head size, by the platform's
// order of preference; throws Error when none does.
std::string auto_backend(const Machine& machine, Family family, std::string_view dtype,
                         int64_t head_size);

}  // namespace mmgen::attention
