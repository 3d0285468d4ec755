// How much host memory a request needs, from the model's headers and configs alone (nothing is
// loaded): the weights that stay mapped while the pipeline runs, plus the largest of its stages'
// working sets (text encoding, denoising, VAE decode with the output frames). `mmgen inspect`
// prints it; `generate` refuses a request whose total exceeds the free memory before loading
// anything. Figures are estimates from the buffers the CPU code allocates (documented in each
// pipeline's estimator); tests hold them against measured peaks.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace mmgen {

// The estimators count activations in float32, as the CPU code computes them.
inline constexpr uint64_t kFloatBytes = 4;
// The process before any model: libraries, OpenMP pools, allocator arenas (measured ~40 MiB on
// the tiny model; rounded up).
inline constexpr uint64_t kRuntimeBytes = 64ull << 20;
// A parsed tokenizer (vocabulary maps, normalizer tables) against its files on disk.
inline constexpr uint64_t kTokenizerExpansion = 6;

struct MemoryEstimate {
  uint64_t weights = 0;        // component tensors, mapped for the whole run
  uint64_t overhead = 0;       // runtime, tokenizer tables, libraries
  uint64_t text_encoding = 0;  // the text encoder's activations
  uint64_t denoising = 0;      // the transformer's activations, latents and scheduler state
  uint64_t decoding = 0;       // the VAE decode's working set
  uint64_t output = 0;         // the decoded video and the frames written (live during decode)

  // The peak: weights and overhead are held throughout; the stages run one after another.
  uint64_t total() const;
  // The stage that sets the peak: "text encoding", "denoising" or "VAE decode".
  std::string largest_stage() const;
  nlohmann::json to_json() const;
};

// How a pipeline keeps its weights on the GPU (--gpu-offload).
struct GpuOffload {
  bool stages = false;  // one stage's components on the GPU at a time (text encoder, transformer)
  bool blocks = false;  // the transformer's blocks streamed from page-locked host memory
  std::string name() const { return blocks ? "blocks" : stages ? "stages" : "none"; }
};

// The weights a pipeline keeps on the GPU with --device cuda, per large component, in the form the
// GPU holds them (from configs alone; activations are not counted). What `--max-gpu-memory` is
// checked against before loading, and what --dry-run prints.
struct GpuWeights {
  uint64_t text_encoder = 0;  // 0: the request needs no text encoder (precomputed embeddings)
  uint64_t transformer = 0;
  uint64_t transformer_streamed = 0;  // with its blocks streamed: the rest and two blocks' slots
  uint64_t vae = 0;                   // an upper bound: every VAE parameter in float32
  // Resident at once: everything, or with stage offload the larger of the text encoder's and the
  // transformer's stage, the VAE beside either; streamed blocks count as their two slots.
  uint64_t resident(const GpuOffload& offload) const;
  nlohmann::json to_json(const GpuOffload& offload) const;
};

// --gpu-offload MODE for a pipeline that can offload (`supported`: its stages and transformer
// blocks) or not. "none": everything resident; "stages", "blocks": as named (blocks implies
// stages); "auto": nothing without a --max-gpu-memory limit, and under one the stages, and the
// blocks too when the transformer's resident weights would take more than three quarters of the
// limit (a quarter left for the activations). A pipeline that cannot offload refuses an explicit
// stages or blocks in one line, and auto gives it none.
GpuOffload choose_gpu_offload(const std::string& mode, uint64_t max_gpu_memory, bool supported,
                              uint64_t transformer_resident_bytes);

}  // namespace mmgen
