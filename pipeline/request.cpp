#include "pipeline/request.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <random>

#include "attention/device_choice.h"
#include "core/error.h"
#include "core/limits.h"
#include "core/system_memory.h"
#include "core/text.h"

namespace mmgen {

using json = nlohmann::json;

namespace {

template <typename T>
std::optional<T> optional_value(const json& settings, const char* key) {
  if (!settings.contains(key) || settings[key].is_null()) return std::nullopt;
  return settings[key].get<T>();
}

// A random seed for --seed -1, below 2^32 so that it is easy to read and type back.
uint64_t random_seed() {
  std::random_device device;
  return (uint64_t(device()) << 16 ^ device()) & 0xffffffffull;
}

}  // namespace

std::optional<std::string> output_format_of_name(const std::string& file_name) {
  const std::string extension = fs::path(file_name).extension().string();
  if (extension.size() < 2) return std::nullopt;
  std::string lower = extension.substr(1);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return char(std::tolower(c)); });
  if (lower == "jpeg") return "jpg";
  for (const char* format : {"png", "jpg", "webp", "mp4", "npy"})
    if (lower == format) return lower;
  for (const char* other : {"gif", "bmp", "tif", "tiff", "apng", "avif", "heic", "avi", "mov",
                            "mkv", "webm", "m4v", "mpg", "mpeg", "wmv", "flv", "npz", "pt"})
    if (lower == other)
      fail(
          "--output-file-name {}: mmgen cannot write .{} files; name it .png, .jpg, .webp (one "
          "frame), .mp4 (several frames) or .npy (exact floats)",
          file_name, lower);
  return std::nullopt;
}

