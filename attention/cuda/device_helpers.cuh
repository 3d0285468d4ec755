// Small device helpers the attention kernels share: shared-memory addresses, cp.async copies,
// ldmatrix loads, the warp-level bf16 MMA and bf16 packing (sm_80+ instructions, PTX inline).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace mmgen::cuda::device {

__device__ __forceinline__ uint32_t shared_address(const void* pointer) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(pointer));
}

__device__ __forceinline__ void copy_16_async(uint32_t destination, const void* source,
                                              bool valid) {
  // src-size 0 makes the copy write 16 zero bytes: padding rows read as zeros, never garbage.
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(destination), "l"(source),
               "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void commit_copies() {
  asm volatile("cp.async.commit_group;\n" ::);
}
__device__ __forceinline__ void wait_copies() {
  asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}

// Waits until at most `Pending` committed copy groups are still in flight.
template <int Pending>
__device__ __forceinline__ void wait_copies_until() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(Pending) : "memory");
}

__device__ __forceinline__ void load_matrix_x4(uint32_t address, uint32_t& r0, uint32_t& r1,
                                               uint32_t& r2, uint32_t& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(address));
}
__device__ __forceinline__ void load_matrix_x4_transposed(uint32_t address, uint32_t& r0,
                                                          uint32_t& r1, uint32_t& r2,
                                                          uint32_t& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(address));
}

// d += a (16x16, row) * b (16x8, col), bf16 inputs, fp32 accumulators.
__device__ __forceinline__ void mma_16x8x16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                            uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// 2^x as one MUFU.EX2: the flush-to-zero form. exp2f without fast math wraps the same instruction
// in a test and two predicated multiplies to produce subnormal results (below 2^-126), which an
// attention probability in bf16 never needs; in the softmax loops those three extra instructions
// per score cost issue slots the exponentials and the products share.
__device__ __forceinline__ float exp2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ uint32_t pack_bf16x2(float low, float high) {
  const __nv_bfloat162 pair = __floats2bfloat162_rn(low, high);
  return *reinterpret_cast<const uint32_t*>(&pair);
}

}  // namespace mmgen::cuda::device
