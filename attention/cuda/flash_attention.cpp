#include "attention/cuda/flash_attention.h"

#include <cstdint>

#include "attention/cuda/flash_kernels.h"
#include "core/error.h"

namespace mmgen::cuda {
namespace {

bool aligned_16(const void* pointer) {
  return reinterpret_cast<uintptr_t>(pointer) % 16 == 0;
}

bool strides_aligned(const AttentionStrides& strides) {
  return strides.batch % 8 == 0 && strides.token % 8 == 0 && strides.head % 8 == 0;
}

}  // namespace

bool flash_attention_supports_head_dim(int64_t head_dim) {
  return head_dim == 64 || head_dim == 128;
}

void flash_attention_forward(const FlashAttentionArgs& args, cudaStream_t stream) {
  check(flash_attention_supports_head_dim(args.head_dim),
        "CUDA attention: head size {} is not compiled in (64 and 128 are); use "
        "--attention-backend torch_sdpa for this model",
        args.head_dim);
  check(args.q && args.k && args.v && args.out, "CUDA attention: a null q, k, v or out pointer");
  check(aligned_16(args.q) && aligned_16(args.k) && aligned_16(args.v) && aligned_16(args.out),
        "CUDA attention: q, k, v and out must start on 16-byte boundaries");
  check(strides_aligned(args.q_strides) && strides_aligned(args.k_strides) &&
            strides_aligned(args.v_strides) && strides_aligned(args.out_strides),
        "CUDA attention: strides must be multiples of 8 elements (16 bytes)");
  check(args.scale > 0.0f, "CUDA attention: the scale must be positive, got {}", args.scale);
  check(args.batch > 0 && args.heads > 0 && args.batch <= 65535 && args.heads <= 65535,
        "CUDA attention: batch {} and heads {} must be in 1..65535", args.batch, args.heads);
  check(args.seq_q >= 0 && args.seq_k >= 0 && args.seq_q < (int64_t(1) << 31) &&
            args.seq_k < (int64_t(1) << 31),
        "CUDA attention: sequence lengths {} and {} out of range", args.seq_q, args.seq_k);
  check((args.block_offsets == nullptr) == (args.block_indices == nullptr),
        "CUDA attention: block-sparse mode needs both block_offsets and block_indices");
  if (args.seq_q == 0) return;
  const bool sparse = args.block_offsets != nullptr;
  if (args.head_dim == 64)
    sparse ? launch_flash_attention<64, true>(args, stream)
           : launch_flash_attention<64, false>(args, stream);
  else
    sparse ? launch_flash_attention<128, true>(args, stream)
           : launch_flash_attention<128, false>(args, stream);
}

}  // namespace mmgen::cuda
