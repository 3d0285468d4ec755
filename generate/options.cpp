#include "generate/options.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/json.h"
#include "core/text.h"

namespace mmgen::cli {

using json = nlohmann::json;

namespace {

const std::vector<OptionSpec>& option_table() {
  using T = OptionType;
  using C = Command;
  static const std::vector<OptionSpec> options = {
      {"model-path",
       T::Path,
       nullptr,
       "diffusers model folder (holds model_index.json), or a Hugging Face model id (org/name) "
       "in the local Hugging Face cache",
       {},
       true,
       {C::Generate, C::Encode},
       false,
       "DIR"},
      {"revision",
       T::String,
       nullptr,
       "with a Hugging Face model id (org/name) as --model-path: the cached snapshot's branch or "
       "commit [default: main]",
       {},
       true,
       {C::Generate, C::Encode},
       false,
       "REV"},
      {"prompt", T::String, nullptr, "what to draw"},
      {"negative-prompt", T::String, nullptr, "what to steer away from (used when guidance is on)"},
      {"prompt-file-path",
       T::Path,
       nullptr,
       "instead of --prompt: a file of prompts, one per line (blank lines and lines starting "
       "with # skipped); one output per prompt (encode: after the --prompt values)",
       {},
       true,
       {C::Generate, C::Encode},
       false,
       "FILE"},
      {"height", T::Int, 480, "output height in pixels (multiple of 16)"},
      {"width", T::Int, 832, "output width in pixels (multiple of 16)"},
      {"num-frames", T::Int, 1, "frames to generate; video models need (frames - 1) % 4 == 0"},
      {"fps", T::Float, 16, "frames per second of a video output"},
      {"num-inference-steps", T::Int, 50, "denoising steps"},
      {"guidance-scale", T::Float, 5.0,
       "classifier-free guidance scale; off at 1 for Wan, at 0 for Z-Image; FLUX.1-dev takes it as "
       "an input (guidance-distilled, one forward per step)"},
      {"true-cfg-scale", T::Float, 1.0,
       "true classifier-free guidance with --negative-prompt for FLUX and Qwen-Image (a second "
       "forward per step); off at 1"},
      {"cfg-truncation", T::Float, 1.0,
       "Z-Image: guidance turns off once the normalised time (1000 - t)/1000 passes this "
       "(diffusers' cfg_truncation); 1 or more: never"},
      {"cfg-normalization", T::Float, 0.0,
       "Z-Image: the guided prediction's norm is capped at this multiple of the conditional "
       "one's (diffusers' cfg_normalization; 0: off, 1: diffusers' True)"},
      {"flow-shift", T::Float, nullptr,
       "overrides the scheduler's flow_shift from the model folder"},
      {"max-sequence-length", T::Int, 512, "text tokens the encoder sees (padded/truncated)"},
      {"seed", T::Int, 1024,
       "random seed for the initial noise (torch CPU generator compatible); -1 draws a random one, "
       "which is logged and stored with the output"},
      {"output-path", T::Path, "outputs", "folder for outputs"},
      {"output-file-name", T::String, nullptr,
       "output file name; its extension (.png, .jpg/.jpeg, .webp, .mp4, .npy) picks the format, "
       "without one the format's is added; with --prompt-file-path, prompt i's file gets _i before "
       "the extension (name_0.png, name_1.png, ...)"},
      {"output-format",
       T::Choice,
       nullptr,
       "png, jpg (or jpeg), webp, mp4 or npy (default: --output-file-name's extension, else png "
       "for one frame, mp4 for more)",
       {"png", "jpg", "jpeg", "webp", "mp4", "npy"}},
      {"overwrite",
       T::Flag,
       false,
       "replace an existing output file (without it, generate refuses before any work); "
       "command line only: a config file may not replace files",
       {},
       false},
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
      {.name = "lora-path",
       .type = T::Path,
       .builtin_default = nullptr,
       .help = "a LoRA (.safetensors, in diffusers/peft names or, for Wan, the original names "
               "ComfyUI and lightx2v files use) applied to the transformer (see --lora-mode); "
               "repeat for several",
       .repeatable = true,
       .value_name = "FILE"},
      {.name = "lora-scale",
       .type = T::Float,
       .builtin_default = nullptr,
       .help = "the scale of each --lora-path, matched by order [default: 1.0 each]",
       .repeatable = true,
       .value_name = "X"},
      {"lora-mode",
       T::Choice,
       "auto",
       "how the LoRAs apply: merge (added into the weights as they load; no cost per step), "
       "runtime (the base weights untouched, each product adds its LoRAs' low-rank product as "
       "it runs), auto (runtime where a weight the LoRAs change is FP8 or GGUF, else merge)",
       {"auto", "merge", "runtime"}},
      {"config", T::Path, nullptr, "YAML or JSON file with any of these options", {}, false},
      {"attention-backend", T::String, nullptr,
       "attention backend for every component (see `mmgen backends`)"},
      {"attention-backend-config",
       T::Spec,
       nullptr,
       "sparse/quantized backend settings: a .json/.yaml file, a JSON object or key=value pairs",
       {},
       true,
       {C::Generate, C::Attention},
       false,
       "SPEC"},
      {"component-attention-backends",
       T::Spec,
       nullptr,
       "per-component backends: text_encoder=torch_native,transformer=fa or a JSON object "
       "(encode: the encoded component only)",
       {},
       true,
       {C::Generate, C::Encode},
       false,
       "SPEC"},
      {"device", T::Choice, "auto", "where to run", {"auto", "cpu", "cuda"}},
      {"threads",
       T::Int,
       0,
       "CPU threads (0: all cores)",
       {},
       true,
       {C::Generate, C::Attention},
       false,
       "N"},
      {"gpus",
       T::Int,
       1,
       "GPUs for one generation (--device cuda, WanPipeline): the token sequence is split over "
       "them (Ulysses sequence parallel), one process per GPU over NCCL",
       {},
       true,
       {C::Generate},
       false,
       "N"},
      {"cfg-parallel", T::Flag, false,
       "with --gpus N (even) and guidance: the prompt's and the negative prompt's forwards run on "
       "two halves of the GPUs at once"},
      {"cpu-matmul-precision",
       T::Choice,
       "fp32",
       "CPU linear layers: fp32 (exact, diffusers' numbers) or bf16 (input and weights rounded to "
       "bfloat16, float32 sums; about 2x faster, needs AVX-512 BF16)",
       {"fp32", "bf16"}},
      {"gpu-matmul-precision",
       T::Choice,
       "bf16",
       "GPU linear layers of Wan's transformer blocks: bf16 (diffusers' bf16 numbers) or fp8 "
       "(e4m3 on Hopper's tensor cores, one scale per output channel and per token; faster, with "
       "the error docs/performance-history.md measures)",
       {"bf16", "fp8"}},
      {.name = "max-gpu-memory",
       .type = T::String,
       .builtin_default = nullptr,
       .help = "at most this much GPU memory for mmgen's tensors (24GiB, 20000M): Wan's text "
               "encoder and transformer then each leave the GPU after their stage (see "
               "--gpu-offload), and a request that needs more stops in one line (the CUDA context "
               "and library workspaces are outside the limit)",
       .value_name = "SIZE"},
      {.name = "gpu-offload",
       .type = T::Choice,
       .builtin_default = "auto",
       .help = "how Wan keeps its weights on the GPU: none (all resident), stages (the text "
               "encoder and the transformer each leave the GPU after their stage), blocks (stages, "
               "and the transformer's blocks stream in from page-locked host memory, two on the "
               "GPU at a time, each copied in while the one before runs), auto (none without "
               "--max-gpu-memory; under it stages, and blocks when the transformer would take "
               "more than 3/4 of the limit)",
       .choices = {"auto", "none", "stages", "blocks"},
       .value_name = "MODE"},
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

      // encode: the text components alone.
      {.name = "component",
       .type = T::String,
       .builtin_default = "text_encoder",
       .help = "the text encoder to run (a model_index.json component)",
       .commands = {C::Encode},
       .value_name = "NAME"},
      {.name = "prompt",
       .type = T::String,
       .builtin_default = nullptr,
       .help = "a prompt to encode (repeat for several)",
       .commands = {C::Encode},
       .repeatable = true,
       .value_name = "TEXT"},
      {.name = "page-size",
       .type = T::Int,
       .builtin_default = 1,
       .help = "tokens per KV-cache page of the paged attention",
       .commands = {C::Encode},
       .value_name = "N"},
      {.name = "max-sequence-length",
       .type = T::Int,
       .builtin_default = nullptr,
       .help = "text tokens the encoder sees (default: the pipeline's, else 512)",
       .commands = {C::Encode},
       .value_name = "N"},
      {.name = "out",
       .type = T::Path,
       .builtin_default = nullptr,
       .help = "the .safetensors file to write (prompt_embeds.0, .1, ...); required",
       .commands = {C::Encode},
       .value_name = "FILE"},

      // attention: one backend call on .npy inputs.
      {.name = "backend",
       .type = T::String,
       .builtin_default = nullptr,
       .help = "DiT attention backend (see `mmgen backends`); required",
       .commands = {C::Attention},
       .value_name = "NAME"},
      {.name = "q",
       .type = T::Path,
       .builtin_default = nullptr,
       .help = "queries, float32 [batch, seq, heads, head_dim]; required",
       .commands = {C::Attention},
       .value_name = "Q.npy"},
      {.name = "k",
       .type = T::Path,
       .builtin_default = nullptr,
       .help = "keys, float32 [batch, kv_seq, heads, head_dim]; required",
       .commands = {C::Attention},
       .value_name = "K.npy"},
      {.name = "v",
       .type = T::Path,
       .builtin_default = nullptr,
       .help = "values, float32 like the keys; required",
       .commands = {C::Attention},
       .value_name = "V.npy"},
      {.name = "out",
       .type = T::Path,
       .builtin_default = nullptr,
       .help = "where to write the output [batch, seq, heads, head_dim]; required",
       .commands = {C::Attention},
       .value_name = "OUT.npy"},
      {.name = "grid",
       .type = T::String,
       .builtin_default = nullptr,
       .help = "latent grid after patchify of the video tokens (first in the sequence)",
       .commands = {C::Attention},
       .value_name = "T,H,W"},
      {.name = "text-len",
       .type = T::Int,
       .builtin_default = 0,
       .help = "text tokens after the video tokens",
       .commands = {C::Attention},
       .value_name = "N"},
      {.name = "step",
       .type = T::Int,
       .builtin_default = 0,
       .help = "denoising step, 0-based",
       .commands = {C::Attention},
       .value_name = "I"},
      {.name = "num-steps",
       .type = T::Int,
       .builtin_default = 1,
       .help = "denoising steps",
       .commands = {C::Attention},
       .value_name = "N"},
      {.name = "timestep",
       .type = T::Float,
       .builtin_default = 0,
       .help = "the scheduler's timestep value",
       .commands = {C::Attention},
       .value_name = "T"},
      {.name = "layer",
       .type = T::Int,
       .builtin_default = 0,
       .help = "transformer block, 0-based",
       .commands = {C::Attention},
       .value_name = "L"},
      {.name = "num-layers",
       .type = T::Int,
       .builtin_default = nullptr,
       .help = "transformer blocks (default: layer + 1)",
       .commands = {C::Attention},
       .value_name = "N"},
      {.name = "cross",
       .type = T::Flag,
       .builtin_default = false,
       .help = "the call is cross-attention",
       .commands = {C::Attention}},
      {.name = "gate",
       .type = T::Path,
       .builtin_default = nullptr,
       .help = "video_sparse_attn: to_gate_compress weight [heads*head_dim, heads*head_dim] (bias "
               "zero); the gate is computed from it and --attention-input",
       .commands = {C::Attention},
       .value_name = "W.npy"},
      {.name = "attention-input",
       .type = T::Path,
       .builtin_default = nullptr,
       .help = "video_sparse_attn with --gate: the block's attention input [batch, seq, "
               "heads*head_dim] (what to_q/to_k/to_v read); gate = X·Wᵀ per head",
       .commands = {C::Attention},
       .value_name = "X.npy"},
      {.name = "proj",
       .type = T::Path,
       .builtin_default = nullptr,
       .help = "sla_attn / sage_sla_attn: proj_l weight [head_dim, head_dim] (bias zero) of the "
               "linear branch",
       .commands = {C::Attention},
       .value_name = "W.npy"},
      {.name = "scale",
       .type = T::Float,
       .builtin_default = nullptr,
       .help = "score scale (default: 1/sqrt(head_dim))",
       .commands = {C::Attention},
       .value_name = "S"},
      {.name = "repeat",
       .type = T::Int,
       .builtin_default = 1,
       .help = "runs to time; the median is printed",
       .commands = {C::Attention},
       .value_name = "N"},

      // convert: a component's weights into one GGUF file, or one FP8 safetensors file.
      {.name = "input",
       .type = T::Path,
       .builtin_default = nullptr,
       .help = "the component folder (its safetensors, one file or shards) or a .safetensors file; "
               "required",
       .commands = {C::Convert},
       .value_name = "PATH"},
      {.name = "out",
       .type = T::Path,
       .builtin_default = nullptr,
       .help = "the .gguf file to write, or the .safetensors file for --type fp8_e4m3 (the input "
               "folder's config.json is copied beside it when none is there); required",
       .commands = {C::Convert},
       .value_name = "FILE"},
      {.name = "type",
       .type = T::Choice,
       .builtin_default = "q8_0",
       .help = "the weight matrices' type (q4_k: rows not whole super-blocks of 256 take q8_0; "
               "fp8_e4m3: ComfyUI's scaled FP8 safetensors, one scale per matrix); norms, biases, "
               "embeddings, modulation tables and small tensors stay f32 (as stored for fp8_e4m3)",
       .choices = {"q8_0", "q4_k", "f16", "bf16", "f32", "fp8_e4m3"},
       .commands = {C::Convert},
       .value_name = "TYPE"},
      {.name = "overwrite",
       .type = T::Flag,
       .builtin_default = false,
       .help = "replace an existing output file (without it, convert refuses before any work)",
       .commands = {C::Convert}},
  };
  return options;
}

}  // namespace

std::string_view command_name(Command command) {
  switch (command) {
    case Command::Generate:
      return "generate";
    case Command::Encode:
      return "encode";
    case Command::Attention:
      return "attention";
    case Command::Convert:
      return "convert";
  }
  return "?";
}

const std::vector<OptionSpec>& command_options(Command command) {
  static const auto select = [](Command c) {
    std::vector<OptionSpec> selected;
    for (const auto& option : option_table())
      if (std::find(option.commands.begin(), option.commands.end(), c) != option.commands.end())
        selected.push_back(option);
    return selected;
  };
  static const std::vector<OptionSpec> generate = select(Command::Generate),
                                       encode = select(Command::Encode),
                                       attention = select(Command::Attention),
                                       convert = select(Command::Convert);
  switch (command) {
    case Command::Generate:
      return generate;
    case Command::Encode:
      return encode;
    case Command::Convert:
      return convert;
    case Command::Attention:
      break;
  }
  return attention;
}

const std::vector<OptionSpec>& generate_options() {
  return command_options(Command::Generate);
}

std::string options_help(Command command,
                         const std::function<std::string(const OptionSpec&)>& describe_default) {
  std::string text = "Options:\n";
  for (const auto& option : command_options(command)) {
    std::string flag = "  --" + std::string(option.name);
    if (option.type != OptionType::Flag)
      flag += " " + std::string(option.value_name.empty() ? "VALUE" : option.value_name);
    if (flag.size() < 36) flag.resize(36, ' ');
    text += flag + " " + std::string(option.help);
    std::string default_text;
    if (describe_default)
      default_text = describe_default(option);
    else if (!option.builtin_default.is_null() && option.type != OptionType::Flag)
      default_text = option.builtin_default.is_string() ? option.builtin_default.get<std::string>()
                                                        : option.builtin_default.dump();
    if (!default_text.empty()) text += " [default: " + default_text + "]";
    text += "\n";
  }
  return text;
}

std::string normalize_option_name(std::string_view name) {
  std::string normalized(name);
  std::replace(normalized.begin(), normalized.end(), '_', '-');
  return normalized;
}

const OptionSpec* find_option(std::string_view name, Command command) {
  const std::string normalized = normalize_option_name(name);
  for (const auto& option : command_options(command))
    if (option.name == normalized) return &option;
  return nullptr;
}

namespace {

std::string describe(const json& value) {
  return value.is_string() ? value.get<std::string>() : value.dump();
}

}  // namespace

json convert_option_value(const OptionSpec& option, const json& value, const std::string& where) {
  // One rule for text at every entry point (flags, config files, prompt files): UTF-8 or refused
  // with the offset, as a Python peer cannot even be handed other bytes.
  if (value.is_string()) {
    const size_t bad = invalid_utf8_offset(value.get<std::string>());
    check(bad == std::string::npos, "{}: not valid UTF-8 (byte {}); write it as UTF-8 text", where,
          bad + 1);
  }
  const std::string text = describe(value);
  const std::string shown = text_for_message(text);  // for messages
  switch (option.type) {
    case OptionType::String:
    case OptionType::Path:
      check(value.is_string() || value.is_number(), "{}: expected text, got {}", where,
            json_for_message(value));
      return text;
    case OptionType::Spec:  // a string, or an object / list straight from a config file
      if (value.is_object()) return value;
      check(value.is_string(), "{}: expected a string or an object, got {}", where,
            json_for_message(value));
      return text;
    case OptionType::Int: {
      if (value.is_number_integer()) return value;
      // A whole float (1e3) counts; past int64's range converting it would be undefined.
      if (value.is_number_float() && std::floor(value.get<double>()) == value.get<double>() &&
          std::fabs(value.get<double>()) < 0x1p63)
        return int64_t(value.get<double>());
      check(value.is_string(), "{}: expected a whole number, got {}", where,
            json_for_message(value));
      size_t used = 0;
      int64_t parsed = 0;
      try {
        parsed = std::stoll(text, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      check(used == text.size() && !text.empty(), "{}: expected a whole number, got '{}'", where,
            shown);
      return parsed;
    }
    case OptionType::Float: {
      if (value.is_number()) return value.get<double>();
      check(value.is_string(), "{}: expected a number, got {}", where, json_for_message(value));
      size_t used = 0;
      double parsed = 0;
      try {
        parsed = std::stod(text, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      check(used == text.size() && !text.empty() && std::isfinite(parsed),
            "{}: expected a number, got '{}'", where, shown);
      return parsed;
    }
    case OptionType::Bool:
    case OptionType::Flag: {
      if (value.is_boolean()) return value;
      std::string lower = text;
      std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
      if (lower == "true" || lower == "1" || lower == "yes" || lower == "on") return true;
      if (lower == "false" || lower == "0" || lower == "no" || lower == "off") return false;
      fail("{}: expected true or false, got '{}'", where, shown);
    }
    case OptionType::Choice: {
      check(value.is_string(), "{}: expected one of its choices, got {}", where,
            json_for_message(value));
      for (auto choice : option.choices)
        if (choice == text) return text;
      std::string list;
      for (auto choice : option.choices) list += (list.empty() ? "" : ", ") + std::string(choice);
      fail("{}: '{}' is not one of {}", where, shown, list);
    }
  }
  return value;
}

}  // namespace mmgen::cli
