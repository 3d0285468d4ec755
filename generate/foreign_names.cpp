#include "generate/foreign_names.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <vector>

#include "core/text.h"

namespace mmgen::cli {

namespace {

struct ForeignName {
  std::string_view name;         // lower case, words joined by '-'
  std::string_view ours;         // mmgen's flag without dashes; empty for a coming feature
  std::string_view coming = {};  // what is coming, when `ours` is empty
};

// Other tools' spellings: stable-diffusion.cpp (sd), ComfyUI, diffusers' call arguments, SGLang,
// Wan's generate.py.
const std::vector<ForeignName>& foreign_names() {
  static const std::vector<ForeignName> names = {
      {"steps", "num-inference-steps"},
      {"num-steps", "num-inference-steps"},
      {"num-step", "num-inference-steps"},
      {"sample-steps", "num-inference-steps"},
      {"sampling-steps", "num-inference-steps"},
      {"inference-steps", "num-inference-steps"},
      {"cfg-scale", "guidance-scale"},
      {"cfg", "guidance-scale"},
      {"guidance", "guidance-scale"},
      {"sample-guide-scale", "guidance-scale"},
      {"scale", "guidance-scale"},
      {"w", "width"},
      {"h", "height"},
      {"size", "width W --height H"},
      {"frames", "num-frames"},
      {"num-frame", "num-frames"},
      {"video-length", "num-frames"},
      {"frame-num", "num-frames"},
      {"length", "num-frames"},
      {"p", "prompt"},
      {"n", "negative-prompt"},
      {"neg-prompt", "negative-prompt"},
      {"negative", "negative-prompt"},
      {"m", "model-path"},
      {"model", "model-path"},
      {"ckpt-dir", "model-path"},
      {"diffusion-model", "transformer-path"},
      {"vae", "vae-path"},
      {"t5xxl", "text-encoder-path"},
      {"o", "output-path (folder) or --output-file-name"},
      {"output", "output-path (folder) or --output-file-name"},
      {"output-dir", "output-path"},
      {"save-file", "output-file-name"},
      {"s", "seed"},
      {"base-seed", "seed"},
      {"t", "threads"},
      {"sample-shift", "flow-shift"},
      {"shift", "flow-shift"},
      {"num-gpus", "gpus"},
      {"offload-model", "gpu-offload"},
      {"attention", "attention-backend"},
      {"attn-backend", "attention-backend"},
      {"attention-mode", "attention-backend"},
      {"batch-prompts", "prompt-file-path"},
      {"prompt-file", "prompt-file-path"},
      {"image-path", "", "image input (image-to-video, first-last-frame, img2img)"},
      {"image", "", "image input (image-to-video, first-last-frame, img2img)"},
      {"init-img", "", "image input (img2img)"},
      {"i", "", "image input (img2img)"},
      {"lora", "lora-path"},
      {"lora-weight", "lora-scale"},
      {"lora-model-dir", "",
       "LoRAs from a folder named in the prompt (<lora:name:weight>); mmgen takes --lora-path "
       "FILE and --lora-scale X"},
      {"sampler", "",
       "choosing the sampler (mmgen samples with the scheduler model_index.json names)"},
      {"sampling-method", "",
       "choosing the sampler (--sampler; mmgen samples with the scheduler model_index.json names)"},
      {"sample-solver", "",
       "choosing the sampler (--sampler; mmgen samples with the scheduler model_index.json names)"},
  };
  return names;
}

std::string normalized(std::string_view name) {
  std::string text(name);
  for (char& c : text) c = c == '_' ? '-' : char(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

}  // namespace

std::optional<std::string> foreign_option_hint(std::string_view name, std::string_view dashes) {
  const std::string wanted = normalized(name);
  for (const ForeignName& entry : foreign_names()) {
    if (entry.name != wanted) continue;
    if (entry.ours.empty())
      return fmt::format("{}{} is not in mmgen yet (coming: {})", dashes, name, entry.coming);
    // In a config file keys are written with underscores and no dashes.
    std::string ours(entry.ours);
    if (dashes.empty()) {
      ours = ours.substr(0, ours.find(' '));
      std::replace(ours.begin(), ours.end(), '-', '_');
      return fmt::format(" (mmgen calls it {})", ours);
    }
    return fmt::format(" (mmgen calls it --{})", ours);
  }
  return std::nullopt;
}

std::optional<std::string> foreign_command_hint(std::string_view command) {
  const std::string wanted = normalized(command);
  if (wanted == "serve" || wanted == "server")
    return "mmgen serve (an HTTP server with a job queue) is not in mmgen yet; it is coming. For "
           "now run `mmgen generate`, which loads the model once for a --prompt-file-path batch";
  for (const char* verb : {"txt2img", "txt2vid", "t2v", "t2i", "run", "sample", "infer", "gen"})
    if (wanted == verb) return std::string("mmgen calls it `generate` (mmgen generate --help)");
  const std::string nearest = nearest_name(
      wanted, {"generate", "inspect", "encode", "convert", "options", "backends", "attention"});
  if (!nearest.empty()) return fmt::format("did you mean `mmgen {}`?", nearest);
  return std::nullopt;
}

}  // namespace mmgen::cli
