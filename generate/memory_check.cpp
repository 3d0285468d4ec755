#include "generate/memory_check.h"

#include <fmt/format.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "core/system_memory.h"

namespace mmgen::cli {

namespace {

bool valid(const PipelineSpec& spec, const Request& request, const ModelIndex& index) {
  try {
    spec.validate(request, index);
    return true;
  } catch (const Error&) {
    return false;
  }
}

// The largest frame count below the request's that the pipeline accepts and that fits.
std::optional<int64_t> fitting_frames(const PipelineSpec& spec, Request request,
                                      const ModelIndex& index, const ModelInventory& inventory,
                                      uint64_t available) {
  for (int64_t frames = request.num_frames - 1; frames >= 1; --frames) {
    request.num_frames = frames;
    if (!valid(spec, request, index)) continue;
    if (spec.estimate_memory(request, index, inventory).total() <= available) return frames;
  }
  return std::nullopt;
}

// The largest size with about the request's aspect ratio that the pipeline accepts and that fits.
std::optional<std::pair<int64_t, int64_t>> fitting_size(const PipelineSpec& spec, Request request,
                                                        const ModelIndex& index,
                                                        const ModelInventory& inventory,
                                                        uint64_t available) {
  const int64_t height = request.height, width = request.width;
  for (int percent = 95; percent >= 5; percent -= 5) {
    // Rounded down to a multiple of 16, which every pipeline here accepts when any is accepted.
    request.height = std::max<int64_t>(16, height * percent / 100 / 16 * 16);
    request.width = std::max<int64_t>(16, width * percent / 100 / 16 * 16);
    if (!valid(spec, request, index)) continue;
    if (spec.estimate_memory(request, index, inventory).total() <= available)
      return std::make_pair(request.height, request.width);
  }
  return std::nullopt;
}

}  // namespace

MemoryCheck check_request_memory(const PipelineSpec& spec, const Request& request,
                                 const ModelIndex& index, const ModelInventory& inventory,
                                 const std::optional<AvailableMemory>& available) {
  MemoryCheck result;
  result.estimate = spec.estimate_memory(request, index, inventory);
  result.available = available;
  if (result.fits()) return result;
  const uint64_t free = available->bytes;
  // Tiling first: it changes nothing in the picture's size or length; then smaller tiles. When
  // no tiling fits on its own, fewer frames and smaller sizes are offered on top of the smallest
  // tiles (or of the request as it is, when tiling is not possible).
  Request base = request;
  std::string prefix;
  Request tiled = request;
  tiled.vae_tiling = true;
  if (valid(spec, tiled, index)) {
    const int64_t given = request.vae_tile_size;
    for (int64_t size = given; size >= 64; size /= 2) {
      tiled.vae_tile_size = size / 8 * 8;
      tiled.vae_tile_overlap = std::min(request.vae_tile_overlap, tiled.vae_tile_size / 4 / 8 * 8);
      if (tiled.vae_tiling == request.vae_tiling && size == given) continue;  // the request itself
      if (!valid(spec, tiled, index)) continue;
      std::string flags = request.vae_tiling ? "" : "--vae-tiling";
      if (size != given || tiled.vae_tile_overlap != request.vae_tile_overlap)
        flags += fmt::format("{}--vae-tile-size {} --vae-tile-overlap {}", flags.empty() ? "" : " ",
                             tiled.vae_tile_size, tiled.vae_tile_overlap);
      if (spec.estimate_memory(tiled, index, inventory).total() <= free) {
        result.suggestions.push_back(flags);
        break;
      }
      base = tiled;
      prefix = flags + " ";
    }
    if (!result.suggestions.empty()) {
      base = request;
      prefix.clear();
    }
  }
  if (auto frames = fitting_frames(spec, base, index, inventory, free))
    result.suggestions.push_back(fmt::format("{}--num-frames {}", prefix, *frames));
  if (auto size = fitting_size(spec, base, index, inventory, free))
    result.suggestions.push_back(
        fmt::format("{}--width {} --height {}", prefix, size->second, size->first));
  return result;
}

std::string memory_refusal(const MemoryCheck& check, const Request& request) {
  const MemoryEstimate& e = check.estimate;
  std::string text =
      fmt::format("this request needs about {} of memory (weights {}, {} {}) but {} is free ({})",
                  format_bytes(e.total()), format_bytes(e.weights), e.largest_stage(),
                  format_bytes(e.total() - e.weights - e.overhead),
                  format_bytes(check.available->bytes), check.available->source);
  text += fmt::format(" for {}x{}, {} frame(s){}", request.width, request.height,
                      request.num_frames, request.vae_tiling ? " with --vae-tiling" : "");
  if (check.suggestions.empty()) {
    text += fmt::format("; the weights alone need {}: use a machine with more memory",
                        format_bytes(e.weights + e.overhead));
  } else {
    text += "; what would fit: ";
    for (size_t i = 0; i < check.suggestions.size(); ++i)
      text += (i ? " or " : "") + check.suggestions[i];
  }
  return text + "; --skip-memory-check runs it anyway";
}

namespace {

// What --gpu-offload (and --max-gpu-memory under auto) make the pipeline do with these weights.
GpuOffload offload_of(const PipelineSpec& spec, const Request& request, const GpuWeights& gpu) {
  return choose_gpu_offload(request.gpu_offload, request.max_gpu_memory, spec.stage_offload,
                            gpu.transformer);
}

}  // namespace

GpuOffload planned_gpu_offload(const PipelineSpec& spec, const Request& request,
                               const ModelIndex& index, const ModelInventory& inventory) {
  if (!spec.estimate_gpu_weights)
    return choose_gpu_offload(request.gpu_offload, request.max_gpu_memory, false, 0);
  return offload_of(spec, request, spec.estimate_gpu_weights(request, index, inventory));
}

nlohmann::json gpu_weights_json(const PipelineSpec& spec, const Request& request,
                                const ModelIndex& index, const ModelInventory& inventory) {
  if (!spec.estimate_gpu_weights) return nullptr;
  const GpuWeights gpu = spec.estimate_gpu_weights(request, index, inventory);
  return gpu.to_json(offload_of(spec, request, gpu));
}

std::optional<std::string> gpu_weights_refusal(const PipelineSpec& spec, const Request& request,
                                               const ModelIndex& index,
                                               const ModelInventory& inventory) {
  if (request.device != "cuda" || !request.max_gpu_memory || !spec.estimate_gpu_weights)
    return std::nullopt;
  const GpuWeights gpu = spec.estimate_gpu_weights(request, index, inventory);
  const GpuOffload offload = offload_of(spec, request, gpu);
  const uint64_t resident = gpu.resident(offload);
  if (resident <= request.max_gpu_memory) return std::nullopt;
  // What would fit: FP8 products, streamed blocks, or both.
  std::vector<std::string> fits;
  Request with_fp8 = request;
  with_fp8.gpu_fp8_products = true;
  const GpuWeights fp8 = spec.estimate_gpu_weights(with_fp8, index, inventory);
  if (!request.gpu_fp8_products && fp8.resident(offload) <= request.max_gpu_memory)
    fits.push_back(
        fmt::format("--gpu-matmul-precision fp8 ({})", format_bytes(fp8.resident(offload))));
  if (spec.stage_offload && !offload.blocks) {
    const GpuOffload blocks{true, true};
    if (gpu.resident(blocks) <= request.max_gpu_memory)
      fits.push_back(fmt::format("--gpu-offload blocks ({})", format_bytes(gpu.resident(blocks))));
  }
  std::string suggestion;
  for (const std::string& fit : fits) suggestion += ", or use " + fit;
  return fmt::format(
      "--max-gpu-memory {}: the weights resident on the GPU at once take {} (text encoder {}, "
      "transformer {}, VAE at most {}){}; raise the limit{}",
      format_bytes(request.max_gpu_memory), format_bytes(resident), format_bytes(gpu.text_encoder),
      format_bytes(offload.blocks ? gpu.transformer_streamed : gpu.transformer),
      format_bytes(gpu.vae),
      offload.blocks   ? ", one stage at a time, the transformer's blocks streamed"
      : offload.stages ? ", one stage at a time"
                       : "",
      suggestion);
}

}  // namespace mmgen::cli
