#include <cuda_bf16.h>

#include <cmath>

#include "attention/cuda/reference_attention.h"
#include "core/cuda/cuda_check.h"

namespace mmgen::cuda {
namespace {

using bf16 = __nv_bfloat16;
constexpr int kMaxPerLane = 8;  // head_dim <= 32 * 8

__global__ void reference_attention_kernel(const FlashAttentionArgs args) {
  const int64_t warps_per_block = blockDim.x / 32;
  const int64_t row = blockIdx.x * warps_per_block + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int64_t head = blockIdx.y, batch = blockIdx.z;
  if (row >= args.seq_q) return;
  const int64_t D = args.head_dim;
  const bf16* q = static_cast<const bf16*>(args.q) + batch * args.q_strides.batch +
                  row * args.q_strides.token + head * args.q_strides.head;
  const bf16* k =
      static_cast<const bf16*>(args.k) + batch * args.k_strides.batch + head * args.k_strides.head;
  const bf16* v =
      static_cast<const bf16*>(args.v) + batch * args.v_strides.batch + head * args.v_strides.head;
  float q_values[kMaxPerLane], acc[kMaxPerLane];
#pragma unroll
  for (int i = 0; i < kMaxPerLane; ++i) {
    const int64_t d = lane + 32 * i;
    q_values[i] = d < D ? __bfloat162float(q[d]) * args.scale : 0.0f;
    acc[i] = 0.0f;
  }
  float running_max = -INFINITY, running_sum = 0.0f;
  for (int64_t key = 0; key < args.seq_k; ++key) {
    const bf16* k_row = k + key * args.k_strides.token;
    float dot = 0.0f;
#pragma unroll
    for (int i = 0; i < kMaxPerLane; ++i) {
      const int64_t d = lane + 32 * i;
      if (d < D) dot += q_values[i] * __bfloat162float(k_row[d]);
    }
    for (int offset = 16; offset > 0; offset /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, offset);
    const float new_max = fmaxf(running_max, dot);
    const float correction = expf(running_max - new_max), p = expf(dot - new_max);
    running_sum = running_sum * correction + p;
    running_max = new_max;
    const bf16* v_row = v + key * args.v_strides.token;
#pragma unroll
    for (int i = 0; i < kMaxPerLane; ++i) {
      const int64_t d = lane + 32 * i;
      if (d < D) acc[i] = acc[i] * correction + p * __bfloat162float(v_row[d]);
    }
  }
  bf16* out = static_cast<bf16*>(args.out) + batch * args.out_strides.batch +
              row * args.out_strides.token + head * args.out_strides.head;
  const float inverse = running_sum > 0.0f ? 1.0f / running_sum : 0.0f;
#pragma unroll
  for (int i = 0; i < kMaxPerLane; ++i) {
    const int64_t d = lane + 32 * i;
    if (d < D) out[d] = __float2bfloat16_rn(acc[i] * inverse);
  }
  if (args.lse && lane == 0)
    args.lse[(batch * args.heads + head) * args.seq_q + row] =
        running_sum > 0.0f ? running_max + logf(running_sum) : -INFINITY;
}

}  // namespace

void launch_reference_attention(const FlashAttentionArgs& args, cudaStream_t stream) {
  constexpr int kWarps = 8;
  const dim3 grid(unsigned((args.seq_q + kWarps - 1) / kWarps), unsigned(args.heads),
                  unsigned(args.batch));
  reference_attention_kernel<<<grid, kWarps * 32, 0, stream>>>(args);
  MMGEN_CUDA_CHECK_LAUNCH();
}

}  // namespace mmgen::cuda