Request request_from_settings(const json& settings) {
  Request r;
  auto text = [&](const char* key) {
    return optional_value<std::string>(settings, key).value_or("");
  };
  r.model_path = text("model-path");
  r.prompt = text("prompt");
  r.negative_prompt = text("negative-prompt");
  if (auto file = optional_value<std::string>(settings, "prompt-file-path"))
    r.prompt_file_path = *file;
  r.height = settings.value("height", int64_t(0));
  r.width = settings.value("width", int64_t(0));
  r.num_frames = settings.value("num-frames", int64_t(1));
  r.fps = settings.value("fps", 16.0);
  r.num_inference_steps = settings.value("num-inference-steps", int64_t(0));
  r.guidance_scale = settings.value("guidance-scale", 1.0);
  r.true_cfg_scale = settings.value("true-cfg-scale", 1.0);
  r.cfg_truncation = settings.value("cfg-truncation", 1.0);
  r.cfg_normalization = settings.value("cfg-normalization", 0.0);
  r.flow_shift = optional_value<double>(settings, "flow-shift");
  r.max_sequence_length = settings.value("max-sequence-length", int64_t(0));
  const int64_t seed = settings.value("seed", int64_t(0));
  check(seed >= -1,
        "--seed: {} is negative; use a number from 0 to 2^63-1, or -1 for a random seed", seed);
  const bool random = seed == -1;
  r.seed = random ? random_seed() : uint64_t(seed);
  r.output_path = text("output-path");
  r.output_file_name = optional_value<std::string>(settings, "output-file-name");
  if (auto latents = optional_value<std::string>(settings, "latents")) r.latents = *latents;
  if (auto file = optional_value<std::string>(settings, "prompt-embeds")) r.prompt_embeds = *file;
  if (auto file = optional_value<std::string>(settings, "negative-prompt-embeds"))
    r.negative_prompt_embeds = *file;
  r.attention_backend = optional_value<std::string>(settings, "attention-backend");
  r.attention_backend_config = settings.value("attention-backend-config", json());
  r.component_attention_backends = settings.value("component-attention-backends", json());
  if (settings.contains("component-paths"))
    for (auto it = settings["component-paths"].begin(); it != settings["component-paths"].end();
         ++it)
      r.component_paths[it.key()] = it->get<std::string>();
  if (settings.contains("lora-path") && !settings["lora-path"].is_null()) {
    // A config file may give one LoRA as a plain value instead of a list of one.
    const auto as_list = [](const json& value) {
      return value.is_array() ? value : value.is_null() ? json::array() : json::array({value});
    };
    const json paths = as_list(settings["lora-path"]);
    const json scales = as_list(settings.value("lora-scale", json()));
    check(scales.size() <= paths.size(),
          "--lora-scale is given {} times for {} --lora-path; give one scale per LoRA, in the same "
          "order (or none: 1.0)",
          scales.size(), paths.size());
    for (size_t i = 0; i < paths.size(); ++i) {
      const double scale = i < scales.size() ? scales[i].get<double>() : 1.0;
      check(std::isfinite(scale) && std::abs(scale) <= 100,
            "--lora-scale {}: give a number from -100 to 100 (1 is the LoRA as trained)", scale);
      r.loras.push_back({paths[i].get<std::string>(), scale});
    }
  } else {
    check(!settings.contains("lora-scale") || settings["lora-scale"].is_null(),
          "--lora-scale without --lora-path: give the LoRA file it scales");
  }
  r.lora_mode = lora::lora_mode_named(settings.value("lora-mode", std::string("auto")));
  r.vae_tiling = settings.value("vae-tiling", false);
  r.vae_tile_size = settings.value("vae-tile-size", int64_t(256));
  r.vae_tile_overlap = settings.value("vae-tile-overlap", int64_t(64));
  r.overwrite = settings.value("overwrite", false);
  r.skip_memory_check = settings.value("skip-memory-check", false);
  const attention::DeviceChoice device =
      attention::choose_device(settings.value("device", std::string("auto")));
  r.device = device.device;
  r.device_reason = device.reason;
  r.threads = settings.value("threads", int64_t(0));
  r.gpus = settings.value("gpus", int64_t(1));
  r.cfg_parallel = settings.value("cfg-parallel", false);
  r.cpu_bf16_products = settings.value("cpu-matmul-precision", std::string("fp32")) == "bf16";
  r.gpu_fp8_products = settings.value("gpu-matmul-precision", std::string("bf16")) == "fp8";
  if (const std::string limit = text("max-gpu-memory"); !limit.empty()) {
    const std::optional<uint64_t> bytes = parse_byte_size(limit);
    check(bytes && *bytes >= (uint64_t(64) << 20),
          "--max-gpu-memory {}: give a size from 64 MiB to 1 EiB, such as 24GiB or 20000M",
          text_for_message(limit));
    r.max_gpu_memory = *bytes;
  }
  r.gpu_offload = settings.value("gpu-offload", std::string("auto"));
  r.log_level = settings.value("log-level", std::string("info"));
  r.quiet = settings.value("quiet", false);
  r.dry_run = settings.value("dry-run", false);

  // The format: --output-format, else what --output-file-name's extension names, else png for one
  // frame and mp4 for more. A name and a format that disagree are refused before any work.
  // jpeg is jpg, as a .jpeg name is.
  const std::string format = text("output-format") == "jpeg" ? "jpg" : text("output-format");
  const std::optional<std::string> named_format =
      r.output_file_name ? output_format_of_name(*r.output_file_name) : std::nullopt;
  if (!format.empty() && named_format)
    check(*named_format == format,
          "--output-file-name {} is a .{} name but --output-format is {}; make them agree (or give "
          "only one)",
          *r.output_file_name, *named_format, format);
  r.output_format =
      !format.empty() ? format : named_format.value_or(r.num_frames == 1 ? "png" : "mp4");

  // Every number is bounded before any work (core/limits.h), so no size computed from them can
  // overflow; whether the request fits this machine is the memory estimate's job.
  check(r.height > 0 && r.width > 0 && r.height <= Limits::kMaxImageSide &&
            r.width <= Limits::kMaxImageSide,
        "--width and --height must be from 1 to {} (got {}x{}, width x height)",
        Limits::kMaxImageSide, r.width, r.height);
  check(r.num_frames > 0 && r.num_frames <= Limits::kMaxFrames,
        "--num-frames must be from 1 to {} (got {})", Limits::kMaxFrames, r.num_frames);
  check(r.num_inference_steps > 0 && r.num_inference_steps <= Limits::kMaxInferenceSteps,
        "--num-inference-steps must be from 1 to {} (got {})", Limits::kMaxInferenceSteps,
        r.num_inference_steps);
  check(r.max_sequence_length > 0 && r.max_sequence_length <= Limits::kMaxSequenceLength,
        "--max-sequence-length must be from 1 to {} (got {})", Limits::kMaxSequenceLength,
        r.max_sequence_length);
  for (const auto& [flag, text] :
       {std::pair{"--prompt", &r.prompt}, std::pair{"--negative-prompt", &r.negative_prompt}})
    check(text->size() <= Limits::kMaxPromptBytes,
          "{} is {} bytes long; at most {} are taken (the text encoder keeps only "
          "--max-sequence-length tokens)",
          flag, text->size(), Limits::kMaxPromptBytes);
  // Written as "in range" so that NaN, which compares false, is refused too.
  check(r.guidance_scale >= 0 && r.guidance_scale <= Limits::kMaxGuidanceScale,
        "--guidance-scale must be from 0 to {} (got {})", Limits::kMaxGuidanceScale,
        r.guidance_scale);
  check(r.fps >= Limits::kMinFps && r.fps <= Limits::kMaxFps,
        "--fps must be from {} to {} (got {})", Limits::kMinFps, Limits::kMaxFps, r.fps);
  check(r.threads >= 0 && r.threads <= Limits::kMaxThreads,
        "--threads must be 0 (all cores) to {} (got {})", Limits::kMaxThreads, r.threads);
  check(r.gpus >= 1 && r.gpus <= Limits::kMaxGpus, "--gpus must be from 1 to {} (got {})",
        Limits::kMaxGpus, r.gpus);
  check(r.gpus == 1 || r.device == "cuda",
        "--gpus {} spreads a generation over GPUs, but the device is {} ({}); pass --device cuda "
        "or drop --gpus",
        r.gpus, r.device, r.device_reason);
  check(r.true_cfg_scale >= 0 && r.true_cfg_scale <= Limits::kMaxGuidanceScale,
        "--true-cfg-scale must be from 0 to {} (got {}); 1 turns it off", Limits::kMaxGuidanceScale,
        r.true_cfg_scale);
  // Each condition that fails is named alone, with the value that fails it.
  check(!r.cfg_parallel || r.gpus % 2 == 0,
        "--cfg-parallel runs the two guidance branches on two halves of the GPUs: it needs an "
        "even --gpus (got {})",
        r.gpus);
  check(!r.cfg_parallel || r.guidance_scale > 1,
        "--cfg-parallel runs the two guidance branches on two halves of the GPUs: it needs "
        "guidance on (--guidance-scale above 1, got {})",
        r.guidance_scale);
  if (r.vae_tiling)
    check(r.vae_tile_size > 0 && r.vae_tile_size <= Limits::kMaxImageSide &&
              r.vae_tile_overlap >= 0 && r.vae_tile_overlap < r.vae_tile_size,
          "--vae-tile-size {} must be from 1 to {} and --vae-tile-overlap {} from 0 to less than "
          "the tile size",
          r.vae_tile_size, Limits::kMaxImageSide, r.vae_tile_overlap);
  check(r.cfg_truncation >= 0 && r.cfg_truncation <= Limits::kMaxGuidanceScale,
        "--cfg-truncation must be from 0 to {} (got {}); 1 or more never truncates",
        Limits::kMaxGuidanceScale, r.cfg_truncation);
  check(r.cfg_normalization >= 0 && r.cfg_normalization <= Limits::kMaxGuidanceScale,
        "--cfg-normalization must be from 0 (off) to {} (got {}); 1 is diffusers' True",
        Limits::kMaxGuidanceScale, r.cfg_normalization);
  if (r.flow_shift)
    check(*r.flow_shift > 0 && std::isfinite(*r.flow_shift),
          "--flow-shift must be a positive number (got {})", *r.flow_shift);
  const bool still_image =
      r.output_format == "png" || r.output_format == "jpg" || r.output_format == "webp";
  if (named_format && format.empty())
    check(!still_image || r.num_frames == 1,
          "--output-file-name {}: a .{} file holds one picture but --num-frames is {}; name it "
          ".mp4 or .npy for video (or pass --num-frames 1)",
          *r.output_file_name, fs::path(*r.output_file_name).extension().string().substr(1),
          r.num_frames);
  check(!still_image || r.num_frames == 1,
        "--output-format {} holds one picture but --num-frames is {}; use mp4 or npy for video",
        r.output_format, r.num_frames);

  for (auto it = settings.begin(); it != settings.end(); ++it) {
    std::string key = it.key();
    std::replace(key.begin(), key.end(), '-', '_');
    r.settings[key] = *it;
  }
  r.settings["output_format"] = r.output_format;
  // The seed that runs, so the output's settings reproduce it.
  r.settings["seed"] = r.seed;
  if (random) r.settings["seed_was_random"] = true;
  r.settings["device"] = r.device;  // what runs, so the sidecar records it
  return r;
}

}  // namespace mmgen
