// A pipeline's defaults from its configs/ file: the flat sampling options, the variant chosen by
// the transformer's size, and the flow_shift presets by output size. Presets only suggest: the
// flow_shift that runs is --flow-shift (command line or --config) when given, else the model's
// scheduler_config.json; flow_shift_choice() says which and why, for the log and the dry-run.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>

#include "generate/settings.h"
#include "pipeline/model_index.h"
#include "pipeline/registry.h"
#include "pipeline/request.h"

namespace mmgen::cli {

struct PipelineDefaults {
  SettingsLayer layer = nlohmann::json::object();  // the options, the variant's merged in
  std::string variant;                             // its name; empty when none applies
  std::set<std::string> variant_keys;              // the options the variant set (dashes)
  int64_t transformer_parameters = 0;              // from the transformer's config.json
  nlohmann::json flow_shift_presets = nlohmann::json::array();
};

// What a configs/ variant may recognise a published checkpoint by, read from configs alone (no
// weights): the transformer's size, values of its config.json (FLUX.1-schnell has no guidance
// embedder), and the model's folder or Hugging Face id (Z-Image-Turbo has the base model's
// configs). A variant lists one or more of `transformer_parameters: [from, to]`,
// `transformer_config: {key: value}` and `model_name_contains: [text, ...]` (case-insensitive,
// any one); the first variant all of whose tests hold adds its values.
struct ModelFacts {
  int64_t transformer_parameters = 0;
  nlohmann::json transformer_config = nlohmann::json::object();
  std::string model_name;  // the model folder's path (a cached id's folder names the id)
};

// Reads configs/<spec.defaults_file> (embedded in the binary) for the model in `index`. The file
// may not set flow_shift (it would silently replace the model's value): that is an Error.
PipelineDefaults load_pipeline_defaults(const PipelineSpec& spec, const ModelIndex& index);
// The same from YAML text (tests); `where` names it in errors.
PipelineDefaults pipeline_defaults_from_yaml(const std::string& yaml, const std::string& where,
                                             const ModelFacts& facts);
PipelineDefaults pipeline_defaults_from_yaml(const std::string& yaml, const std::string& where,
                                             int64_t transformer_parameters);

// Parameters of a Wan transformer from its config (blocks' attention, cross-attention and
// feed-forward weights, which are all but a fraction of a percent of it).
int64_t wan_transformer_parameters(const nlohmann::json& transformer_config,
                                   const std::string& where = "transformer config");

// What the pipelines' configs/ files set for one option, so that --help, `mmgen options` and
// docs/configuration.md show the defaults that actually apply rather than the built-in ones alone.
struct ConfiguredDefault {
  std::string pipeline;     // "WanPipeline"
  std::string file;         // "configs/wan.yaml"
  nlohmann::json value;     // set for every model of the pipeline; null when only variants set it
  nlohmann::json variants;  // variant name -> value, in file order (an array of [name, value])
  nlohmann::json to_json() const;
};
std::vector<ConfiguredDefault> configured_defaults(const OptionSpec& option);

// The option's default in words: "81 from configs/wan.yaml (WanPipeline); 1 otherwise", "480 for
// Wan2.1-T2V-1.3B, 720 for Wan2.1-T2V-14B from configs/wan.yaml (WanPipeline); 480 otherwise",
// "1024" (no pipeline sets it); empty when there is none. `markdown` puts values and files in
// code spans. Long texts are cut to their first 20 characters.
std::string default_description(const OptionSpec& option, bool markdown = false);
// A default value as --help shows it: cut to 20 characters, quoted when it holds spaces.
std::string default_value_text(const nlohmann::json& value, bool markdown = false);

struct FlowShiftChoice {
  double value = 0;
  std::string source;               // "--flow-shift", "--config FILE" or "scheduler_config.json"
  std::optional<double> suggested;  // by the preset for this size, when one applies
  std::string preset;               // its name
  std::string explanation;          // one sentence for the log
  nlohmann::json to_json() const;
};

// `flow_shift_source` names where an explicit request.flow_shift came from. nullopt when the
// scheduler has no flow shift setting.
std::optional<FlowShiftChoice> flow_shift_choice(const Request& request, const ModelIndex& index,
                                                 const nlohmann::json& presets,
                                                 const std::string& flow_shift_source);

}  // namespace mmgen::cli
