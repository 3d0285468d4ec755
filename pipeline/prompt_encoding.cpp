#include "pipeline/prompt_encoding.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"
#include "core/file.h"
#include "core/safetensors.h"
#include "core/yaml.h"
#include "models/text_encoders/prompt_embedding.h"
#include "models/text_encoders/qwen3_model.h"
#include "models/text_encoders/qwen3_paged.h"
#include "models/text_encoders/qwen3_prompt_embedding.h"
#include "models/text_encoders/qwenimage_prompt_embedding.h"
#include "models/text_encoders/umt5_encoder.h"
#include "pipeline/component_classes.h"
#include "pipeline/model_index.h"
#include "pipeline/registry.h"
#include "text/chat_template.h"
#include "text/prompt_clean.h"
#include "text/tokenizer.h"

namespace mmgen {
namespace {

// diffusers' `_encode_prompt` default, for a model whose pipeline has no defaults file here.
constexpr int64_t kZImageMaxSequenceLength = 512;

// The class decides the recipe; the class table (pipeline/component_classes.h) knows which model
// a text-encoder class loads into.
bool is_umt5(const ComponentEntry& entry, const fs::path& index_path) {
  const ComponentClass* known = find_component_class(entry.class_name);
  std::string supported;
  for (const auto& name : component_class_names(ComponentKind::TextEncoder))
    supported += (supported.empty() ? "" : ", ") + name;
  check(known != nullptr && known->kind == ComponentKind::TextEncoder,
        "{}: component '{}' is a {}, which mmgen encode does not support (supported: {})",
        index_path.string(), entry.name, entry.class_name, supported);
  return known->builds == "text_encoders::UMT5Encoder";
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

std::vector<Tensor> encode_umt5(const ModelIndex& index, const PromptEncodingRequest& request,
                                const std::vector<std::string>& prompts, int64_t max_length,
                                PromptEncodingResult& result) {
  const auto tokenizer = tokenizers::Tokenizer::load(
      existing_component(index, tokenizer_component(request.component)).path);
  auto encoder =
      text_encoders::UMT5Encoder::from_folder(existing_component(index, request.component).path);
  if (!request.attention_backend.empty())
    encoder.set_attention_backend(request.attention_backend, request.page_size);
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

// Each prompt rendered through the tokenizer's chat template, then through the paged backends
// with the prefix cache: prompts sharing the template's start reuse its KV and hidden states.
std::vector<Tensor> encode_qwen3(const ModelIndex& index, const PromptEncodingRequest& request,
                                 const std::vector<std::string>& prompts, int64_t max_length,
                                 PromptEncodingResult& result) {
  const fs::path tokenizer_folder =
      existing_component(index, tokenizer_component(request.component)).path;
  const auto tokenizer = tokenizers::Tokenizer::load(tokenizer_folder);
  // Read (and checked) once for the run, before the weights: a folder without a template, or
  // with one mmgen cannot render, stops here in one line.
  const auto chat_template = tokenizers::ChatTemplate::load(tokenizer_folder);
  const auto model =
      text_encoders::Qwen3TextModel::from_folder(existing_component(index, request.component).path);
  text_encoders::PrefixCacheReport report;
  std::vector<Tensor> embeddings = encode_qwen3_prompts(
      *tokenizer, chat_template, model, prompts, max_length, request.attention_backend,
      request.page_size, &report, &result.attention);
  result.prefix_cache_used = model.config().num_hidden_layers > 1;
  result.prompt_tokens = report.prompt_tokens;
  result.prefix_cache_hit_tokens = report.hit_tokens;
  result.prompts_hit = report.prompts_hit;
  return embeddings;
}

// QwenImagePipeline's recipe (its fixed template, hidden_states[-1] without the template's first
// 34 tokens), through the paged backends with the prefix cache.
std::vector<Tensor> encode_qwen_image(const ModelIndex& index, const PromptEncodingRequest& request,
                                      const std::vector<std::string>& prompts, int64_t max_length,
                                      PromptEncodingResult& result) {
  const auto tokenizer = tokenizers::Tokenizer::load(
      existing_component(index, tokenizer_component(request.component)).path);
  const auto model =
      text_encoders::Qwen3TextModel::from_folder(existing_component(index, request.component).path);
  text_encoders::PrefixCacheReport report;
  std::vector<Tensor> embeddings = encode_qwen_image_prompts_paged(
      *tokenizer, model, prompts, max_length, request.attention_backend, &report);
  result.attention = "paged, Qwen-Image's template (hidden_states[-1] from token 34)";
  result.prefix_cache_used = true;
  result.prompt_tokens = report.prompt_tokens;
  result.prefix_cache_hit_tokens = report.hit_tokens;
  result.prompts_hit = report.prompts_hit;
  return embeddings;
}

}  // namespace

// Through the paged backends with the prefix cache: prompts sharing the chat template's start
// reuse its KV and hidden states.
std::vector<Tensor> encode_qwen3_prompts(
    const tokenizers::Tokenizer& tokenizer, const tokenizers::ChatTemplate& chat_template,
    const text_encoders::Qwen3TextModel& model, const std::vector<std::string>& prompts,
    int64_t max_sequence_length, const std::string& backend, int64_t page_size,
    text_encoders::PrefixCacheReport* report, std::string* attention, int64_t pool_tokens) {
  const auto ids =
      text_encoders::z_image_prompt_ids(tokenizer, chat_template, prompts, max_sequence_length);
  attention::paged::PagedRunnerOptions runner;
  runner.backend = backend;
  runner.page_size = page_size;
  runner.prefix_cache = true;
  runner.max_context_len = std::max<int64_t>(max_sequence_length, 1);
  runner.device = model.device();
  // The GPU allocates its bf16 pool whole (for Qwen3-4B 35 layers × 4 KiB per token: 32768 tokens
  // would be 4.6 GiB), so by default it gets the smallest pool the path runs with.
  const int64_t minimum = kQwen3MinPoolTokensPerLength * runner.max_context_len;
  const int64_t fallback = model.device() == Device::CPU ? runner.pool_tokens : minimum;
  runner.pool_tokens = std::max<int64_t>(pool_tokens > 0 ? pool_tokens : fallback, minimum);
  text_encoders::Qwen3PagedEncoder encoder(model, runner);
  std::vector<Tensor> embeddings = encoder.encode(ids);
  if (report) *report = encoder.report();
  if (attention)
    *attention = model.config().num_hidden_layers > 1
                     ? fmt::format("paged {} (page size {}){}", encoder.runner().backend_name(),
                                   page_size, model.device() == Device::CPU ? "" : " on the GPU")
                     : "none (one layer: hidden_states[-2] is the embedding)";
  return embeddings;
}

std::vector<Tensor> encode_qwen_image_prompts_paged(const tokenizers::Tokenizer& tokenizer,
                                                    const text_encoders::Qwen3TextModel& model,
                                                    const std::vector<std::string>& prompts,
                                                    int64_t max_sequence_length,
                                                    const std::string& backend,
                                                    text_encoders::PrefixCacheReport* report) {
  check(
      max_sequence_length >= 1 && max_sequence_length <= text_encoders::kQwenImageMaxSequenceLength,
      "--max-sequence-length {} is outside Qwen-Image's 1 to {}", max_sequence_length,
      text_encoders::kQwenImageMaxSequenceLength);
  const auto ids = text_encoders::qwen_image_prompt_ids(tokenizer, prompts);
  int64_t longest = 1;
  for (const auto& sequence : ids) longest = std::max<int64_t>(longest, int64_t(sequence.size()));
  attention::paged::PagedRunnerOptions runner;
  runner.backend = backend;
  runner.page_size = 1;
  runner.prefix_cache = true;
  runner.max_context_len = longest;
  runner.device = model.device();
  // The smallest pool the path runs with, allocated whole on either device (the runner's default
  // of 32768 tokens would be 4.2 GB of KV for Qwen2.5-VL-7B on the CPU), as Z-Image sizes its own.
  runner.pool_tokens = kQwen3MinPoolTokensPerLength * longest;
  text_encoders::Qwen3PagedEncoder encoder(model, runner, /*last_hidden_state=*/true);
  std::vector<Tensor> hidden = encoder.encode(ids);
  if (report) *report = encoder.report();
  for (Tensor& rows : hidden) {
    const int64_t start = std::min(text_encoders::kQwenImageDropTokens, rows.size(0));
    const int64_t end = std::min(rows.size(0), start + max_sequence_length);
    rows = rows.to(Device::CPU).to(DType::F32).slice(0, start, end).contiguous();
  }
  return hidden;
}

Tensor read_prompt_embeddings(const fs::path& path, int64_t hidden, const char* flag) {
  check_regular_file(path, flag);
  const WeightStore file = WeightStore::open_file(path);
  const std::string name = "prompt_embeds.0";
  check(file.has(name),
        "{} {}: no tensor '{}'; write the file with `mmgen encode --prompt TEXT --out FILE`", flag,
        path.string(), name);
  const Tensor embeds = file.get_f32(name);
  check(embeds.dim() == 2 && embeds.size(0) > 0 && embeds.size(1) == hidden,
        "{} {}: {} is {} but this transformer takes [tokens, {}]; encode the prompt with this "
        "model's text encoder (`mmgen encode --model-path DIR --prompt TEXT --out FILE`)",
        flag, path.string(), name, shape_string(embeds.shape()), hidden);
  return embeds.contiguous().clone();
}

PromptEncodingResult encode_prompts(const PromptEncodingRequest& request) {
  const std::vector<std::string>& prompts = request.prompts;
  const ModelIndex index = load_model_index(request.model_path);
  const ComponentEntry& entry = existing_component(index, request.component);
  const bool umt5 = is_umt5(entry, index.root / "model_index.json");
  // FLUX conditions on two encoders at once (T5's rows and CLIP's pooled row); one file of one
  // encoder's rows would not be what FluxPipeline computes, so encode refuses rather than guess.
  check(index.class_name != "FluxPipeline",
        "{}: mmgen encode does not write FLUX prompt embeddings yet (FluxPipeline reads T5's rows "
        "and CLIP's pooled row together); pass the prompt to generate as text",
        (index.root / "model_index.json").string());

  PromptEncodingResult result;
  result.text_encoder_class = entry.class_name;
  result.max_sequence_length =
      request.max_sequence_length.value_or(default_max_sequence_length(index));
  if (umt5) {
    result.embeddings = encode_umt5(index, request, prompts, result.max_sequence_length, result);
  } else if (index.class_name == "QwenImagePipeline") {
    result.embeddings =
        encode_qwen_image(index, request, prompts, result.max_sequence_length, result);
  } else {
    result.embeddings = encode_qwen3(index, request, prompts, result.max_sequence_length, result);
  }
  return result;
}

}  // namespace mmgen
