#include "pipeline/memory_estimate.h"

#include <algorithm>

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

uint64_t GpuWeights::resident(bool stage_offload) const {
  return (stage_offload ? std::max(text_encoder, transformer) : text_encoder + transformer) + vae;
}

nlohmann::json GpuWeights::to_json(bool stage_offload) const {
  return {{"text_encoder_bytes", text_encoder},
          {"transformer_bytes", transformer},
          {"vae_bytes", vae},
          {"stage_offload", stage_offload},
          {"resident_bytes", resident(stage_offload)}};
}

}  // namespace mmgen
