// One generation request: every setting after merging the command line, a config file, the
// pipeline's defaults and the built-in defaults. The CLI builds it; pipelines read it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>

#include "models/lora/lora_file.h"

namespace mmgen {

namespace fs = std::filesystem;

struct ParallelRun;

struct Request {
  fs::path model_path;
  std::string prompt;
  std::string negative_prompt;
  std::optional<fs::path> prompt_file_path;
  int64_t height = 0;
  int64_t width = 0;
  int64_t num_frames = 1;
  double fps = 16;
  int64_t num_inference_steps = 0;
  double guidance_scale = 1;
  // FLUX / Qwen-Image true classifier-free guidance with the negative prompt; off at 1.
  double true_cfg_scale = 1;
  // Z-Image's guidance options, diffusers' cfg_truncation (guidance off once the normalised time
  // passes it; above 1 never) and cfg_normalization (the guided norm capped at this multiple of
  // the conditional one's; 0 off, 1 is diffusers' True).
  double cfg_truncation = 1.0;
  double cfg_normalization = 0.0;
  std::optional<double> flow_shift;
  int64_t max_sequence_length = 0;
  uint64_t seed = 0;
  fs::path output_path;
  std::optional<std::string> output_file_name;
  std::string output_format;  // resolved: png for one frame, mp4 for more, unless given
  std::optional<fs::path> latents;
  std::optional<fs::path> prompt_embeds;           // `mmgen encode` output for the prompt
  std::optional<fs::path> negative_prompt_embeds;  // and for the negative prompt
  std::optional<std::string> attention_backend;
  nlohmann::json attention_backend_config;          // null, a string spec, or an object
  nlohmann::json component_attention_backends;      // null, a string spec, or an object
  std::map<std::string, fs::path> component_paths;  // --<component>-path overrides
  std::vector<lora::LoraUse> loras;  // --lora-path / --lora-scale, in order (the transformer's)
  lora::LoraMode lora_mode = lora::LoraMode::Auto;  // --lora-mode
  bool vae_tiling = false;
  int64_t vae_tile_size = 256;    // output pixels, a multiple of the VAE's spatial factor
  int64_t vae_tile_overlap = 64;  // output pixels
  bool overwrite = false;
  bool skip_memory_check = false;
  std::string device = "cpu";  // resolved: "cpu" or "cuda" (--device auto chooses one)
  std::string device_reason;   // why: "auto: ...", "--device cuda"
  int64_t threads = 0;
  int64_t gpus = 1;           // --gpus: ranks of one generation (pipeline/parallel_run.h)
  bool cfg_parallel = false;  // --cfg-parallel: the guidance branches on two halves of them
  // The ranks' communicators when gpus > 1 (set by the CLI once the processes have joined).
  std::shared_ptr<ParallelRun> parallel;
  bool cpu_bf16_products = false;    // --cpu-matmul-precision bf16
  bool gpu_fp8_products = false;     // --gpu-matmul-precision fp8
  uint64_t max_gpu_memory = 0;       // --max-gpu-memory in bytes; 0: no limit
  std::string gpu_offload = "auto";  // --gpu-offload: auto, none, stages, blocks
  std::string log_level = "info";
  bool quiet = false;
  bool dry_run = false;

  // The settings (option names with dashes) that a --config file gave and the command line did
  // not: where a setting came from, for attention sources and unused backend settings.
  std::set<std::string> from_config_file;
  // The settings (dashes) someone chose for this run or model: the command line, a --config file
  // or the model folder's mmgen.yaml, not a pipeline's or the built-in defaults. A warning about
  // a value nothing reads names only these.
  std::set<std::string> given;

  // The merged settings as the dry-run prints them, keys with underscores.
  nlohmann::json settings = nlohmann::json::object();
};

// Builds a Request from merged settings (keys as option names with dashes). A seed of -1 becomes a
// random one here (settings["seed"] holds the drawn value, settings["seed_was_random"] says so).
Request request_from_settings(const nlohmann::json& settings);

// The output format a file name's extension asks for: png, jpg (.jpg, .jpeg), webp, mp4, npy,
// case-insensitive; nullopt when the name has no extension or one that names no image or video
// format (run.v2). A media extension mmgen cannot write (.gif, .avi, ...) is an Error naming the
// choices.
std::optional<std::string> output_format_of_name(const std::string& file_name);

}  // namespace mmgen
