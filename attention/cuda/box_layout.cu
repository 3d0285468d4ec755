// Gather and scatter of token rows between the sequence order and the padded box order
// (box_layout.h): a warp per row, lanes along its 16-byte chunks, so rows move in full 128-byte
// lines with the whole row's loads in flight before its stores.
#include <cuda_bf16.h>

#include <cstdint>

#include "attention/cuda/box_layout.h"
#include "core/cuda/cuda_check.h"

namespace mmgen::cuda {
namespace {

constexpr int kRowsPerCta = 8;  // a warp per row
constexpr int kThreads = kRowsPerCta * 32;
constexpr int kChunksPerPass = 4;  // 16-byte chunks each lane loads before it stores

// Copies one row of `chunks` 16-byte chunks (zeros when `in` is null): each lane loads its chunks
// of a pass before storing them, so a warp has a whole row in flight.
__device__ __forceinline__ void copy_row(const uint4* __restrict__ in, uint4* __restrict__ out,
                                         int chunks, int lane) {
  for (int base = 0; base < chunks; base += 32 * kChunksPerPass) {
    uint4 values[kChunksPerPass];
#pragma unroll
    for (int i = 0; i < kChunksPerPass; ++i) {
      const int chunk = base + lane + 32 * i;
      values[i] = in && chunk < chunks ? in[chunk] : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int i = 0; i < kChunksPerPass; ++i) {
      const int chunk = base + lane + 32 * i;
      if (chunk < chunks) out[chunk] = values[i];
    }
  }
}

__global__ void gather_kernel(const uint4* __restrict__ x, uint4* __restrict__ y, int tokens,
                              int slots, int chunks, const int32_t* token_of_slot, int rows) {
  const int row = blockIdx.x * kRowsPerCta + threadIdx.x / 32;
  if (row >= rows) return;
  const int b = row / slots, slot = row % slots;
  const int32_t token = token_of_slot[slot];
  copy_row(token < 0 ? nullptr : x + (int64_t(b) * tokens + token) * chunks,
           y + int64_t(row) * chunks, chunks, threadIdx.x % 32);
}

// A warp per row, lanes along its bf16 pairs (the gate and the coarse rows are float32).
__global__ void scatter_gated_kernel(const __nv_bfloat162* __restrict__ y,
                                     __nv_bfloat162* __restrict__ x, int tokens, int slots,
                                     int heads, int head_dim, const int32_t* slot_of_token,
                                     const float2* __restrict__ coarse,
                                     const float2* __restrict__ gate, int rows) {
  const int row = blockIdx.x * kRowsPerCta + threadIdx.x / 32;
  if (row >= rows) return;
  const int b = row / tokens, token = row % tokens;
  const int pairs = heads * head_dim / 2, slot = slot_of_token[token];
  const int cube = slot / 64, cubes = slots / 64;
  const __nv_bfloat162* in = y + (int64_t(b) * slots + slot) * pairs;
#pragma unroll 4
  for (int pair = threadIdx.x % 32; pair < pairs; pair += 32) {
    const int head = 2 * pair / head_dim, d = 2 * pair % head_dim;
    const float2 fine = __bfloat1622float2(in[pair]);
    const float2 c = coarse[((int64_t(b * heads + head) * cubes + cube) * head_dim + d) / 2];
    const float2 g = gate[int64_t(row) * pairs + pair];
    x[int64_t(row) * pairs + pair] = __floats2bfloat162_rn(fine.x + c.x * g.x, fine.y + c.y * g.y);
  }
}

unsigned ctas_for(int64_t rows) {
  return unsigned((rows + kRowsPerCta - 1) / kRowsPerCta);
}

}  // namespace

void gather_to_slots(const void* x, void* y, int64_t batch, int64_t tokens, int64_t slots,
                     int64_t width, const int32_t* token_of_slot, cudaStream_t stream) {
  if (batch * slots == 0) return;
  gather_kernel<<<ctas_for(batch * slots), kThreads, 0, stream>>>(
      static_cast<const uint4*>(x), static_cast<uint4*>(y), int(tokens), int(slots), int(width / 8),
      token_of_slot, int(batch * slots));
  MMGEN_CUDA_CHECK_LAUNCH();
}

void scatter_from_slots_gated(const void* y, void* x, int64_t batch, int64_t tokens, int64_t slots,
                              int64_t heads, int64_t head_dim, const int32_t* slot_of_token,
                              const float* coarse, const float* gate, cudaStream_t stream) {
  if (batch * tokens == 0) return;
  scatter_gated_kernel<<<ctas_for(batch * tokens), kThreads, 0, stream>>>(
      static_cast<const __nv_bfloat162*>(y), static_cast<__nv_bfloat162*>(x), int(tokens),
      int(slots), int(heads), int(head_dim), slot_of_token, reinterpret_cast<const float2*>(coarse),
      reinterpret_cast<const float2*>(gate), int(batch * tokens));
  MMGEN_CUDA_CHECK_LAUNCH();
}

}  // namespace mmgen::cuda
