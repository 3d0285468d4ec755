// Attention on GPU tensors, for models written once over device-neutral ops: when a layer's q, k
// and v live on the GPU, the model's attention call (e.g. dit::wan_attention) comes here instead
// of the CPU backends. Dense layers run the kernel the attention plan chose; self-attention may
// run a GPU sparse backend (attention/sparse_self_attention_cuda.h, built from the backend's
// folder). In a build without CUDA no GPU tensor exists, and these throw.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string_view>

#include "attention/backend.h"
#include "core/tensor.h"

namespace mmgen::cuda {
class SparseSelfAttentionCuda;
}

namespace mmgen::attention {

// The dense kernel of a layer kind, as the plan chose it: Flash for `fa` (the FlashAttention
// kernel where the head size is compiled in, else the reference kernel; the plan only picks fa
// where it is), Reference for `torch_sdpa` (the plain reference kernel).
enum class DenseKernel { Flash, Reference };
struct DenseKernels {
  DenseKernel self = DenseKernel::Flash;
  DenseKernel cross = DenseKernel::Flash;
};
// The dense GPU kernel a DiT backend's layers run on (its descriptor says; Flash for a name that
// is not a DiT backend).
DenseKernel dense_kernel_for(std::string_view backend);

// What a GPU run's attention holds beyond the tensors.
struct GpuAttention {
  std::shared_ptr<cuda::SparseSelfAttentionCuda> sparse;  // null: dense self-attention
  DenseKernels dense;
};

// q [B, Sq, H, D], k and v [B, Sk, H, D], bf16 on the GPU; returns [B, Sq, H, D] bf16 there.
Tensor dense_attention_gpu(const Tensor& q, const Tensor& k, const Tensor& v, float scale,
                           DenseKernel kernel);

// Self-attention of video tokens (q, k, v [B, t·h·w, H, D] bf16 on the GPU) through a sparse
// backend, told the denoising step and layer; `gate` is VSA's to_gate_compress output as
// float32 [B, S, H, D] on the GPU, or undefined; `weights` the layer's extra checkpoint weights on
// the GPU for a backend that wants them (SLA's proj_l), or null; `run` the step and layer counts
// and the guidance branch (SVG2's dense fractions and per-branch centroids).
struct SparseRun {
  int64_t num_steps = 1, num_layers = 1;
  int branch = 0;
};
Tensor sparse_self_attention_gpu(cuda::SparseSelfAttentionCuda& backend, const Tensor& q,
                                 const Tensor& k, const Tensor& v, std::array<int64_t, 3> grid,
                                 int64_t step, int64_t layer, float scale, const Tensor& gate,
                                 const LayerWeights* weights = nullptr, SparseRun run = {});
// Single-head attention over the pixels of one frame, for a VAE's mid-block attention:
// q, k, v [C, P] float32 channel-major on the GPU (as a 1×1 convolution leaves them); writes
// out [C, P] = (softmax(scale · qᵀk) · vᵀ)ᵀ, a contiguous float32 tensor (or view) there. Head size
// C (384 in the Wan VAE) has no kernel of ours, so this is the dense reference: two cuBLASLt
// float32 products around a row softmax, on TF32 tensor cores, or in full float32 with `exact`.
void channel_attention_gpu(const Tensor& q, const Tensor& k, const Tensor& v, float scale,
                           bool exact, Tensor& out);

// Whether the backend reads VSA's gate; whether it reads the layer's extra weights (the gate's
// among them).
bool sparse_backend_wants_gate(const cuda::SparseSelfAttentionCuda& backend);
bool sparse_backend_wants_layer_weights(const cuda::SparseSelfAttentionCuda& backend);
// Whether the backend attends each batch element alone, keeping nothing between calls (the two
// guidance branches may then run as one batch).
bool sparse_backend_batch_elements_alone(const cuda::SparseSelfAttentionCuda& backend);

}  // namespace mmgen::attention
