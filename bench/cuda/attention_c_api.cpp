// A C entry point to the CUDA attention kernel, built as a shared library (libmmgen_attention.so)
// so bench/cuda/torch_attention_reference.py can call it on torch's own tensors and time it
// interleaved with torch's SDPA kernels in one process: the fairest yardstick on a shared GPU
// whose clocks drift between runs. Not part of the product.
#include <cstdint>
#include <cstdio>

#include "attention/cuda/flash_attention.h"
#include "core/error.h"

extern "C" {

// q, k, v, out: device pointers to bf16 [batch, seq, heads, head_dim], contiguous. kernel: 0 auto,
// 1 Hopper, 2 portable. Returns 0, or 1 after printing the error.
int mmgen_flash_attention(const void* q, const void* k, const void* v, void* out, int64_t batch,
                          int64_t seq_q, int64_t seq_k, int64_t heads, int64_t head_dim,
                          float scale, int kernel, void* stream) {
  try {
    mmgen::cuda::FlashAttentionArgs args;
    args.q = q, args.k = k, args.v = v, args.out = out;
    args.batch = batch, args.heads = heads, args.seq_q = seq_q, args.seq_k = seq_k;
    args.head_dim = head_dim, args.scale = scale;
    args.q_strides = args.out_strides = {seq_q * heads * head_dim, heads * head_dim, head_dim};
    args.k_strides = args.v_strides = {seq_k * heads * head_dim, heads * head_dim, head_dim};
    args.kernel = kernel == 1   ? mmgen::cuda::FlashKernel::Hopper
                  : kernel == 2 ? mmgen::cuda::FlashKernel::Portable
                                : mmgen::cuda::FlashKernel::Auto;
    mmgen::cuda::flash_attention_forward(args, static_cast<cudaStream_t>(stream));
    return 0;
  } catch (const mmgen::Error& error) {
    std::fprintf(stderr, "mmgen_flash_attention: %s\n", error.what());
    return 1;
  }
}
}
