// SageAttention2's FP8 values (fp8_values.h): one pass for every channel's largest magnitude
// (a CTA per span of tokens, merged with an integer atomic max on the float bits, which orders
// non-negative floats as integers), then one pass per 128-key tile of a (batch, head) that stages
// the tile in shared memory and writes each channel's 128 keys as one 128-byte run.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "attention/cuda/fp8_values.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/device_memory.h"
#include "core/error.h"

namespace mmgen::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kSpan = 256;  // tokens per CTA of the magnitude pass
constexpr int kTileKeys = 128;  // keys per CTA of the transpose

__device__ __forceinline__ float bf16_value(uint16_t bits) {
  return __uint_as_float(uint32_t(bits) << 16);
}

// grid (spans, batch, column blocks): a thread per column (head·head_dim + d) and span.
__global__ void channel_max_kernel(const uint16_t* v, AttentionStrides strides, int64_t seq,
                                   int64_t head_dim, int64_t width, uint32_t* largest) {
  const int64_t b = blockIdx.y, column = int64_t(blockIdx.z) * blockDim.x + threadIdx.x;
  if (column >= width) return;
  const uint16_t* row =
      v + b * strides.batch + (column / head_dim) * strides.head + column % head_dim;
  float m = 0.0f;
  const int64_t last = min(seq, (int64_t(blockIdx.x) + 1) * kSpan);
#pragma unroll 8
  for (int64_t t = int64_t(blockIdx.x) * kSpan; t < last; ++t)
    m = fmaxf(m, fabsf(bf16_value(row[t * strides.token])));
  atomicMax(largest + b * width + column, __float_as_uint(m));
}

__device__ __forceinline__ float channel_scale(uint32_t largest_bits) {
  const float largest = __uint_as_float(largest_bits);
  return largest > 0.0f ? __fdiv_rn(largest, kFp8ValueMax) : 1.0f;
}

// grid (tiles, heads, batch). Shared rows of head_dim + 2 bf16: an odd number of 4-byte words, so
// the threads reading one channel down 32 keys hit 32 different banks.
template <int D>
__global__ void __launch_bounds__(kThreads)
    transpose_kernel(const Fp8ValuesArgs args, const uint32_t* largest) {
  constexpr int kPitch = D + 2;
  __shared__ uint16_t tile[kTileKeys * kPitch];
  const int64_t b = blockIdx.z, h = blockIdx.y, first = int64_t(blockIdx.x) * kTileKeys;
  const uint16_t* v =
      static_cast<const uint16_t*>(args.v) + b * args.strides.batch + h * args.strides.head;
  for (int i = threadIdx.x; i < kTileKeys * D / 2; i += kThreads) {
    const int key = i / (D / 2), word = i % (D / 2);
    const int64_t t = first + key;
    const uint32_t pair =
        t < args.seq ? reinterpret_cast<const uint32_t*>(v + t * args.strides.token)[word] : 0u;
    reinterpret_cast<uint32_t*>(tile + key * kPitch)[word] = pair;
  }
  __syncthreads();
  const int64_t keys = fp8_value_keys(args.seq);
  const int64_t channel_base = (b * args.heads + h) * D;
  // Item = (channel, group of 4 positions): a warp writes one channel's 128 bytes.
  for (int item = threadIdx.x; item < D * (kTileKeys / 4); item += kThreads) {
    const int d = item / (kTileKeys / 4), group = item % (kTileKeys / 4);
    const float scale = channel_scale(largest[channel_base + d]);
    uint32_t packed = 0;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int position = 4 * group + j;
      const int key = 32 * (position / 32) + fp8_value_key_at(position % 32);
      const float x = __fdiv_rn(bf16_value(tile[key * kPitch + d]), scale);
      packed |= uint32_t(__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3)) << (8 * j);
    }
    reinterpret_cast<uint32_t*>(args.out + (channel_base + d) * keys + first)[group] = packed;
    if (blockIdx.x == 0 && group == 0) args.scales[channel_base + d] = scale;
  }
}

}  // namespace

void fp8_quantize_values(const Fp8ValuesArgs& args, cudaStream_t stream) {
  check(args.v && args.out && args.scales, "fp8_quantize_values: v, out and scales must be set");
  check(args.head_dim == 64 || args.head_dim == 128,
        "fp8_quantize_values: head size {} is not compiled in (64 and 128 are)", args.head_dim);
  check(reinterpret_cast<uintptr_t>(args.v) % 4 == 0 && args.strides.token % 2 == 0 &&
            args.strides.head % 2 == 0 && args.strides.batch % 2 == 0,
        "fp8_quantize_values: v and its strides must be in whole pairs of bf16 values");
  if (args.batch * args.seq * args.heads == 0) return;
  const int64_t width = args.heads * args.head_dim;
  DeviceBuffer largest(size_t(args.batch * width) * 4);
  MMGEN_CUDA_CHECK(cudaMemsetAsync(largest.data(), 0, size_t(args.batch * width) * 4, stream));
  const dim3 spans(unsigned((args.seq + kSpan - 1) / kSpan), unsigned(args.batch),
                   unsigned((width + kThreads - 1) / kThreads));
  channel_max_kernel<<<spans, kThreads, 0, stream>>>(static_cast<const uint16_t*>(args.v),
                                                     args.strides, args.seq, args.head_dim, width,
                                                     largest.as<uint32_t>());
  MMGEN_CUDA_CHECK_LAUNCH();
  const dim3 tiles(unsigned(fp8_value_keys(args.seq) / kTileKeys), unsigned(args.heads),
                   unsigned(args.batch));
  if (args.head_dim == 64)
    transpose_kernel<64><<<tiles, kThreads, 0, stream>>>(args, largest.as<uint32_t>());
  else
    transpose_kernel<128><<<tiles, kThreads, 0, stream>>>(args, largest.as<uint32_t>());
  MMGEN_CUDA_CHECK_LAUNCH();
}

}  // namespace mmgen::cuda
