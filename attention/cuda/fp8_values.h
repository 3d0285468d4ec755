// SageAttention2's FP8 values on the GPU, for the INT8-score kernel's e4m3 P·V
// (FlashAttentionArgs::v_scales): bf16 V in, e4m3 V out with one float scale per channel of each
// (batch, head), laid out as the Hopper kernel's FP8 product reads its B operand. FP8 wgmma reads
// B K-major only, so each channel's keys are contiguous (V transposed), and the keys of every run
// of 32 are permuted so that the probabilities, packed from the score product's accumulator
// layout, need no exchange between threads to become the product's A fragments.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "attention/cuda/flash_attention.h"

namespace mmgen::cuda {

// Keys per channel row of the FP8 values: the sequence padded to whole 128-key tiles (the
// padding is zeros), so every row is a multiple of 16 bytes as the tensor copies need.
__host__ __device__ inline int64_t fp8_value_keys(int64_t seq) {
  return (seq + 127) / 128 * 128;
}

// Which key of its run of 32 sits at position `position` (0..31) of a channel row. A thread of
// the score product holds columns 8i + 2·(lane mod 4) + {0, 1} of each 8-column group i; the
// 8-bit A fragment wants columns 4·(lane mod 4) + {0..3} (and 16 more): position 4q + j is then
// key 8·(j / 2) + 2q + j mod 2, and positions 16 and up the same 16 keys further.
inline constexpr int fp8_value_key_at(int position) {
  const int half = position / 16, q = (position % 16) / 4, j = position % 4;
  return 16 * half + 8 * (j / 2) + 2 * q + j % 2;
}

// e4m3's largest finite value: a channel's largest magnitude maps to it.
inline constexpr float kFp8ValueMax = 448.0f;

struct Fp8ValuesArgs {
  const void* v = nullptr;  // bf16 [batch, seq, heads, head_dim], unit stride over head_dim
  AttentionStrides strides;
  int64_t batch = 0, seq = 0, heads = 0, head_dim = 0;
  // e4m3 [batch, heads, head_dim, fp8_value_keys(seq)]: channel d's key at position p of run r is
  // round(v[r·32 + fp8_value_key_at(p)][d] / scale[d]) to nearest even, saturated at ±448.
  uint8_t* out = nullptr;
  // [batch, heads, head_dim]: max over the tokens of |v[..][d]| / 448 (1 for an all-zero channel).
  float* scales = nullptr;
};

// Two passes on `stream` (the channels' largest magnitudes, then the scaled transpose), with a
// scratch buffer of its own.
void fp8_quantize_values(const Fp8ValuesArgs& args, cudaStream_t stream = nullptr);

}  // namespace mmgen::cuda
