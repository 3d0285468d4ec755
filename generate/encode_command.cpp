#include "generate/encode_command.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include "attention/catalogue.h"
#include "core/error.h"
#include "core/interrupt.h"
#include "core/json.h"
#include "core/limits.h"
#include "core/safetensors.h"
#include "core/text.h"
#include "core/yaml.h"
#include "generate/options.h"
#include "generate/prompt_file.h"
#include "generate/settings.h"
#include "models/text_encoders/prompt_embedding.h"
#include "models/text_encoders/qwen3_model.h"
#include "models/text_encoders/qwen3_paged.h"
#include "models/text_encoders/qwen3_prompt_embedding.h"
#include "models/text_encoders/umt5_encoder.h"
#include "models/tokenizers/prompt_clean.h"
#include "models/tokenizers/tokenizer.h"
#include "pipeline/model_index.h"
#include "pipeline/registry.h"

namespace mmgen::cli {
namespace {

// Z-Image's `_encode_prompt` default; the registry has no Z-Image defaults file yet.
constexpr int64_t kZImageMaxSequenceLength = 512;

// "text_encoder=NAME" (several separated by commas); only the encoded component may be named.
void parse_backends(const std::string& text, std::map<std::string, std::string>& backends) {
  std::stringstream items(text);
  std::string item;
  while (std::getline(items, item, ',')) {
    const size_t equals = item.find('=');
    check(equals != std::string::npos && equals > 0 && equals + 1 < item.size(),
          "--component-attention-backends {}: expected COMPONENT=BACKEND, e.g. "
          "text_encoder=torch_native",
          text);
    backends[item.substr(0, equals)] = item.substr(equals + 1);
  }
}

enum class EncoderKind { Umt5, Qwen3 };

EncoderKind encoder_kind(const ComponentEntry& entry, const fs::path& index_path) {
  if (entry.class_name == "UMT5EncoderModel" || entry.class_name == "T5EncoderModel")
    return EncoderKind::Umt5;
  if (entry.class_name == "Qwen3Model" || entry.class_name == "Qwen3ForCausalLM")
    return EncoderKind::Qwen3;
  fail(
      "{}: component '{}' is a {}, which mmgen encode does not support (supported: "
      "UMT5EncoderModel, T5EncoderModel, Qwen3Model, Qwen3ForCausalLM)",
      index_path.string(), entry.name, entry.class_name);
}

// text_encoder → tokenizer, text_encoder_2 → tokenizer_2, as diffusers pairs them.
std::string tokenizer_component(const std::string& component) {
  const std::string prefix = "text_encoder";
  if (component.rfind(prefix, 0) == 0) return "tokenizer" + component.substr(prefix.size());
  return "tokenizer";
}

const ComponentEntry& existing_component(const ModelIndex& index, const std::string& name) {
  const ComponentEntry& entry = index.component(name);
  check(fs::is_directory(entry.path), "component '{}' ({}) is missing: no folder {}", name,
        entry.class_name, entry.path.string());
  return entry;
}

// The pipeline's max_sequence_length default (configs/), or Z-Image's / diffusers' 512.
int64_t default_max_sequence_length(const ModelIndex& index) {
  for (const PipelineSpec& spec : pipeline_registry()) {
    if (spec.class_name != index.class_name) continue;
    const std::string where = "configs/" + spec.defaults_file;
    const nlohmann::json defaults = yaml_to_json(embedded_config(spec.defaults_file), where);
    if (defaults.contains("max_sequence_length"))
      return defaults["max_sequence_length"].get<int64_t>();
  }
  return kZImageMaxSequenceLength;
}

std::vector<Tensor> encode_umt5(const ModelIndex& index, const EncodeOptions& options,
                                const std::vector<std::string>& prompts, int64_t max_length,
                                EncodeResult& result) {
  const auto tokenizer = tokenizers::Tokenizer::load(
      existing_component(index, tokenizer_component(options.component)).path);
  auto encoder =
      text_encoders::UMT5Encoder::from_folder(existing_component(index, options.component).path);
  if (!options.attention_backend.empty())
    encoder.set_attention_backend(options.attention_backend, options.page_size);
  // Encoder-only (bidirectional): no KV is kept, so there is nothing to page or prefix-cache.
  result.attention = fmt::format("paged {}, encoder-only (no KV pool, no prefix cache)",
                                 encoder.attention_backend());
  const int64_t count = int64_t(prompts.size());
  std::vector<int64_t> ids, mask;
  for (const std::string& prompt : prompts) {
    const tokenizers::Encoding encoding =
        tokenizer->encode_padded(tokenizers::clean_prompt(prompt), size_t(max_length));
    ids.insert(ids.end(), encoding.ids.begin(), encoding.ids.end());
    mask.insert(mask.end(), encoding.attention_mask.begin(), encoding.attention_mask.end());
  }
  const Tensor embeddings = text_encoders::encode_wan_prompt_embeddings(
      encoder, Tensor::from_vector({count, max_length}, ids),
      Tensor::from_vector({count, max_length}, mask));
  std::vector<Tensor> rows;
  for (int64_t i = 0; i < count; ++i) rows.push_back(embeddings.select(0, i).contiguous());
  return rows;
}

// Through the paged backends with the prefix cache: prompts sharing the chat template's start
// reuse its KV and hidden states.
std::vector<Tensor> encode_qwen3(const ModelIndex& index, const EncodeOptions& options,
                                 const std::vector<std::string>& prompts, int64_t max_length,
                                 EncodeResult& result) {
  const auto tokenizer = tokenizers::Tokenizer::load(
      existing_component(index, tokenizer_component(options.component)).path);
  const auto model =
      text_encoders::Qwen3TextModel::from_folder(existing_component(index, options.component).path);
  const auto ids = text_encoders::z_image_prompt_ids(*tokenizer, prompts, max_length);
  attention::paged::PagedRunnerOptions runner;
  runner.backend = options.attention_backend;
  runner.page_size = options.page_size;
  runner.prefix_cache = true;
  runner.max_context_len = std::max<int64_t>(max_length, 1);
  runner.pool_tokens = std::max<int64_t>(runner.pool_tokens, 4 * runner.max_context_len);
  text_encoders::Qwen3PagedEncoder encoder(model, runner);
  std::vector<Tensor> embeddings = encoder.encode(ids);
  result.prefix_cache_used = model.config().num_hidden_layers > 1;
  result.prompt_tokens = encoder.report().prompt_tokens;
  result.prefix_cache_hit_tokens = encoder.report().hit_tokens;
  result.prompts_hit = encoder.report().prompts_hit;
  result.attention = result.prefix_cache_used
                         ? fmt::format("paged {} (page size {})", encoder.runner().backend_name(),
                                       options.page_size)
                         : "none (one layer: hidden_states[-2] is the embedding)";
  return embeddings;
}

}  // namespace

EncodeOptions parse_encode_arguments(const std::vector<std::string>& arguments) {
  const SettingsLayer given = parse_arguments(Command::Encode, arguments);
  const SettingsLayer values = merge_layers({builtin_defaults(Command::Encode), given});
  EncodeOptions options;
  options.model_path = values.value("model-path", std::string());
  options.component = values.value("component", options.component);
  if (values.contains("prompt")) options.prompts = values["prompt"].get<std::vector<std::string>>();
  if (values.contains("prompt-file-path"))
    options.prompt_file = fs::path(values["prompt-file-path"].get<std::string>());
  options.page_size = values.value("page-size", options.page_size);
  check(options.page_size >= 1 && options.page_size <= 4096,
        "--page-size {}: expected a whole number from 1 to 4096", options.page_size);
  if (values.contains("max-sequence-length")) {
    const int64_t length = values["max-sequence-length"];
    check(length >= 1 && length <= Limits::kMaxSequenceLength,
          "--max-sequence-length {}: expected a whole number from 1 to {}", length,
          Limits::kMaxSequenceLength);
    options.max_sequence_length = length;
  }
  options.out = values.value("out", std::string());
  std::map<std::string, std::string> backends;
  if (values.contains("component-attention-backends")) {
    const nlohmann::json& spec = values["component-attention-backends"];
    if (spec.is_object()) {  // the dotted form, or a JSON object
      for (auto it = spec.begin(); it != spec.end(); ++it) {
        check(it->is_string(), "--component-attention-backends.{}: expected a backend name",
              it.key());
        backends[it.key()] = it->get<std::string>();
      }
    } else if (spec.get<std::string>().starts_with("{")) {
      const nlohmann::json object =
          parse_json(spec.get<std::string>(), "--component-attention-backends",
                     "write a JSON object of component -> backend");
      for (auto it = object.begin(); it != object.end(); ++it)
        backends[it.key()] = it->is_string() ? it->get<std::string>() : it->dump();
    } else {
      parse_backends(spec.get<std::string>(), backends);
    }
  }
  check(!options.model_path.empty(),
        "encode: no model; pass --model-path DIR (a folder with model_index.json)");
  check(!options.out.empty(), "encode: no output; pass --out FILE.safetensors");
  check(options.out.extension() == ".safetensors", "encode: --out {} should end in .safetensors",
        options.out.string());
  check(!options.prompts.empty() || options.prompt_file,
        "encode: no prompt; pass --prompt TEXT (repeatable) or --prompt-file-path FILE");
  for (const auto& [component, backend] : backends) {
    check(component == options.component,
          "--component-attention-backends {}={}: only the encoded component ('{}') can be set "
          "here",
          component, backend, options.component);
    const attention::BackendInfo* info = attention::find_backend(attention::Family::Paged, backend);
    std::string known;
    for (const auto& name : attention::backend_names(attention::Family::Paged))
      known += (known.empty() ? "" : ", ") + name;
    check(info != nullptr,
          "--component-attention-backends {}={}: not a text-encoder (paged) attention backend; "
          "choose one of {}",
          component, backend, known);
    options.attention_backend = std::string(info->name);
  }
  return options;
}

std::vector<std::string> collect_prompts(const EncodeOptions& options) {
  std::vector<std::string> prompts = options.prompts;
  if (options.prompt_file) {
    const std::vector<std::string> from_file = read_prompt_file(*options.prompt_file);
    prompts.insert(prompts.end(), from_file.begin(), from_file.end());
  }
  check(!prompts.empty(),
        "encode: --prompt-file-path {} holds no prompt (blank and # lines are skipped)",
        options.prompt_file ? options.prompt_file->string() : std::string());
  return prompts;
}

EncodeResult encode_prompts(const EncodeOptions& options) {
  const std::vector<std::string> prompts = collect_prompts(options);
  const ModelIndex index = load_model_index(options.model_path);
  const ComponentEntry& entry = existing_component(index, options.component);
  const EncoderKind kind = encoder_kind(entry, index.root / "model_index.json");

  EncodeResult result;
  result.text_encoder_class = entry.class_name;
  result.max_sequence_length =
      options.max_sequence_length.value_or(default_max_sequence_length(index));
  if (kind == EncoderKind::Umt5) {
    result.embeddings = encode_umt5(index, options, prompts, result.max_sequence_length, result);
  } else {
    result.embeddings = encode_qwen3(index, options, prompts, result.max_sequence_length, result);
  }
  return result;
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
  const EncodeResult result = encode_prompts(options);
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
      {"component", options.component},
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
                   options.out.string(), result.embeddings.size(), options.component,
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
