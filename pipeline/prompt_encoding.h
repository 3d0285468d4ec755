// The prompt embeddings a pipeline would feed its transformer, computed from the text components
// alone (`mmgen encode` writes them to a file; users precompute embeddings with it, tests compare
// them with the references).
//
// The text encoder's class (model_index.json, through pipeline/component_classes.h) decides the
// recipe:
//   UMT5EncoderModel / T5EncoderModel (Wan): cleaned prompt, padded to the max sequence length,
//     encoded with the mask, zero-filled after the real tokens: [max_sequence_length, hidden];
//   Qwen3Model / Qwen3ForCausalLM (Z-Image): chat template, truncated to the max sequence length,
//     hidden_states[-2] at the real tokens: [tokens, hidden].
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "models/text_encoders/qwen3_model.h"
#include "models/text_encoders/qwen3_paged.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace mmgen {

struct PromptEncodingRequest {
  std::filesystem::path model_path;
  std::string component = "text_encoder";
  std::vector<std::string> prompts;            // in order
  int64_t page_size = 1;                       // tokens per KV page (paged attention)
  std::string attention_backend;               // paged-family backend; empty: automatic
  std::optional<int64_t> max_sequence_length;  // empty: the pipeline's default, else 512
};

struct PromptEncodingResult {
  std::vector<Tensor> embeddings;  // per prompt, [tokens, hidden] float32
  std::string text_encoder_class;
  int64_t max_sequence_length = 0;
  std::string attention;  // what ran the attention, in words
  // Prompt tokens whose KV came from the prefix cache instead of being computed.
  int64_t prefix_cache_hit_tokens = 0;
  int64_t prompt_tokens = 0;
  int64_t prompts_hit = 0;  // prompts with at least one token from the cache
  bool prefix_cache_used = false;
};

// Loads the text components and encodes every prompt (writes nothing).
PromptEncodingResult encode_prompts(const PromptEncodingRequest& request);

// The smallest KV pool the Qwen3 path runs with, in tokens per token of max_sequence_length.
inline constexpr int64_t kQwen3MinPoolTokensPerLength = 4;

// The Qwen3 recipe on loaded components: the one path from prompts to Z-Image's embeddings
// (chat template, tokenizer truncation, hidden_states[-2] at the real tokens, ragged), shared by
// `mmgen encode` and ZImagePipeline so a change to any step reaches both. Runs through the paged
// backend `backend` (empty: automatic) with the prefix cache; `report` (when given) gets the
// cache's counts and `attention` what ran the attention, in words. `pool_tokens` sizes the KV
// pool (0: the runner's default on the CPU, the minimum on the GPU; never below
// kQwen3MinPoolTokensPerLength · max_sequence_length); a pipeline that encodes two prompts passes a
// smaller pool, which it allocates in full. Runs on the model's device (Qwen3TextModel::
// set_device: on the GPU through a GPU paged backend and a device KV pool); the embeddings come
// back float32 on the host either way.
std::vector<Tensor> encode_qwen3_prompts(const tokenizers::Tokenizer& tokenizer,
                                         const tokenizers::ChatTemplate& chat_template,
                                         const text_encoders::Qwen3TextModel& model,
                                         const std::vector<std::string>& prompts,
                                         int64_t max_sequence_length, const std::string& backend,
                                         int64_t page_size = 1,
                                         text_encoders::PrefixCacheReport* report = nullptr,
                                         std::string* attention = nullptr, int64_t pool_tokens = 0);

// Qwen-Image's prompt embedding (models/text_encoders/qwenimage_prompt_embedding.h: the
// pipeline's template, hidden_states[-1], the template's first 34 tokens dropped, cut to
// max_sequence_length), through the paged backend `backend` with the prefix cache: every prompt
// after the first reuses the template's system part. Ragged, float32 on the host.
std::vector<Tensor> encode_qwen_image_prompts_paged(
    const tokenizers::Tokenizer& tokenizer, const text_encoders::Qwen3TextModel& model,
    const std::vector<std::string>& prompts, int64_t max_sequence_length,
    const std::string& backend, text_encoders::PrefixCacheReport* report = nullptr);

// The first embedding of a `mmgen encode` file (prompt_embeds.0, [tokens, hidden]) as float32
// on the host, [tokens, hidden]: what --prompt-embeds / --negative-prompt-embeds (`flag`, named in
// the errors) give a pipeline instead of running its text encoder. `hidden` is the width the
// transformer takes (Wan's text_dim, Z-Image's cap_feat_dim); another width, a missing tensor or
// a missing file is refused in one line that names the file.
Tensor read_prompt_embeddings(const std::filesystem::path& path, int64_t hidden, const char* flag);

}  // namespace mmgen
