// Gather and scatter of token rows between the sequence order and the padded box order
// (box_layout.h): one thread per 16-byte chunk, so rows move in full 128-byte lines.
#include <cuda_bf16.h>

#include <cstdint>

#include "attention/cuda/box_layout.h"
#include "core/cuda/cuda_check.h"

namespace mmgen::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void gather_kernel(const uint4* x, uint4* y, int64_t batch, int64_t tokens,
                              int64_t slots, int64_t chunks, const int32_t* token_of_slot) {
  const int64_t index = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (index >= batch * slots * chunks) return;
  const int64_t chunk = index % chunks, row = index / chunks;
  const int64_t b = row / slots, slot = row % slots;
  const int32_t token = token_of_slot[slot];
  y[index] = token < 0 ? make_uint4(0, 0, 0, 0) : x[(b * tokens + token) * chunks + chunk];
}

__global__ void scatter_kernel(const uint4* y, uint4* x, int64_t batch, int64_t tokens,
                               int64_t slots, int64_t chunks, const int32_t* slot_of_token) {
  const int64_t index = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (index >= batch * tokens * chunks) return;
  const int64_t chunk = index % chunks, row = index / chunks;
  const int64_t b = row / tokens, token = row % tokens;
  x[index] = y[(b * slots + slot_of_token[token]) * chunks + chunk];
}

// One thread per pair of elements (the gate and the coarse rows are float32).
__global__ void scatter_gated_kernel(const __nv_bfloat162* y, __nv_bfloat162* x, int64_t batch,
                                     int64_t tokens, int64_t slots, int64_t heads, int64_t head_dim,
                                     const int32_t* slot_of_token, const float2* coarse,
                                     const float2* gate) {
  const int64_t pairs = heads * head_dim / 2;
  const int64_t index = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (index >= batch * tokens * pairs) return;
  const int64_t pair = index % pairs, row = index / pairs;
  const int64_t b = row / tokens, token = row % tokens;
  const int64_t slot = slot_of_token[token], cube = slot / 64, cubes = slots / 64;
  const int64_t head = 2 * pair / head_dim, d = 2 * pair % head_dim;
  const float2 fine = __bfloat1622float2(y[(b * slots + slot) * pairs + pair]);
  const float2 c = coarse[(((b * heads + head) * cubes + cube) * head_dim + d) / 2];
  const float2 g = gate[index];
  x[index] = __floats2bfloat162_rn(fine.x + c.x * g.x, fine.y + c.y * g.y);
}

unsigned blocks_for(int64_t count) {
  return unsigned((count + kThreads - 1) / kThreads);
}

}  // namespace

void gather_to_slots(const void* x, void* y, int64_t batch, int64_t tokens, int64_t slots,
                     int64_t width, const int32_t* token_of_slot, cudaStream_t stream) {
  const int64_t chunks = width / 8, count = batch * slots * chunks;
  if (count == 0) return;
  gather_kernel<<<blocks_for(count), kThreads, 0, stream>>>(static_cast<const uint4*>(x),
                                                            static_cast<uint4*>(y), batch, tokens,
                                                            slots, chunks, token_of_slot);
  MMGEN_CUDA_CHECK_LAUNCH();
}

void scatter_from_slots(const void* y, void* x, int64_t batch, int64_t tokens, int64_t slots,
                        int64_t width, const int32_t* slot_of_token, cudaStream_t stream) {
  const int64_t chunks = width / 8, count = batch * tokens * chunks;
  if (count == 0) return;
  scatter_kernel<<<blocks_for(count), kThreads, 0, stream>>>(static_cast<const uint4*>(y),
                                                             static_cast<uint4*>(x), batch, tokens,
                                                             slots, chunks, slot_of_token);
  MMGEN_CUDA_CHECK_LAUNCH();
}

void scatter_from_slots_gated(const void* y, void* x, int64_t batch, int64_t tokens, int64_t slots,
                              int64_t heads, int64_t head_dim, const int32_t* slot_of_token,
                              const float* coarse, const float* gate, cudaStream_t stream) {
  const int64_t count = batch * tokens * heads * head_dim / 2;
  if (count == 0) return;
  scatter_gated_kernel<<<blocks_for(count), kThreads, 0, stream>>>(
      static_cast<const __nv_bfloat162*>(y), static_cast<__nv_bfloat162*>(x), batch, tokens, slots,
      heads, head_dim, slot_of_token, reinterpret_cast<const float2*>(coarse),
      reinterpret_cast<const float2*>(gate));
  MMGEN_CUDA_CHECK_LAUNCH();
}

}  // namespace mmgen::cuda
