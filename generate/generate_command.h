// `mmgen generate`: resolves a request from flags, config file and defaults against a model
// directory, then prints it (--dry-run) or runs the pipeline.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "attention/attention_plan.h"
#include "core/tensor.h"
#include "pipeline/model_index.h"
#include "pipeline/registry.h"
#include "pipeline/request.h"

namespace mmgen::cli {

struct ResolvedGenerate {
  Request request;
  ModelIndex index;
  const PipelineSpec* spec = nullptr;
  Shape latent_shape;
  attention::AttentionPlan attention;  // every component's backends and the backend config
};

// Everything that does not need the weights' values, the attention plan included; throws Error on
// any bad input.
ResolvedGenerate resolve_generate(const std::vector<std::string>& arguments);

// The --dry-run object: pipeline, model_path, request, latent_shape, components,
// attention_backend_config.
nlohmann::json dry_run_json(const ResolvedGenerate& resolved);

int run_generate(const std::vector<std::string>& arguments);

std::string generate_help();

}  // namespace mmgen::cli
