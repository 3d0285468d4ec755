// The attention plan of one request: the backend of every attention layer of every component,
// where each choice came from, and the validated --attention-backend-config. Both the dry-run and
// the pipeline build it, so what --dry-run shows is what runs; every mistake in the flags or the
// backend config surfaces here, before any weights are read.
#pragma once

#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "attention/backend.h"
#include "attention/backend_config.h"
#include "attention/catalogue.h"
#include "attention/selector.h"
#include "pipeline/model_index.h"
#include "pipeline/request.h"

namespace mmgen {

struct AttentionPlan {
  // Every component of the model index, with or without attention layers.
  std::map<std::string, attention::ComponentChoice> components;
  // The validated settings (defaults filled in) for each DiT backend that DiT self-attention uses.
  std::map<std::string, nlohmann::json> backend_configs;
  // The backend of the main DiT ("transformer", else the first DiT component); empty when none.
  std::string main_backend;
  // What the backends load once per run (their descriptors' load_resources: sliding_tile_attn's
  // mask-strategy file in STA_inference mode), checked against the model, and handed to every
  // layer's backend (through pipeline/attention_layers.h) so no file is read again.
  attention::BackendResources resources;
  // Other tools' backend names the flags used, translated (attention::resolve_backend_name): one
  // line each, for the log.
  std::vector<std::string> notes;
  // The request's denoising steps the plan was made for.
  int64_t num_inference_steps = 0;

  // How the main DiT's self-attention splits a run of `steps` steps between its sparse backend
  // and the dense steps its settings ask for (sliding_tile_attn's skip_time_steps, vmoba_attn's
  // first_full_step, sparse_video_gen_2_attn's first_times_fp); nullopt when that backend is
  // dense.
  struct StepSplit {
    std::string backend;
    int64_t sparse = 0;
    int64_t dense = 0;
    std::string setting;  // what decides the dense steps ("skip_time_steps 15"); empty: none
    // All dense by design (DenseSteps::on_purpose: STA_searching): no warning.
    bool on_purpose = false;
  };
  std::optional<StepSplit> step_split(int64_t steps) const;

  // The settings of the main DiT backend: the dry-run's `attention_backend_config`.
  nlohmann::json config_json() const;
  // The dry-run fields of one component: attention_backend, attention_backend_source,
  // attention_backend_fallback, attention_layers (all null for components without attention).
  nlohmann::json component_json(const std::string& component) const;
};

// Builds the plan. `env` is MMGEN_ATTENTION_BACKEND (read from the environment by default); the
// global force is read as it is now. Throws Error for any bad flag, config or mask file.
AttentionPlan plan_attention(const ModelIndex& index, const Request& request,
                             const attention::Machine& machine = attention::this_machine());
AttentionPlan plan_attention(const ModelIndex& index, const Request& request,
                             const attention::Machine& machine,
                             const std::optional<std::string>& env);

// One info line per component with attention ("transformer: sliding_tile_attn (cli);
// cross-attention torch_sdpa"), a warning per fallback, and one warning when the main DiT's
// sparse backend runs dense in every step of the request (nothing in the run is sparse).
void log_attention_plan(const AttentionPlan& plan);
// The plan's notes (other tools' backend names translated), one info line each; the dry-run logs
// these alone.
void log_attention_notes(const AttentionPlan& plan);

// The plan's choice for `component` when it has attention layers; null otherwise.
const attention::ComponentChoice* planned_component(const AttentionPlan& plan,
                                                    const std::string& component);

// A text encoder's paged backend on the GPU. A plan made for --device cuda chose it against the
// GPU's kernels; a plan made for the CPU (a library caller's default plan) names a CPU design, and
// the GPU's automatic choice for `head_dim` takes its place. `component`: the text encoder's
// model_index.json key (FLUX has two: text_encoder, CLIP, and text_encoder_2, T5).
std::string gpu_text_backend(const AttentionPlan& plan, int64_t head_dim,
                             const std::string& component = "text_encoder");

}  // namespace mmgen
