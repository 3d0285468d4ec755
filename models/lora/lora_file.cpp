#include "models/lora/lora_file.h"

#include <cmath>
#include <map>
#include <set>
#include <string_view>

#include "core/error.h"
#include "core/file.h"
#include "core/json.h"

namespace mmgen::lora {
namespace {

enum class Part { Down, Up, BiasDelta, Alpha, FullDiff };

// The key endings a LoRA tensor has, longest first so ".lora_B.bias" is not read as ".bias".
struct Ending {
  std::string_view text;
  Part part;
};
constexpr Ending kEndings[] = {
    {".lora_A.default.weight", Part::Down},
    {".lora_B.default.weight", Part::Up},
    {".lora_A.weight", Part::Down},
    {".lora_down.weight", Part::Down},
    {".lora_B.weight", Part::Up},
    {".lora_up.weight", Part::Up},
    {".lora_B.bias", Part::BiasDelta},
    {".lora_up.bias", Part::BiasDelta},
    {".diff_b", Part::BiasDelta},
    {".alpha", Part::Alpha},
    // XLabs' FLUX files: double_blocks.0.processor.qkv_lora1.down.weight.
    {".down.weight", Part::Down},
    {".up.weight", Part::Up},
    {".diff", Part::FullDiff},
};

// Where a key's layer lives: the file's prefix says the component, and whether the rest is in
// the model's own (diffusers') names or a family's original or kohya's flattened names.
struct Prefix {
  std::string_view text, component, format;
  bool mapped;
};
constexpr Prefix kPrefixes[] = {
    {"transformer.", "transformer", "diffusers/peft", false},
    {"diffusion_model.", "transformer", "original", true},
    {"lora_unet_", "transformer", "kohya (sd-scripts)", true},
    // (A text encoder's names go through its model's lora_targets: transformers' CLIP files name
    // layers with or without "text_model.".)
    {"text_encoder_2.", "text_encoder_2", "diffusers/peft", true},
    {"text_encoder.", "text_encoder", "diffusers/peft", true},
    {"lora_te_", "text_encoder", "kohya (sd-scripts)", true},
    {"lora_te1_", "text_encoder", "kohya (sd-scripts)", true},
    // sd-scripts' FLUX and SD3 name the T5 encoder te3 (SD3's te2 is a second CLIP, which no
    // pipeline here has; an SDXL file's te2 is refused by the shapes).
    {"lora_te2_", "text_encoder_2", "kohya (sd-scripts)", true},
    {"lora_te3_", "text_encoder_2", "kohya (sd-scripts)", true},
    {"unet.", "unet", "diffusers/peft", false},
};

// The prefix `key` starts with; a key without one is the transformer's: peft's own files (the
// model's names) or XLabs' FLUX files (BFL's), so the model's names say which.
const Prefix& prefix_of(const std::string& key) {
  static constexpr Prefix kBare = {"", "transformer", "diffusers/peft", true};
  for (const Prefix& prefix : kPrefixes)
    if (key.starts_with(prefix.text)) return prefix;
  return kBare;
}

struct Pieces {
  bool mapped = false;  // named in the family's original names (or kohya's): ModuleNames maps it
  std::string down_key, up_key, bias_key, alpha_key;
  Tensor down, up, bias;
  std::optional<float> alpha;
};

// The adapter settings a diffusers file keeps in its metadata for `component`: lora_alpha (0:
// none given) and use_rslora. A pattern that gives some layers their own alpha is refused (a
// layer's rank is its matrices', so rank_pattern needs nothing).
struct AdapterSettings {
  double lora_alpha = 0;
  bool rslora = false;
};

AdapterSettings adapter_settings(const std::map<std::string, std::string>& metadata,
                                 const fs::path& path, const std::string& component) {
  AdapterSettings settings;
  const auto found = metadata.find("lora_adapter_metadata");
  if (found == metadata.end()) return settings;
  const std::string where = "LoRA " + path.string() + ": its lora_adapter_metadata";
  const nlohmann::json config = parse_json(found->second, where, "re-save the LoRA");
  check(config.is_object(), "{} is not a JSON object", where);
  const std::string prefix = component + ".";
  if (const auto pattern = config.find(prefix + "alpha_pattern"); pattern != config.end())
    check(pattern->is_null() || (pattern->is_object() && pattern->empty()),
          "{} gives some layers their own alpha ({}alpha_pattern), which mmgen does not read yet",
          where, prefix);
  if (const auto alpha = config.find(prefix + "lora_alpha"); alpha != config.end()) {
    check(alpha->is_number() && std::isfinite(alpha->get<double>()) && alpha->get<double>() > 0,
          "{}: {}lora_alpha is {}; an alpha is a number above 0", where, prefix,
          json_for_message(*alpha));
    settings.lora_alpha = alpha->get<double>();
  }
  if (const auto dora = config.find(prefix + "use_dora"); dora != config.end())
    check(!(dora->is_boolean() && dora->get<bool>()),
          "{}: the adapter is a DoRA ({}use_dora), which mmgen does not read yet", where, prefix);
  if (const auto rslora = config.find(prefix + "use_rslora"); rslora != config.end())
    settings.rslora = rslora->is_boolean() && rslora->get<bool>();
  return settings;
}

}  // namespace

LoraFile read_lora_store(const WeightStore& store, const fs::path& path,
                         const std::string& component, const ModuleNames& original_names,
                         const std::map<std::string, std::string>& metadata) {
  const AdapterSettings adapter = adapter_settings(metadata, path, component);
  LoraFile file;
  file.path = path;
  std::map<std::string, Pieces> modules;
  std::set<std::string_view> formats;
  for (const std::string& key : store.names()) {
    const Prefix& prefix = prefix_of(key);
    if (prefix.component != component) {
      ++file.other_components;
      continue;
    }
    std::string stem = key.substr(prefix.text.size());
    const bool mapped = prefix.mapped;
    formats.insert(prefix.format);
    const Ending* ending = nullptr;
    for (const Ending& candidate : kEndings)
      if (stem.size() > candidate.text.size() && stem.ends_with(candidate.text)) {
        ending = &candidate;
        break;
      }
    check(ending != nullptr,
          "LoRA {}: key '{}' is not a LoRA tensor (expected a name ending in .lora_A.weight, "
          ".lora_B.weight, .lora_down.weight, .lora_up.weight, .lora_B.bias, .alpha, .diff_b or "
          ".diff)",
          path.string(), key);
    if (ending->part == Part::FullDiff) {
      ++file.full_weight_diffs;
      continue;
    }
    stem.resize(stem.size() - ending->text.size());
    const std::string& module = stem;
    const TensorInfo& info = store.info(key);
    check(dtype_is_floating(info.dtype) && !dtype_is_blocks(info.dtype),
          "LoRA {}: '{}' is {}, expected f32, bf16 or f16", path.string(), key,
          dtype_name(info.dtype));
    Pieces& pieces = modules[(mapped ? "1" : "0") + module];
    pieces.mapped = mapped;
    const auto take = [&](std::string& slot, Tensor& tensor, size_t dims, const char* what) {
      check(slot.empty(), "LoRA {}: '{}' and '{}' are both the {} of layer {}", path.string(), slot,
            key, what, module);
      check(info.shape.size() == dims,
            "LoRA {}: '{}' has shape {}; a {} has {} dimension(s) (convolution LoRAs are not "
            "read yet)",
            path.string(), key, shape_string(info.shape), what, dims);
      slot = key;
      tensor = store.get_f32(key).contiguous();
    };
    switch (ending->part) {
      case Part::Down:
        take(pieces.down_key, pieces.down, 2, "down matrix");
        break;
      case Part::Up:
        take(pieces.up_key, pieces.up, 2, "up matrix");
        break;
      case Part::BiasDelta:
        take(pieces.bias_key, pieces.bias, 1, "bias delta");
        break;
      case Part::Alpha: {
        check(pieces.alpha_key.empty(), "LoRA {}: '{}' and '{}' are both the alpha of layer {}",
              path.string(), pieces.alpha_key, key, module);
        check(shape_numel(info.shape) == 1, "LoRA {}: '{}' has shape {}; an alpha is one number",
              path.string(), key, shape_string(info.shape));
        const float alpha = store.get_f32(key).data<float>()[0];
        check(std::isfinite(alpha) && alpha > 0, "LoRA {}: '{}' is {}; an alpha is above 0",
              path.string(), key, alpha);
        pieces.alpha_key = key;
        pieces.alpha = alpha;
        break;
      }
      case Part::FullDiff:
        break;
    }
  }
  // The key prefixes this component's layers would have, for the message.
  std::string expected;
  for (const Prefix& prefix : kPrefixes)
    if (prefix.component == component)
      expected += (expected.empty() ? "" : ", ") + std::string(prefix.text) + "*";
  check(!modules.empty(),
        "LoRA {}: no LoRA tensor for the {} (keys named {}); is this a LoRA for another model?",
        path.string(), component, expected);
  for (const std::string_view format : formats)
    file.format += (file.format.empty() ? "" : " and ") + std::string(format);
  for (auto& [slot, pieces] : modules) {
    const std::string stem = slot.substr(1);
    LoraLayer layer;
    check(pieces.down.defined() == pieces.up.defined(),
          "LoRA {}: '{}' has no {} matrix beside it; the file is incomplete", path.string(),
          pieces.down.defined() ? pieces.down_key : pieces.up_key,
          pieces.down.defined() ? "up" : "down");
    if (pieces.down.defined()) {
      const int64_t rank = pieces.down.size(0);
      check(rank > 0 && pieces.up.size(1) == rank,
            "LoRA {}: '{}' is {} and '{}' is {}: their ranks differ", path.string(),
            pieces.down_key, shape_string(pieces.down.shape()), pieces.up_key,
            shape_string(pieces.up.shape()));
      if (pieces.alpha)
        layer.alpha_over_rank = *pieces.alpha / float(rank);
      else if (adapter.lora_alpha > 0)
        layer.alpha_over_rank =
            float(adapter.lora_alpha / (adapter.rslora ? std::sqrt(double(rank)) : double(rank)));
      layer.key = pieces.down_key;
    } else {
      check(!pieces.alpha, "LoRA {}: '{}' has no down and up matrices to scale", path.string(),
            pieces.alpha_key);
      layer.key = pieces.bias_key;
    }
    if (pieces.bias.defined() && pieces.up.defined())
      check(pieces.bias.size(0) == pieces.up.size(0),
            "LoRA {}: '{}' has {} values but '{}' makes {} outputs", path.string(), pieces.bias_key,
            pieces.bias.size(0), pieces.up_key, pieces.up.size(0));
    std::vector<LoraTarget> targets;
    if (pieces.mapped) targets = original_names(stem);
    if (targets.empty()) targets = {{stem, {}}};
    const int64_t outputs = pieces.up.defined() ? pieces.up.size(0) : pieces.bias.size(0);
    for (const LoraTarget& target : targets) {
      // A fused layer's rows for this module: the up matrix's and the bias delta's.
      const auto rows = [&](const Tensor& whole) {
        if (!whole.defined() || target.rows.empty()) return whole;
        int64_t count = 0;
        for (const WeightStore::RowRange& range : target.rows) {
          check(range.begin >= 0 && range.count > 0 && range.begin + range.count <= outputs,
                "LoRA {}: '{}' makes {} outputs, fewer than the fused layer {} has; is the LoRA "
                "made for another model?",
                path.string(), layer.key, outputs, stem);
          count += range.count;
        }
        Shape shape = whole.shape();
        shape[0] = count;
        Tensor part = Tensor::empty(shape);
        int64_t at = 0;
        for (const WeightStore::RowRange& range : target.rows) {
          part.slice(0, at, at + range.count)
              .copy_from(whole.slice(0, range.begin, range.begin + range.count));
          at += range.count;
        }
        return part;
      };
      LoraLayer piece = layer;
      piece.module = target.module;
      piece.down = pieces.down;
      piece.up = rows(pieces.up);
      piece.bias_delta = rows(pieces.bias);
      file.layers.push_back(std::move(piece));
    }
  }
  return file;
}

std::vector<std::string> lora_components(const std::vector<std::string>& keys) {
  std::set<std::string> components;
  for (const std::string& key : keys) components.insert(std::string(prefix_of(key).component));
  return {components.begin(), components.end()};
}

const char* lora_mode_name(LoraMode mode) {
  return mode == LoraMode::Merge ? "merge" : mode == LoraMode::Runtime ? "runtime" : "auto";
}

LoraMode lora_mode_named(const std::string& name) {
  return name == "merge" ? LoraMode::Merge : name == "runtime" ? LoraMode::Runtime : LoraMode::Auto;
}

void check_lora_path(const fs::path& path) {
  check(path.extension() == ".safetensors",
        "--lora-path {}: expected a .safetensors file (the format LoRAs are shared in)",
        path.string());
  check_regular_file(path, "--lora-path");
}

LoraFile read_lora_file(const fs::path& path, const std::string& component,
                        const ModuleNames& original_names) {
  check_lora_path(path);
  return read_lora_store(WeightStore::open_file(path), path, component, original_names,
                         SafetensorsFile::open(path).metadata());
}

}  // namespace mmgen::lora
