// Attention on GPU tensors, for models written once over device-neutral ops: when a layer's q, k
// and v live on the GPU, its backend (attention/layer.h) is a GPU one: a backend's GPU half
// (attention/sparse_self_attention_cuda.h, built from the backend's folder) or the dense kernel
// its descriptor names (make_dense_gpu_backend). In a build without CUDA no GPU tensor exists,
// and these throw.
#pragma once

#include <memory>
#include <string_view>

#include "attention/backend.h"
#include "core/tensor.h"

namespace mmgen::attention {

// The dense GPU kernel of a backend: Flash for `fa` and the others (the FlashAttention kernel
// where the head size is compiled in, else the reference kernel), Reference for `torch_sdpa` (the
// plain reference kernel, what the others are checked against).
enum class DenseKernel { Flash, Reference };
// The dense GPU kernel a DiT backend's layers run on (its descriptor says; Flash for a name that
// is not a DiT backend).
DenseKernel dense_kernel_for(std::string_view backend);

// q [B, Sq, H, D], k and v [B, Sk, H, D], bf16 on the GPU; returns [B, Sq, H, D] bf16 there.
Tensor dense_attention_gpu(const Tensor& q, const Tensor& k, const Tensor& v, float scale,
                           DenseKernel kernel);

// A backend that runs dense_attention_gpu with `kernel`, named `name` (the backend it stands for):
// stateless, each batch element alone.
std::shared_ptr<AttentionBackend> make_dense_gpu_backend(std::string_view name, DenseKernel kernel);

// Single-head attention over the pixels of one frame, for a VAE's mid-block attention:
// q, k, v [C, P] float32 channel-major on the GPU (as a 1×1 convolution leaves them); writes
// out [C, P] = (softmax(scale · qᵀk) · vᵀ)ᵀ, a contiguous float32 tensor (or view) there. Head size
// C (384 in the Wan VAE) has no kernel of ours, so this is the dense reference: two cuBLASLt
// float32 products around a row softmax, on TF32 tensor cores, or in full float32 with `exact`.
void channel_attention_gpu(const Tensor& q, const Tensor& k, const Tensor& v, float scale,
                           bool exact, Tensor& out);

}  // namespace mmgen::attention
