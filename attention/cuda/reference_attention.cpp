#include "attention/cuda/reference_attention.h"

#include "core/error.h"

namespace mmgen::cuda {

void launch_reference_attention(const FlashAttentionArgs& args, cudaStream_t stream);

void reference_attention_forward(const FlashAttentionArgs& args, cudaStream_t stream) {
  check(args.head_dim > 0 && args.head_dim <= 256,
        "CUDA reference attention: head size {} is outside 1..256", args.head_dim);
  check(args.q && args.k && args.v && args.out, "CUDA attention: a null q, k, v or out pointer");
  check(args.batch > 0 && args.heads > 0 && args.batch <= 65535 && args.heads <= 65535,
        "CUDA attention: batch {} and heads {} must be in 1..65535", args.batch, args.heads);
  check(args.block_offsets == nullptr, "CUDA reference attention: block lists are not supported");
  if (args.seq_q == 0) return;
  launch_reference_attention(args, stream);
}

void attention_forward(const FlashAttentionArgs& args, cudaStream_t stream) {
  if (flash_attention_supports_head_dim(args.head_dim))
    flash_attention_forward(args, stream);
  else
    reference_attention_forward(args, stream);
}

}  // namespace mmgen::cuda
