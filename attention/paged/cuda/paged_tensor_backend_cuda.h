// A GPU paged backend behind the tensor contract the models call (attention/paged/
// paged_backend.h): q, k, v are GPU tensors [tokens, heads, head_dim] (bf16, or float32 in the
// exact mode; rows may be strided views), the result a GPU tensor of their dtype, and a layer's
// RelativePositionBias must hold its values on the GPU. The kernels are those of
// attention/paged/cuda/paged_backend_cuda.h. So a text encoder written once runs its attention on
// either device through the same call.
#pragma once

#include <memory>
#include <string_view>

#include "attention/paged/cuda/paged_backend_cuda.h"
#include "attention/paged/paged_backend.h"

namespace mmgen::cuda::paged {

// Throws Error for a name without a CUDA implementation. Encoder-only (no K/V pool).
std::unique_ptr<attention::paged::PagedAttentionBackend> make_tensor_paged_backend_cuda(
    std::string_view name, const PagedBackendCudaOptions& options = {});
// The same for decoder layers, owning `pool` (their K/V): the host allocator's slots address its
// rows. q, k, v bf16 (the pool's dtype).
std::unique_ptr<attention::paged::PagedAttentionBackend> make_tensor_paged_backend_cuda(
    std::string_view name, std::unique_ptr<DeviceKVPool> pool,
    const PagedBackendCudaOptions& options = {});

}  // namespace mmgen::cuda::paged
