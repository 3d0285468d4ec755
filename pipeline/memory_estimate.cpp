#include "pipeline/memory_estimate.h"

#include <algorithm>

#include "core/error.h"

namespace mmgen {

uint64_t MemoryEstimate::total() const {
  return weights + overhead + std::max({text_encoding, denoising, decoding + output});
}

std::string MemoryEstimate::largest_stage() const {
  const uint64_t decode = decoding + output;
  if (decode >= denoising && decode >= text_encoding) return "VAE decode";
  return denoising >= text_encoding ? "denoising" : "text encoding";
}

nlohmann::json MemoryEstimate::to_json() const {
  return {{"weights_bytes", weights},
          {"overhead_bytes", overhead},
          {"text_encoding_bytes", text_encoding},
          {"denoising_bytes", denoising},
          {"vae_decode_bytes", decoding},
          {"output_bytes", output},
          {"total_bytes", total()},
          {"largest_stage", largest_stage()}};
}

uint64_t GpuWeights::resident(const GpuOffload& offload) const {
  const uint64_t transformer_bytes = offload.blocks ? transformer_streamed : transformer;
  return (offload.stages ? std::max(text_encoder, transformer_bytes)
                         : text_encoder + transformer_bytes) +
         vae;
}

nlohmann::json GpuWeights::to_json(const GpuOffload& offload) const {
  return {{"text_encoder_bytes", text_encoder},
          {"transformer_bytes", transformer},
          {"transformer_streamed_bytes", transformer_streamed},
          {"vae_bytes", vae},
          {"offload", offload.name()},
          {"stage_offload", offload.stages},
          {"resident_bytes", resident(offload)}};
}

GpuOffload choose_gpu_offload(const std::string& mode, uint64_t max_gpu_memory, bool supported,
                              uint64_t transformer_resident_bytes) {
  if (mode == "none") return {};
  if (mode == "stages" || mode == "blocks") {
    check(supported,
          "--gpu-offload {}: this pipeline keeps its components on the GPU (Wan offloads its "
          "stages and blocks); use --gpu-offload none or auto",
          mode);
    return {true, mode == "blocks"};
  }
  check(mode == "auto", "--gpu-offload {}: choose auto, none, stages or blocks", mode);
  if (!supported || max_gpu_memory == 0) return {};
  return {true, transformer_resident_bytes > max_gpu_memory / 4 * 3};
}

}  // namespace mmgen
