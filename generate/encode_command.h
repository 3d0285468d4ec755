// `mmgen encode`: parses its options (the shared option table, generate/options.h), runs
// pipeline/prompt_encoding.h's encode_prompts, and writes the embeddings to a safetensors file (one
// float32 tensor per prompt, `prompt_embeds.{i}` in prompt order, [tokens, hidden]).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/file.h"
#include "core/tensor.h"
#include "pipeline/prompt_encoding.h"

namespace mmgen::cli {

struct EncodeOptions {
  PromptEncodingRequest request;        // prompts: the --prompt values only
  std::optional<fs::path> prompt_file;  // --prompt-file-path: see generate/prompt_file.h
  fs::path out;
};

// Parses the arguments after `encode`; `--flag value` or `--flag=value`.
EncodeOptions parse_encode_arguments(const std::vector<std::string>& arguments);

// The prompts in order: --prompt values, then the file's prompts (read_prompt_file).
std::vector<std::string> collect_prompts(const EncodeOptions& options);

// Parses, encodes, writes and prints a one-line summary; --help prints encode_help().
int run_encode(const std::vector<std::string>& arguments);
std::string encode_help();

}  // namespace mmgen::cli
