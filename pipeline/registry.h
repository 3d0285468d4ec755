// The pipelines mmgen knows, keyed by model_index.json's `_class_name`: which components each
// needs, which defaults file in configs/ it uses, and how a request maps to its latent shape.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "pipeline/attention_plan.h"
#include "pipeline/component_classes.h"
#include "pipeline/memory_estimate.h"
#include "pipeline/model_index.h"
#include "pipeline/model_inventory.h"
#include "pipeline/request.h"

namespace mmgen {

// A pipeline whose components are loaded.
struct PipelineRunner {
  // Runs one request at a time (the prompt and anything else may change between calls; the
  // attention plan it was loaded with stays); returns frames [F, H, W, 3] in [0, 1].
  std::function<Tensor(const Request&)> run;
  // Optional: encodes the prompts of several requests in one pass of the text encoder, ahead of
  // their run() calls, which then take the stored embeddings (a batch from a prompt file).
  std::function<void(const std::vector<Request>&)> encode_ahead;
  Tensor operator()(const Request& request) const { return run(request); }
};

// One component a pipeline loads: its model_index.json key and the classes it can be.
struct ComponentSlot {
  std::string name;  // "scheduler", "text_encoder", ...
  ComponentKind kind;
  std::vector<std::string> classes;  // of component_classes(), the ones this pipeline runs there
};

struct PipelineSpec {
  std::string class_name;
  std::string defaults_file;  // a file of configs/, embedded in the binary
  // Every component it loads, each required. A model listing another component (Wan2.2's
  // transformer_2) is refused rather than run without it.
  std::vector<ComponentSlot> components;
  // Checks the request against what the pipeline can do; throws Error before any work starts.
  std::function<void(const Request&, const ModelIndex&)> validate;
  // The initial latent's shape for a request (reads component configs, never weights).
  std::function<Shape(const Request&, const ModelIndex&)> latent_shape;
  // Loads the components once, with the attention backends of the plan made for the requests
  // it will run; a batch of prompts shares one load.
  std::function<PipelineRunner(const ModelIndex&, const AttentionPlan&)> load;
  // The host memory a request needs (pipeline/memory_estimate.h), from headers and configs only.
  std::function<MemoryEstimate(const Request&, const ModelIndex&, const ModelInventory&)>
      estimate_memory;
  // With --max-gpu-memory, its text encoder and transformer each leave the GPU after their stage
  // (otherwise every component stays resident and the limit only refuses what exceeds it).
  bool stage_offload = false;
  // The weights it keeps on the GPU (pipeline/memory_estimate.h); empty where not estimated yet.
  std::function<GpuWeights(const Request&, const ModelIndex&, const ModelInventory&)>
      estimate_gpu_weights;
  // One warning line per value the request sets that this pipeline does not read (or reads only
  // with another option), naming the option that does act; only settings in request.given count.
  std::function<std::vector<std::string>(const Request&)> unused_settings;
  // How the run's first log line states its guidance ("guidance 5", "true CFG 4 ...").
  std::function<std::string(const Request&)> guidance_summary;
  // What it can spread over several GPUs (--gpus N): its transformer's tokens (Ulysses sequence
  // parallel), and its two guidance branches on two halves of the GPUs (--cfg-parallel).
  struct Parallel {
    bool sequence = false;
    bool cfg = false;
  } parallel;
  // The components a LoRA file's keys are applied to (pipeline/component_loras.h), as diffusers'
  // loader mixin for the pipeline lists them; keys for others are counted and left out.
  std::vector<std::string> lora_components = {"transformer"};
};

const std::vector<PipelineSpec>& pipeline_registry();
// The class names of the registry's pipelines for which `has` holds, joined by ", ".
std::string pipelines_where(const std::function<bool(const PipelineSpec&)>& has);
// The spec for `class_name`; an unknown name is an error listing the known ones.
const PipelineSpec& find_pipeline(const std::string& class_name, const fs::path& where);
// Checks model_index.json against the pipeline before anything is loaded: every component it lists
// is one the pipeline loads, of a class it supports there, and each component the pipeline needs
// is present with its folder. Each refusal is one line naming what is supported.
void check_components(const PipelineSpec& spec, const ModelIndex& index);

// The YAML text of a configs/ file compiled into the binary; throws if there is none.
const std::string& embedded_config(const std::string& file_name);

}  // namespace mmgen
