// The pipelines mmgen runs, one registration each, written in the pipeline's folder
// (pipeline/<name>/<name>_spec.cpp: its components, request checks, latent shape, loader, memory
// estimate and notes); pipeline_registry() (pipeline/registry.cpp) lists them. Adding a pipeline is
// its folder and a line here and there.
#pragma once

#include "pipeline/registry.h"

namespace mmgen {

PipelineSpec wan_pipeline_spec();
PipelineSpec zimage_pipeline_spec();
PipelineSpec flux_pipeline_spec();
PipelineSpec qwen_image_pipeline_spec();

}  // namespace mmgen
