// The k-th largest of a warp's keys by a byte-wise radix search, for the exact top-k selections
// of the sparse backends (VSA's and SLA's key blocks, V-MoBA's chunks): four histogram passes over
// the keys instead of a bitwise search's 32 counting passes. Device code only.
#pragma once

#include <cstdint>

namespace mmgen::cuda {

// Larger float, larger key; and back.
__device__ __forceinline__ uint32_t ordered_key(float value) {
  const uint32_t bits = __float_as_uint(value);
  return (bits & 0x80000000u) ? ~bits : bits | 0x80000000u;
}

// The k-th largest of key_of(0) .. key_of(count − 1), by one warp (every lane calls it with the
// same arguments); `histogram` is the warp's own 256 ints of shared memory. k <= 0 gives
// 0xffffffff (nothing is above it), k >= count gives 0 (nothing is below it). A byte at a time
// from the top: a histogram of the next byte over the keys that match the bytes found so far,
// then the byte at which the count from the top first reaches the keys still wanted.
template <typename KeyOf>
__device__ uint32_t kth_largest_key(const KeyOf& key_of, int count, int k, int* histogram,
                                    int lane) {
  if (k <= 0) return 0xffffffffu;
  if (k >= count) return 0u;
  uint32_t threshold = 0, known = 0;
  int wanted = k;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int i = lane; i < 256; i += 32) histogram[i] = 0;
    __syncwarp();
#pragma unroll 4
    for (int j = lane; j < count; j += 32) {
      const uint32_t key = key_of(j);
      if ((key & known) == threshold) atomicAdd(&histogram[(key >> shift) & 255], 1);
    }
    __syncwarp();
    // Lane l holds bytes 255 − 8l down to 248 − 8l; `before` counts the keys with a larger byte.
    int mine[8], total = 0;
#pragma unroll
    for (int i = 0; i < 8; ++i) total += mine[i] = histogram[255 - 8 * lane - i];
    int through = total;
    for (int offset = 1; offset < 32; offset *= 2) {
      const int other = __shfl_up_sync(0xffffffffu, through, offset);
      if (lane >= offset) through += other;
    }
    const int before = through - total;
    const int holder = __ffs(__ballot_sync(0xffffffffu, before < wanted && through >= wanted)) - 1;
    int byte = 0, larger = 0;
    if (lane == holder) {
      int run = before;
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        if (run + mine[i] >= wanted) {
          byte = 255 - 8 * lane - i, larger = run;
          break;
        }
        run += mine[i];
      }
    }
    byte = __shfl_sync(0xffffffffu, byte, holder);
    larger = __shfl_sync(0xffffffffu, larger, holder);
    threshold |= uint32_t(byte) << shift, known |= 255u << shift;
    wanted -= larger;
    __syncwarp();
  }
  return threshold;
}

}  // namespace mmgen::cuda
