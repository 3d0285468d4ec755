#include "generate/options.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace mmgen::cli {

using json = nlohmann::json;

const std::vector<OptionSpec>& generate_options() {
  using T = OptionType;
  static const std::vector<OptionSpec> options = {
      {"model-path", T::Path, nullptr, "diffusers model folder (holds model_index.json)"},
      {"prompt", T::String, nullptr, "what to draw"},
      {"negative-prompt", T::String, nullptr, "what to steer away from (used when guidance > 1)"},
      {"prompt-file-path", T::Path, nullptr,
       "instead of --prompt: a file of prompts, one per line (blank lines and lines starting "
       "with # skipped); one output per prompt"},
      {"height", T::Int, 480, "output height in pixels (multiple of 16)"},
      {"width", T::Int, 832, "output width in pixels (multiple of 16)"},
      {"num-frames", T::Int, 1, "frames to generate; video models need (frames - 1) % 4 == 0"},
      {"fps", T::Float, 16, "frames per second of a video output"},
      {"num-inference-steps", T::Int, 50, "denoising steps"},
      {"guidance-scale", T::Float, 5.0, "classifier-free guidance scale; 1 turns it off"},
      {"flow-shift", T::Float, nullptr,
       "overrides the scheduler's flow_shift from the model folder"},
      {"max-sequence-length", T::Int, 512, "text tokens the encoder sees (padded/truncated)"},
      {"seed", T::Int, 1024, "random seed for the initial noise (torch CPU generator compatible)"},
      {"output-path", T::Path, "outputs", "folder for outputs"},
      {"output-file-name", T::String, nullptr,
       "output file name (an extension is added if missing); with --prompt-file-path, prompt i's "
       "file gets _i before the extension (name_0.png, name_1.png, ...)"},
      {"output-format",
       T::Choice,
       nullptr,
       "png, jpg, webp, mp4 or npy (default: png for one frame, mp4 for more)",
       {"png", "jpg", "webp", "mp4", "npy"}},
      {"overwrite", T::Flag, false,
       "replace an existing output file (without it, generate refuses before any work)"},
      {"vae-tiling", T::Flag, false,
       "decode in overlapping spatial tiles: bounded memory for large frames, seams blended"},
      {"vae-tile-size", T::Int, 256,
       "tile edge in output pixels with --vae-tiling (a multiple of the VAE's 8)"},
      {"vae-tile-overlap", T::Int, 64,
       "overlap of neighbouring tiles in output pixels with --vae-tiling (a multiple of 8)"},
      {"prompt-embeds", T::Path, nullptr,
       "the prompt's embedding from `mmgen encode` (a .safetensors file; prompt_embeds.0) instead "
       "of encoding --prompt"},
      {"negative-prompt-embeds", T::Path, nullptr,
       "the negative prompt's embedding from `mmgen encode`, instead of encoding "
       "--negative-prompt"},
      {"latents", T::Path, nullptr,
       "initial noise from a .npy or .safetensors file instead of the seed"},
      {"config", T::Path, nullptr, "YAML or JSON file with any of these options", {}, false},
      {"attention-backend", T::String, nullptr,
       "attention backend for every component (see `mmgen backends`)"},
      {"attention-backend-config", T::Spec, nullptr,
       "sparse/quantized backend settings: a .json/.yaml file, a JSON object or key=value pairs"},
      {"component-attention-backends", T::Spec, nullptr,
       "per-component backends: text_encoder=torch_native,transformer=fa or a JSON object"},
      {"device", T::Choice, "auto", "where to run", {"auto", "cpu", "cuda"}},
      {"threads", T::Int, 0, "CPU threads (0: all cores)"},
      {"log-level",
       T::Choice,
       "info",
       "logging detail",
       {"trace", "debug", "info", "warn", "error", "off"}},
      {"quiet", T::Flag, false, "print errors only (same as --log-level error)"},
      {"skip-memory-check", T::Flag, false,
       "run even when the memory estimate exceeds the free memory"},
      {"dry-run", T::Flag, false,
       "resolve everything, print it as JSON, and stop before loading weights"},
  };
  return options;
}

std::string normalize_option_name(std::string_view name) {
  std::string normalized(name);
  std::replace(normalized.begin(), normalized.end(), '_', '-');
  return normalized;
}

const OptionSpec* find_option(std::string_view name) {
  const std::string normalized = normalize_option_name(name);
  for (const auto& option : generate_options())
    if (option.name == normalized) return &option;
  return nullptr;
}

namespace {

std::string describe(const json& value) {
  return value.is_string() ? value.get<std::string>() : value.dump();
}

}  // namespace

json convert_option_value(const OptionSpec& option, const json& value, const std::string& where) {
  const std::string text = describe(value);
  switch (option.type) {
    case OptionType::String:
    case OptionType::Path:
      check(value.is_string() || value.is_number(), "{}: expected text, got {}", where,
            value.dump());
      return text;
    case OptionType::Spec:  // a string, or an object / list straight from a config file
      if (value.is_object()) return value;
      check(value.is_string(), "{}: expected a string or an object, got {}", where, value.dump());
      return text;
    case OptionType::Int: {
      if (value.is_number_integer()) return value;
      // A whole float (1e3) counts; past int64's range converting it would be undefined.
      if (value.is_number_float() && std::floor(value.get<double>()) == value.get<double>() &&
          std::fabs(value.get<double>()) < 0x1p63)
        return int64_t(value.get<double>());
      check(value.is_string(), "{}: expected a whole number, got {}", where, value.dump());
      size_t used = 0;
      int64_t parsed = 0;
      try {
        parsed = std::stoll(text, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      check(used == text.size() && !text.empty(), "{}: expected a whole number, got '{}'", where,
            text);
      return parsed;
    }
    case OptionType::Float: {
      if (value.is_number()) return value.get<double>();
      check(value.is_string(), "{}: expected a number, got {}", where, value.dump());
      size_t used = 0;
      double parsed = 0;
      try {
        parsed = std::stod(text, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      check(used == text.size() && !text.empty() && std::isfinite(parsed),
            "{}: expected a number, got '{}'", where, text);
      return parsed;
    }
    case OptionType::Bool:
    case OptionType::Flag: {
      if (value.is_boolean()) return value;
      std::string lower = text;
      std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
      if (lower == "true" || lower == "1" || lower == "yes" || lower == "on") return true;
      if (lower == "false" || lower == "0" || lower == "no" || lower == "off") return false;
      fail("{}: expected true or false, got '{}'", where, text);
    }
    case OptionType::Choice: {
      check(value.is_string(), "{}: expected one of its choices, got {}", where, value.dump());
      for (auto choice : option.choices)
        if (choice == text) return text;
      std::string list;
      for (auto choice : option.choices) list += (list.empty() ? "" : ", ") + std::string(choice);
      fail("{}: '{}' is not one of {}", where, text, list);
    }
  }
  return value;
}

}  // namespace mmgen::cli
