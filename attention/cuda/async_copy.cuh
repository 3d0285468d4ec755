// Hopper's tensor-copy engine (TMA) and the shared-memory barriers its copies complete on, as
// inline PTX: what a producer warp needs to stream tiles to consumer warpgroups.
#pragma once

#include <cuda.h>

#include <cstdint>

namespace mmgen::cuda::device {

__device__ __forceinline__ void barrier_init(uint32_t barrier, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(barrier), "r"(arrivals));
}
// Makes initialised barriers visible to the other threads and to the copy engine.
__device__ __forceinline__ void barrier_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
// Arrives and announces `bytes` of copies that will complete on this barrier.
__device__ __forceinline__ void barrier_expect_bytes(uint32_t barrier, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(barrier), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void barrier_arrive(uint32_t barrier) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(barrier) : "memory");
}
// Waits until the barrier's phase with this parity has completed.
__device__ __forceinline__ void barrier_wait(uint32_t barrier, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\nwait_again:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra wait_again;\n}\n" ::"r"(barrier),
      "r"(parity)
      : "memory");
}

// Copies the box at (c0, c1, c2, c3) of a 4-D tensor map into shared memory, completing on
// `barrier`; parts of the box outside the tensor arrive as zeros.
__device__ __forceinline__ void tensor_copy_4d(uint32_t destination, const CUtensorMap* map, int c0,
                                               int c1, int c2, int c3, uint32_t barrier) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(destination),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(barrier)
      : "memory");
}

// The same over a 5-D map (a video's cubes: D, heads, w, h, frames).
__device__ __forceinline__ void tensor_copy_5d(uint32_t destination, const CUtensorMap* map, int c0,
                                               int c1, int c2, int c3, int c4, uint32_t barrier) {
  asm volatile(
      "cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4, %5, %6}], [%7];\n" ::"r"(destination),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4),
      "r"(barrier)
      : "memory");
}

// Moves this warpgroup's register budget (all its warps must execute it).
template <int Registers>
__device__ __forceinline__ void release_registers() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(Registers));
}
template <int Registers>
__device__ __forceinline__ void claim_registers() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(Registers));
}

}  // namespace mmgen::cuda::device
