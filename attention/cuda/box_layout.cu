// Gather and scatter of token rows between the sequence order and the padded box order
// (box_layout.h): a CTA per row, threads along its 16-byte chunks, so rows move in full 128-byte
// lines.
#include <cuda_bf16.h>

#include <cstdint>

#include "attention/cuda/box_layout.h"
#include "core/cuda/cuda_check.h"

namespace mmgen::cuda {
namespace {

constexpr int kThreads = 128;

// One CTA per destination row (grid.x = batch · rows), threads along the row's 16-byte chunks: no
// 64-bit divisions per element.
__global__ void gather_kernel(const uint4* x, uint4* y, int tokens, int slots, int chunks,
                              const int32_t* token_of_slot) {
  const int row = blockIdx.x, b = row / slots, slot = row % slots;
  const int32_t token = token_of_slot[slot];
  uint4* out = y + int64_t(row) * chunks;
  const uint4* in = x + (int64_t(b) * tokens + token) * chunks;
  for (int chunk = threadIdx.x; chunk < chunks; chunk += kThreads)
    out[chunk] = token < 0 ? make_uint4(0, 0, 0, 0) : in[chunk];
}

__global__ void scatter_kernel(const uint4* y, uint4* x, int tokens, int slots, int chunks,
                               const int32_t* slot_of_token) {
  const int row = blockIdx.x, b = row / tokens, token = row % tokens;
  const uint4* in = y + (int64_t(b) * slots + slot_of_token[token]) * chunks;
  uint4* out = x + int64_t(row) * chunks;
  for (int chunk = threadIdx.x; chunk < chunks; chunk += kThreads) out[chunk] = in[chunk];
}

// Pairs of elements (the gate and the coarse rows are float32).
__global__ void scatter_gated_kernel(const __nv_bfloat162* y, __nv_bfloat162* x, int tokens,
                                     int slots, int heads, int head_dim,
                                     const int32_t* slot_of_token, const float2* coarse,
                                     const float2* gate) {
  const int row = blockIdx.x, b = row / tokens, token = row % tokens;
  const int pairs = heads * head_dim / 2, slot = slot_of_token[token];
  const int cube = slot / 64, cubes = slots / 64;
  const __nv_bfloat162* in = y + (int64_t(b) * slots + slot) * pairs;
  for (int pair = threadIdx.x; pair < pairs; pair += kThreads) {
    const int head = 2 * pair / head_dim, d = 2 * pair % head_dim;
    const float2 fine = __bfloat1622float2(in[pair]);
    const float2 c = coarse[((int64_t(b * heads + head) * cubes + cube) * head_dim + d) / 2];
    const float2 g = gate[int64_t(row) * pairs + pair];
    x[int64_t(row) * pairs + pair] = __floats2bfloat162_rn(fine.x + c.x * g.x, fine.y + c.y * g.y);
  }
}

}  // namespace

void gather_to_slots(const void* x, void* y, int64_t batch, int64_t tokens, int64_t slots,
                     int64_t width, const int32_t* token_of_slot, cudaStream_t stream) {
  if (batch * slots == 0) return;
  gather_kernel<<<unsigned(batch * slots), kThreads, 0, stream>>>(
      static_cast<const uint4*>(x), static_cast<uint4*>(y), int(tokens), int(slots), int(width / 8),
      token_of_slot);
  MMGEN_CUDA_CHECK_LAUNCH();
}

void scatter_from_slots(const void* y, void* x, int64_t batch, int64_t tokens, int64_t slots,
                        int64_t width, const int32_t* slot_of_token, cudaStream_t stream) {
  if (batch * tokens == 0) return;
  scatter_kernel<<<unsigned(batch * tokens), kThreads, 0, stream>>>(
      static_cast<const uint4*>(y), static_cast<uint4*>(x), int(tokens), int(slots), int(width / 8),
      slot_of_token);
  MMGEN_CUDA_CHECK_LAUNCH();
}

void scatter_from_slots_gated(const void* y, void* x, int64_t batch, int64_t tokens, int64_t slots,
                              int64_t heads, int64_t head_dim, const int32_t* slot_of_token,
                              const float* coarse, const float* gate, cudaStream_t stream) {
  if (batch * tokens == 0) return;
  scatter_gated_kernel<<<unsigned(batch * tokens), kThreads, 0, stream>>>(
      static_cast<const __nv_bfloat162*>(y), static_cast<__nv_bfloat162*>(x), int(tokens),
      int(slots), int(heads), int(head_dim), slot_of_token, reinterpret_cast<const float2*>(coarse),
      reinterpret_cast<const float2*>(gate));
  MMGEN_CUDA_CHECK_LAUNCH();
}

}  // namespace mmgen::cuda
