// `mmgen encode`: the prompt embeddings a pipeline would feed its transformer, computed from the
// text components alone and written to a safetensors file (one float32 tensor per prompt,
// `prompt_embeds.{i}` in prompt order, [tokens, hidden]). Users precompute embeddings with it;
// tests compare them with the references.
//
// The text encoder's class (model_index.json) decides the recipe:
//   UMT5EncoderModel / T5EncoderModel (Wan): cleaned prompt, padded to --max-sequence-length,
//     encoded with the mask, zero-filled after the real tokens: [max_sequence_length, hidden];
//   Qwen3Model / Qwen3ForCausalLM (Z-Image): chat template, truncated to --max-sequence-length,
//     hidden_states[-2] at the real tokens: [tokens, hidden].
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/file.h"
#include "core/tensor.h"

namespace mmgen::cli {

struct EncodeOptions {
  fs::path model_path;
  std::string component = "text_encoder";
  std::vector<std::string> prompts;     // --prompt, in order
  std::optional<fs::path> prompt_file;  // --prompt-file-path: see generate/prompt_file.h
  int64_t page_size = 1;                // tokens per KV page (paged attention)
  std::string attention_backend;        // paged-family backend; empty: automatic
  std::optional<int64_t> max_sequence_length;
  fs::path out;
};

// Parses the arguments after `encode`; `--flag value` or `--flag=value`.
EncodeOptions parse_encode_arguments(const std::vector<std::string>& arguments);

// The prompts in order: --prompt values, then the file's prompts (read_prompt_file).
std::vector<std::string> collect_prompts(const EncodeOptions& options);

struct EncodeResult {
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
EncodeResult encode_prompts(const EncodeOptions& options);

// Parses, encodes, writes and prints a one-line summary; --help prints encode_help().
int run_encode(const std::vector<std::string>& arguments);
std::string encode_help();

}  // namespace mmgen::cli
