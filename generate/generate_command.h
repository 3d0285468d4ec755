// `mmgen generate`: resolves a request from flags, config file and defaults against a model
// directory, then prints it (--dry-run) or runs the pipeline: on --prompt, or on every prompt of
// --prompt-file-path with the model loaded once (a prompt that fails is reported on one line and
// the rest go on; a summary line follows; the exit status is non-zero if any failed).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "generate/pipeline_defaults.h"
#include "pipeline/attention_plan.h"
#include "pipeline/model_index.h"
#include "pipeline/registry.h"
#include "pipeline/request.h"

namespace mmgen::cli {

struct ResolvedGenerate {
  Request request;
  ModelIndex index;
  const PipelineSpec* spec = nullptr;
  Shape latent_shape;
  AttentionPlan attention;  // every component's backends and the backend config
  // The prompts of --prompt-file-path, in file order (then request.prompt is empty); empty when
  // the request has one --prompt.
  std::vector<std::string> batch_prompts;
  // The configs/ variant chosen by the transformer's size ("Wan2.1-T2V-14B"); empty when none.
  std::string defaults_variant;
  // The flow_shift that runs, where it came from, and what the size's preset suggests.
  std::optional<FlowShiftChoice> flow_shift;
  // Where each setting came from (underscore keys, as in request.settings): "command line",
  // "--config FILE", "<model>/mmgen.yaml", "configs/wan.yaml", "configs/wan.yaml (variant)" or
  // "built-in". The dry run and the output's settings carry it.
  nlohmann::json setting_sources = nlohmann::json::object();
  // The model folder's mmgen.yaml; empty when it has none.
  fs::path model_defaults_file;
  // Warnings about the request that do not stop it (a value nothing reads, video from a model that
  // draws stills): logged by the run and the dry run alike.
  std::vector<std::string> warnings;
  // Each LoRA's file name, SHA-256 and scale (pipeline/component_loras.h), for the output's
  // metadata; empty without LoRAs.
  nlohmann::json loras = nlohmann::json::array();
};

// Everything that does not need the weights' values, the attention plan included; throws Error on
// any bad input.
ResolvedGenerate resolve_generate(const std::vector<std::string>& arguments);

// The --dry-run object: pipeline, model_path, request, latent_shape, components,
// attention_backend_config, defaults_variant, flow_shift ({value, source, preset, suggested}),
// setting_sources, warnings, memory (the plan the run checks) and `prompts` (the file's prompts)
// with --prompt-file-path.
nlohmann::json dry_run_json(const ResolvedGenerate& resolved,
                            const nlohmann::json& memory_plan = nullptr);

// The checks a run makes before loading anything: what this build and CPU can do, the output
// file's name and that its folder can be written, and the memory plan. The dry run makes the same
// ones, so it refuses exactly what the run refuses. Returns the memory plan as JSON.
nlohmann::json preflight(const ResolvedGenerate& resolved);

// The request of prompt `index` of a batch: the resolved request with that prompt.
Request batch_request(const ResolvedGenerate& resolved, size_t index);

// The settings stored with an output (PNG text chunk, `.json` beside other formats): the merged
// request plus pipeline, generator and `attention_backends` (component -> {backend, source}, as
// the dry-run's `components` resolve them).
nlohmann::json output_settings(const ResolvedGenerate& resolved, const Request& request);

int run_generate(const std::vector<std::string>& arguments);

// `generate --help`; with --model-path among `arguments`, the defaults shown are that model's
// (configs/ file, its variant and the folder's mmgen.yaml), each with where it comes from.
std::string generate_help(const std::vector<std::string>& arguments = {});

}  // namespace mmgen::cli
