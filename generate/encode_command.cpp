#include "generate/encode_command.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <iostream>
#include <map>

#include "attention/catalogue.h"
#include "attention/selector.h"
#include "core/error.h"
#include "core/interrupt.h"
#include "core/limits.h"
#include "core/safetensors.h"
#include "generate/options.h"
#include "generate/prompt_file.h"
#include "generate/settings.h"
#include "pipeline/hub_cache.h"

namespace mmgen::cli {

EncodeOptions parse_encode_arguments(const std::vector<std::string>& arguments) {
  const SettingsLayer given = parse_arguments(Command::Encode, arguments);
  const SettingsLayer values = merge_layers({builtin_defaults(Command::Encode), given});
  EncodeOptions options;
  PromptEncodingRequest& request = options.request;
  request.model_path =
      resolve_model_path(values.value("model-path", std::string()),
                         values.contains("revision")
                             ? std::optional<std::string>(values["revision"].get<std::string>())
                             : std::nullopt);
  request.component = values.value("component", request.component);
  if (values.contains("prompt")) request.prompts = values["prompt"].get<std::vector<std::string>>();
  if (values.contains("prompt-file-path"))
    options.prompt_file = fs::path(values["prompt-file-path"].get<std::string>());
  request.page_size = values.value("page-size", request.page_size);
  check(request.page_size >= 1 && request.page_size <= 4096,
        "--page-size {}: expected a whole number from 1 to 4096", request.page_size);
  if (values.contains("max-sequence-length")) {
    const int64_t length = values["max-sequence-length"];
    check(length >= 1 && length <= Limits::kMaxSequenceLength,
          "--max-sequence-length {}: expected a whole number from 1 to {}", length,
          Limits::kMaxSequenceLength);
    request.max_sequence_length = length;
  }
  options.out = values.value("out", std::string());
  check(!request.model_path.empty(),
        "encode: no model; pass --model-path DIR (a folder with model_index.json)");
  check(!options.out.empty(), "encode: no output; pass --out FILE.safetensors");
  check(options.out.extension() == ".safetensors", "encode: --out {} should end in .safetensors",
        options.out.string());
  check(!request.prompts.empty() || options.prompt_file,
        "encode: no prompt; pass --prompt TEXT (repeatable) or --prompt-file-path FILE");
  // The same spellings as generate's (a=b pairs, a JSON object, the dotted flags).
  std::vector<std::string> notes;
  const attention::ComponentOverrides backends = attention::parse_component_attention_backends(
      values.value("component-attention-backends", nlohmann::json()),
      "--component-attention-backends", &notes);
  for (const auto& note : notes) spdlog::info("attention: {}", note);
  for (const auto& [component, backend] : backends) {
    check(component == request.component,
          "--component-attention-backends {}={}: only the encoded component ('{}') can be set "
          "here",
          component, backend, request.component);
    const attention::BackendInfo* info = attention::find_backend(attention::Family::Paged, backend);
    check(info != nullptr,
          "--component-attention-backends {}={}: not a text-encoder (paged) attention backend; "
          "choose one of {}",
          component, backend, fmt::join(attention::backend_names(attention::Family::Paged), ", "));
    request.attention_backend = std::string(info->name);
  }
  return options;
}

std::vector<std::string> collect_prompts(const EncodeOptions& options) {
  std::vector<std::string> prompts = options.request.prompts;
  if (options.prompt_file) {
    const std::vector<std::string> from_file = read_prompt_file(*options.prompt_file);
    prompts.insert(prompts.end(), from_file.begin(), from_file.end());
  }
  check(!prompts.empty(),
        "encode: --prompt-file-path {} holds no prompt (blank and # lines are skipped)",
        options.prompt_file ? options.prompt_file->string() : std::string());
  return prompts;
}

int run_encode(const std::vector<std::string>& arguments) {
  for (const std::string& argument : arguments)
    if (argument == "--help" || argument == "-h") {
      std::cout << encode_help();
      return 0;
    }
  const EncodeOptions options = parse_encode_arguments(arguments);
  // Ctrl-C / SIGTERM: the encode finishes its batch, then nothing is written (core/interrupt.h).
  install_stop_handlers();
  PromptEncodingRequest request = options.request;
  request.prompts = collect_prompts(options);
  const PromptEncodingResult result = encode_prompts(request);
  if (const int signal_number = stop_signal()) {
    std::fprintf(stderr, "mmgen: stopped by %s before writing; nothing was written\n",
                 signal_description(signal_number).c_str());
    return 128 + signal_number;
  }
  NamedTensors tensors;
  for (size_t i = 0; i < result.embeddings.size(); ++i)
    tensors.emplace_back(fmt::format("prompt_embeds.{}", i), result.embeddings[i]);
  const std::map<std::string, std::string> metadata = {
      {"generator", "mmgen 0.1.0"},
      {"component", request.component},
      {"text_encoder_class", result.text_encoder_class},
      {"max_sequence_length", std::to_string(result.max_sequence_length)},
      {"count", std::to_string(result.embeddings.size())}};
  write_safetensors(options.out, tensors, metadata);
  const std::string cache =
      result.prefix_cache_used
          ? fmt::format("{} hit(s), {} of {} prompt tokens reused", result.prompts_hit,
                        result.prefix_cache_hit_tokens, result.prompt_tokens)
          : "not used (0 hits)";
  std::cout << fmt::format(
                   "wrote {}: {} prompt embedding(s) from {} ({}), attention: {}; prefix cache: "
                   "{}",
                   options.out.string(), result.embeddings.size(), request.component,
                   result.text_encoder_class, result.attention, cache)
            << std::endl;
  return 0;
}

std::string encode_help() {
  return "Usage: mmgen encode --model-path DIR --prompt TEXT [--prompt TEXT ...] --out "
         "FILE.safetensors [options]\n\n"
         "Writes the prompt embeddings the pipeline would use: one float32 tensor per prompt,\n"
         "prompt_embeds.{i} in prompt order, [tokens, hidden]. Only the text components that\n"
         "model_index.json lists are needed. Wan (UMT5): zero-filled to --max-sequence-length;\n"
         "Z-Image (Qwen3): the real tokens' rows of hidden_states[-2].\n\n" +
         options_help(Command::Encode);
}

}  // namespace mmgen::cli
