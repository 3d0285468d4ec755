// Plain attention on the GPU for any head size up to 256 (the `torch_sdpa` of the CUDA build): one
// warp per query row and head, fp32 online softmax. Slow, simple and exact to fp32; it serves the
// head sizes the flash kernels are not compiled for (small test models) and checks them.
#pragma once

#include <cuda_runtime.h>

#include "attention/cuda/flash_attention.h"

namespace mmgen::cuda {

// Same arguments as flash_attention_forward (block lists and `kernel` are ignored; lse is filled
// when given).
void reference_attention_forward(const FlashAttentionArgs& args, cudaStream_t stream = nullptr);

// flash_attention_forward where the head size is compiled in, else reference_attention_forward.
void attention_forward(const FlashAttentionArgs& args, cudaStream_t stream = nullptr);

}  // namespace mmgen::cuda
