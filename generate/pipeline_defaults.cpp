#include "generate/pipeline_defaults.h"

#include <fmt/format.h>

#include <cctype>

#include "core/config_fields.h"
#include "core/error.h"
#include "core/yaml.h"
#include "pipeline/schedulers/scheduler.h"

namespace mmgen::cli {

using json = nlohmann::json;

namespace {

// The keys of a variant that test the model rather than set an option.
const std::set<std::string> kVariantTests = {"transformer_parameters", "transformer_config",
                                             "model_name_contains"};

std::string lowercase_ascii(std::string text) {
  for (char& c : text) c = char(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

void refuse_flow_shift(const json& values, const std::string& where) {
  for (const char* key : {"flow_shift", "flow-shift"})
    check(!values.contains(key),
          "{}: a defaults file may not set flow_shift (it would replace the model's "
          "scheduler_config.json value); put it in flow_shift_presets",
          where);
}

bool in_range(const json& range, int64_t value, const std::string& where) {
  check(range.is_array() && range.size() == 2 && (range[0].is_number() || range[0].is_null()) &&
            (range[1].is_number() || range[1].is_null()),
        "{}: transformer_parameters must be [from, to] (numbers or null)", where);
  const double v = double(value);
  return (range[0].is_null() || v >= range[0].get<double>()) &&
         (range[1].is_null() || v < range[1].get<double>());
}

// Whether every test the variant lists holds for the model.
bool variant_matches(const json& variant, const ModelFacts& facts, const std::string& where) {
  bool tested = false;
  if (variant.contains("transformer_parameters")) {
    tested = true;
    if (!in_range(variant["transformer_parameters"], facts.transformer_parameters, where))
      return false;
  }
  if (variant.contains("transformer_config")) {
    tested = true;
    const json& wanted = variant["transformer_config"];
    check(wanted.is_object(), "{}: transformer_config must map config.json keys to values", where);
    for (auto it = wanted.begin(); it != wanted.end(); ++it)
      if (facts.transformer_config.value(it.key(), json()) != *it) return false;
  }
  if (variant.contains("model_name_contains")) {
    tested = true;
    const json& names = variant["model_name_contains"];
    check(names.is_array() && !names.empty(), "{}: model_name_contains must be a list of texts",
          where);
    const std::string model = lowercase_ascii(facts.model_name);
    bool any = false;
    for (const auto& name : names) {
      check(name.is_string(), "{}: model_name_contains must be a list of texts", where);
      any = any || model.find(lowercase_ascii(name.get<std::string>())) != std::string::npos;
    }
    if (!any) return false;
  }
  check(tested,
        "{}: needs transformer_parameters [from, to], transformer_config or model_name_contains",
        where);
  return true;
}

}  // namespace

int64_t wan_transformer_parameters(const json& config, const std::string& where) {
  // In double: each value may be up to Limits::kMaxConfigInteger, and d² then overflows int64.
  const double heads = double(config_integer(config, "num_attention_heads", 40, where, 1));
  const double head_dim = double(config_integer(config, "attention_head_dim", 128, where, 1));
  const double layers = double(config_integer(config, "num_layers", 40, where, 1));
  const double ffn = double(config_integer(config, "ffn_dim", 13824, where, 1));
  const double d = heads * head_dim;
  // Per block: self- and cross-attention (q, k, v, out: 4 d x d with biases each), the
  // feed-forward (d x ffn in and out), norms and modulation.
  const double parameters = layers * (8 * (d * d + d) + 2 * d * ffn + ffn + 7 * d);
  return parameters >= 9e18 ? int64_t(9e18) : int64_t(parameters);
}

PipelineDefaults pipeline_defaults_from_yaml(const std::string& yaml, const std::string& where,
                                             int64_t transformer_parameters) {
  return pipeline_defaults_from_yaml(yaml, where,
                                     ModelFacts{.transformer_parameters = transformer_parameters});
}

PipelineDefaults pipeline_defaults_from_yaml(const std::string& yaml, const std::string& where,
                                             const ModelFacts& facts) {
  json document = yaml_to_json(yaml, where);
  if (document.is_null()) document = json::object();
  check(document.is_object(), "{}: expected a mapping of option names to values", where);
  PipelineDefaults defaults;
  defaults.transformer_parameters = facts.transformer_parameters;
  json variants = json::array();
  if (document.contains("variants")) {
    variants = document["variants"];
    check(variants.is_array(), "{}: variants must be a list", where);
    document.erase("variants");
  }
  if (document.contains("flow_shift_presets")) {
    defaults.flow_shift_presets = document["flow_shift_presets"];
    check(defaults.flow_shift_presets.is_array(), "{}: flow_shift_presets must be a list", where);
    for (const auto& preset : defaults.flow_shift_presets)
      check(preset.is_object() && preset.value("flow_shift", json()).is_number() &&
                (preset.value("max_pixels", json()).is_number() ||
                 preset.value("max_pixels", json()).is_null()),
            "{}: each flow_shift preset needs a name, max_pixels (or null) and flow_shift", where);
    document.erase("flow_shift_presets");
  }
  refuse_flow_shift(document, where);
  json merged = document;
  for (const auto& variant : variants) {
    const std::string name = variant.value("name", std::string("unnamed"));
    const std::string variant_where = fmt::format("{}: variant {}", where, name);
    check(variant.is_object(), "{}: each variant must be a mapping", variant_where);
    refuse_flow_shift(variant, variant_where);
    if (!variant_matches(variant, facts, variant_where)) continue;
    defaults.variant = name;
    for (const auto& [key, value] : variant.items())
      if (key != "name" && !kVariantTests.count(key)) {
        merged[key] = value;
        defaults.variant_keys.insert(normalize_option_name(key));
      }
    break;
  }
  defaults.layer = settings_from_document(merged, where);
  return defaults;
}

PipelineDefaults load_pipeline_defaults(const PipelineSpec& spec, const ModelIndex& index) {
  ModelFacts facts;
  facts.model_name = index.root.string();
  if (index.has("transformer") &&
      fs::exists(component_config_path(index.component("transformer")))) {
    facts.transformer_config = index.config("transformer");
    facts.transformer_parameters = wan_transformer_parameters(
        facts.transformer_config, component_config_path(index.component("transformer")).string());
  }
  return pipeline_defaults_from_yaml(embedded_config(spec.defaults_file),
                                     "configs/" + spec.defaults_file, facts);
}

json ConfiguredDefault::to_json() const {
  json out = {{"pipeline", pipeline}, {"file", file}, {"value", value}};
  out["variants"] = json::object();
  for (const auto& variant : variants) out["variants"][variant[0].get<std::string>()] = variant[1];
  return out;
}

std::vector<ConfiguredDefault> configured_defaults(const OptionSpec& option) {
  std::vector<ConfiguredDefault> found;
  const auto value_of = [&](const json& values) {
    for (auto it = values.begin(); it != values.end(); ++it)
      if (normalize_option_name(it.key()) == option.name) return *it;
    return json();
  };
  for (const PipelineSpec& spec : pipeline_registry()) {
    const std::string file = "configs/" + spec.defaults_file;
    const json document = yaml_to_json(embedded_config(spec.defaults_file), file);
    if (!document.is_object()) continue;
    ConfiguredDefault entry{spec.class_name, file, value_of(document), json::array()};
    if (document.contains("variants") && document["variants"].is_array())
      for (const auto& variant : document["variants"]) {
        if (!variant.is_object()) continue;
        const json value = value_of(variant);
        if (!value.is_null())
          entry.variants.push_back({variant.value("name", std::string("unnamed")), value});
      }
    if (!entry.value.is_null() || !entry.variants.empty()) found.push_back(entry);
  }
  return found;
}

std::string default_value_text(const json& value, bool markdown) {
  std::string text = value.is_string() ? value.get<std::string>() : value.dump();
  if (text.size() > 20) {
    size_t cut = 20;  // back to the start of a UTF-8 character
    while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
    text = text.substr(0, cut) + "...";
  }
  if (value.is_string() &&
      (text.empty() || text.find(' ') != std::string::npos || text.size() > 20))
    text = "\"" + text + "\"";
  return markdown ? "`" + text + "`" : text;
}

std::string default_description(const OptionSpec& option, bool markdown) {
  const bool flag = option.type == OptionType::Flag;
  const std::string builtin = flag ? (markdown ? "off" : "")
                                   : (option.builtin_default.is_null()
                                          ? std::string()
                                          : default_value_text(option.builtin_default, markdown));
  std::string text;
  for (const ConfiguredDefault& entry : configured_defaults(option)) {
    std::string values;
    if (!entry.value.is_null()) values = default_value_text(entry.value, markdown);
    for (const auto& variant : entry.variants)
      values +=
          fmt::format("{}{} for {}", values.empty() ? "" : ", ",
                      default_value_text(variant[1], markdown), variant[0].get<std::string>());
    text += fmt::format("{}{} from {} ({})", text.empty() ? "" : "; ", values,
                        markdown ? "`" + entry.file + "`" : entry.file, entry.pipeline);
  }
  if (text.empty()) return builtin;
  return text + "; " + (builtin.empty() ? std::string("none") : builtin) + " otherwise";
}

json FlowShiftChoice::to_json() const {
  return {{"value", value},
          {"source", source},
          {"preset", preset.empty() ? json() : json(preset)},
          {"suggested", suggested ? json(*suggested) : json()}};
}

std::optional<FlowShiftChoice> flow_shift_choice(const Request& request, const ModelIndex& index,
                                                 const json& presets,
                                                 const std::string& flow_shift_source) {
  if (!index.has("scheduler")) return std::nullopt;
  const json& scheduler = index.config("scheduler");
  // The key of the class model_index.json names, the one that runs (a config saved for another
  // class may hold the other key).
  const std::string key = schedulers::flow_shift_key(index.component("scheduler").class_name);
  std::optional<double> configured;
  if (scheduler.contains(key) && scheduler[key].is_number())
    configured = scheduler[key].get<double>();
  if (!configured && !request.flow_shift) return std::nullopt;
  FlowShiftChoice choice;
  const int64_t pixels = request.height * request.width;
  for (const auto& preset : presets) {
    const json& max = preset["max_pixels"];
    if (max.is_null() || double(pixels) <= max.get<double>()) {
      choice.preset = preset.value("name", std::string());
      choice.suggested = preset["flow_shift"].get<double>();
      break;
    }
  }
  const std::string size = fmt::format("{}x{}", request.width, request.height);
  const std::string suggestion =
      choice.suggested
          ? fmt::format("the {} preset suggests {} for {}", choice.preset, *choice.suggested, size)
          : std::string("no preset applies");
  if (request.flow_shift) {
    choice.value = *request.flow_shift;
    choice.source = flow_shift_source;
    choice.explanation = fmt::format(
        "flow_shift {} from {} (scheduler_config.json has {}; {})", choice.value, choice.source,
        configured ? fmt::format("{}", *configured) : std::string("none"), suggestion);
  } else {
    choice.value = *configured;
    choice.source = "scheduler_config.json";
    if (choice.suggested && *choice.suggested != choice.value)
      choice.explanation = fmt::format(
          "flow_shift {} from the model's scheduler_config.json, which always wins over presets; "
          "{} (pass --flow-shift {} to use it)",
          choice.value, suggestion, *choice.suggested);
    else
      choice.explanation = fmt::format("flow_shift {} from the model's scheduler_config.json ({})",
                                       choice.value, suggestion);
  }
  return choice;
}

}  // namespace mmgen::cli
