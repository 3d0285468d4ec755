// WanTransformer3DModel on an NVIDIA GPU: the CPU model's checked weights uploaded once as bf16,
// every block on the device — cuBLASLt bf16 products with fp32 accumulation and the bias in the
// epilogue (and the feed-forward's GELU there too), fused row kernels between them (modulated
// LayerNorm, q/k RMSNorm with RoPE, gated residual), the residual stream in fp32, attention through
// the CUDA attention kernels. The time embedder runs on the CPU in fp32 (as diffusers keeps it);
// patchify/unpatchify too.
#pragma once

#include <array>
#include <chrono>
#include <map>
#include <memory>
#include <vector>

#include "attention/sparse_self_attention_cuda.h"
#include "core/cuda/device_memory.h"
#include "core/tensor.h"
#include "models/dit/wan_transformer.h"

namespace mmgen::cuda {

// The dense attention kernel of a layer kind, as the attention plan chose it: Flash for `fa`
// (the FlashAttention kernel where the head size is compiled in, else the reference kernel; the
// plan only picks fa where it is), Reference for `torch_sdpa` (the plain reference kernel).
enum class DenseKernel { Flash, Reference };
struct DenseKernels {
  DenseKernel self = DenseKernel::Flash;
  DenseKernel cross = DenseKernel::Flash;
};

class WanTransformerCuda {
 public:
  // Uploads the weights of `model` (which checked them); `model` must outlive this object.
  explicit WanTransformerCuda(const dit::WanTransformer& model);
  ~WanTransformerCuda();

  // Where a forward's time went: host preparation (patchify, time embedding, RoPE tables,
  // modulation, uploads), then the device work up to the result back on the host.
  struct Timings {
    double host_seconds = 0, device_seconds = 0;
  };

  // The same contract as dit::WanTransformer::forward; returns float32 on the host. `timings` may
  // be null. Self-attention is dense (`dense.self`) unless `self_attention` is given: a GPU
  // sparse backend, told the denoising `step` (STA's windows and skipped steps depend on it) and
  // handed VSA's gate where the checkpoint has to_gate_compress. Cross-attention is dense
  // (`dense.cross`).
  Tensor forward(const Tensor& latents, float timestep, const Tensor& text_embeds,
                 Timings* timings = nullptr, SparseSelfAttentionCuda* self_attention = nullptr,
                 int64_t step = 0, DenseKernels dense = {}) const;

  size_t weight_bytes() const { return weight_bytes_; }

 private:
  struct Linear {
    DeviceBuffer weight;  // bf16 [out, in]
    DeviceBuffer bias;    // in the product's output dtype
    int64_t out = 0, in = 0;
  };
  struct Block;

  Linear upload_linear(const std::string& prefix, bool bf16_output);
  DeviceBuffer upload_f32(const std::string& name);

  const dit::WanTransformer& model_;
  dit::TimeEmbedderWeights time_weights_;  // fp32 on the host: the time branch runs there
  // RoPE tables on the device for the last latent grid (the same for every step of a run).
  mutable std::array<int64_t, 3> rope_grid_{-1, -1, -1};
  mutable DeviceBuffer rope_cos_, rope_sin_;
  Linear patch_, text_1_, text_2_, proj_out_;
  std::vector<std::unique_ptr<Block>> blocks_;
  size_t weight_bytes_ = 0;
};

}  // namespace mmgen::cuda
