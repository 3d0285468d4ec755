// The Hopper warpgroup MMA (wgmma, sm_90a) as inline PTX, with the shared-memory matrix
// descriptors it reads and the fences it needs. Only the shapes the attention kernel uses.
#pragma once

#include <cstdint>

namespace mmgen::cuda::device {

// The accumulator operands of a wgmma asm statement: d[0] .. d[N-1] read and written in float
// registers (%0 .. %N-1 in the instruction text).
#define MMGEN_WGMMA_F32_D32(d)                                                                    \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),    \
      "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),  \
      "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),  \
      "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define MMGEN_WGMMA_F32_D64(d)                                                                   \
  MMGEN_WGMMA_F32_D32(d), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]),       \
      "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), \
      "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), \
      "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), \
      "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])

// Descriptor of a bf16 tile in shared memory laid out in the 128-byte swizzle: rows of 64
// elements (128 bytes), 8-row groups of 1024 bytes, 16-byte chunks XOR-ed with (row mod 8); the
// tile must start on a 1024-byte boundary (an offset added to `address` to step along K inside a
// row is fine: the hardware swizzles the final address). Offsets are in bytes.
__device__ __forceinline__ uint64_t swizzle128_descriptor(uint32_t address, uint32_t leading_offset,
                                                          uint32_t stride_offset) {
  uint64_t descriptor = uint64_t((address & 0x3ffff) >> 4);
  descriptor |= uint64_t((leading_offset & 0x3ffff) >> 4) << 16;
  descriptor |= uint64_t((stride_offset & 0x3ffff) >> 4) << 32;
  descriptor |= uint64_t(1) << 62;  // layout type 1: 128-byte swizzle
  return descriptor;
}

// Orders this warpgroup's register accesses before the wgmma that follows.
__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_wait_all() {
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
}
// Makes shared memory written through the generic proxy (cp.async, plain stores) visible to the
// async proxy that wgmma reads it through; each writing thread runs it before the barrier.
__device__ __forceinline__ void fence_shared_for_async_proxy() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// Keeps the compiler from moving accesses to accumulator registers across an in-flight wgmma.
template <int N>
__device__ __forceinline__ void pin_registers(float (&registers)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(registers[i])::"memory");
}

// d += A·B over 16 of K; A from registers (the m16n8k16 A-fragment layout per warp), B from
// shared memory stored N-major (transposed), fp32 accumulators.
__device__ __forceinline__ void wgmma_m64n64k16_rs_bt(float (&d)[32], const uint32_t (&a)[4],
                                                      uint64_t b_desc) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, "
      "%9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, "
      "%27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
      : MMGEN_WGMMA_F32_D32(d)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "n"(1));
}

// d += A·B over 16 of K; A from registers (the m16n8k16 A-fragment layout per warp), B from
// shared memory stored N-major (transposed), fp32 accumulators.
__device__ __forceinline__ void wgmma_m64n128k16_rs_bt(float (&d)[64], const uint32_t (&a)[4],
                                                       uint64_t b_desc) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, "
      "%9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, "
      "%27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, "
      "%45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, "
      "%63}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
      : MMGEN_WGMMA_F32_D64(d)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "n"(1));
}

// d (+)= A·B over 16 of K; A and B from shared memory (K-major), fp32 accumulators.
__device__ __forceinline__ void wgmma_m64n128k16_ss(float (&d)[64], uint64_t a_desc,
                                                    uint64_t b_desc, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, "
      "%9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, "
      "%27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, "
      "%45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, "
      "%63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
      : MMGEN_WGMMA_F32_D64(d)
      : "l"(a_desc), "l"(b_desc), "r"(accumulate));
}

// d (+)= A·B over 32 of K; A and B INT8 from shared memory (K-major, the only layout integer wgmma
// reads), exact int32 accumulators whose bits sit in float registers (the caller converts them
// in place: one register array serves the integer scores and the float ones).
__device__ __forceinline__ void wgmma_m64n128k32_s8_ss(float (&d)[64], uint64_t a_desc,
                                                       uint64_t b_desc, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.s32.s8.s8 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, "
      "p;\n}\n"
      : "+r"(reinterpret_cast<uint32_t&>(d[0])), "+r"(reinterpret_cast<uint32_t&>(d[1])),
        "+r"(reinterpret_cast<uint32_t&>(d[2])), "+r"(reinterpret_cast<uint32_t&>(d[3])),
        "+r"(reinterpret_cast<uint32_t&>(d[4])), "+r"(reinterpret_cast<uint32_t&>(d[5])),
        "+r"(reinterpret_cast<uint32_t&>(d[6])), "+r"(reinterpret_cast<uint32_t&>(d[7])),
        "+r"(reinterpret_cast<uint32_t&>(d[8])), "+r"(reinterpret_cast<uint32_t&>(d[9])),
        "+r"(reinterpret_cast<uint32_t&>(d[10])), "+r"(reinterpret_cast<uint32_t&>(d[11])),
        "+r"(reinterpret_cast<uint32_t&>(d[12])), "+r"(reinterpret_cast<uint32_t&>(d[13])),
        "+r"(reinterpret_cast<uint32_t&>(d[14])), "+r"(reinterpret_cast<uint32_t&>(d[15])),
        "+r"(reinterpret_cast<uint32_t&>(d[16])), "+r"(reinterpret_cast<uint32_t&>(d[17])),
        "+r"(reinterpret_cast<uint32_t&>(d[18])), "+r"(reinterpret_cast<uint32_t&>(d[19])),
        "+r"(reinterpret_cast<uint32_t&>(d[20])), "+r"(reinterpret_cast<uint32_t&>(d[21])),
        "+r"(reinterpret_cast<uint32_t&>(d[22])), "+r"(reinterpret_cast<uint32_t&>(d[23])),
        "+r"(reinterpret_cast<uint32_t&>(d[24])), "+r"(reinterpret_cast<uint32_t&>(d[25])),
        "+r"(reinterpret_cast<uint32_t&>(d[26])), "+r"(reinterpret_cast<uint32_t&>(d[27])),
        "+r"(reinterpret_cast<uint32_t&>(d[28])), "+r"(reinterpret_cast<uint32_t&>(d[29])),
        "+r"(reinterpret_cast<uint32_t&>(d[30])), "+r"(reinterpret_cast<uint32_t&>(d[31])),
        "+r"(reinterpret_cast<uint32_t&>(d[32])), "+r"(reinterpret_cast<uint32_t&>(d[33])),
        "+r"(reinterpret_cast<uint32_t&>(d[34])), "+r"(reinterpret_cast<uint32_t&>(d[35])),
        "+r"(reinterpret_cast<uint32_t&>(d[36])), "+r"(reinterpret_cast<uint32_t&>(d[37])),
        "+r"(reinterpret_cast<uint32_t&>(d[38])), "+r"(reinterpret_cast<uint32_t&>(d[39])),
        "+r"(reinterpret_cast<uint32_t&>(d[40])), "+r"(reinterpret_cast<uint32_t&>(d[41])),
        "+r"(reinterpret_cast<uint32_t&>(d[42])), "+r"(reinterpret_cast<uint32_t&>(d[43])),
        "+r"(reinterpret_cast<uint32_t&>(d[44])), "+r"(reinterpret_cast<uint32_t&>(d[45])),
        "+r"(reinterpret_cast<uint32_t&>(d[46])), "+r"(reinterpret_cast<uint32_t&>(d[47])),
        "+r"(reinterpret_cast<uint32_t&>(d[48])), "+r"(reinterpret_cast<uint32_t&>(d[49])),
        "+r"(reinterpret_cast<uint32_t&>(d[50])), "+r"(reinterpret_cast<uint32_t&>(d[51])),
        "+r"(reinterpret_cast<uint32_t&>(d[52])), "+r"(reinterpret_cast<uint32_t&>(d[53])),
        "+r"(reinterpret_cast<uint32_t&>(d[54])), "+r"(reinterpret_cast<uint32_t&>(d[55])),
        "+r"(reinterpret_cast<uint32_t&>(d[56])), "+r"(reinterpret_cast<uint32_t&>(d[57])),
        "+r"(reinterpret_cast<uint32_t&>(d[58])), "+r"(reinterpret_cast<uint32_t&>(d[59])),
        "+r"(reinterpret_cast<uint32_t&>(d[60])), "+r"(reinterpret_cast<uint32_t&>(d[61])),
        "+r"(reinterpret_cast<uint32_t&>(d[62])), "+r"(reinterpret_cast<uint32_t&>(d[63]))
      : "l"(a_desc), "l"(b_desc), "r"(accumulate));
}

// d (+)= A·B over 32 of K in e4m3 (FP8): A from registers in the 8-bit A-fragment layout (per warp,
// rows lane/4 and lane/4 + 8, columns 4·(lane mod 4) + 0..3 in a[0] and a[1] and 16 more in a[2]
// and a[3], the low byte first), B from shared memory K-major (the only layout FP8 wgmma reads),
// fp32 accumulators; `accumulate` 0 overwrites d.
__device__ __forceinline__ void wgmma_m64n64k32_e4m3_rs(float (&d)[32], const uint32_t (&a)[4],
                                                        uint64_t b_desc, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7, %8, "
      "%9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, "
      "%27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1;\n}\n"
      : MMGEN_WGMMA_F32_D32(d)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(accumulate));
}

// The same with N = 128.
__device__ __forceinline__ void wgmma_m64n128k32_e4m3_rs(float (&d)[64], const uint32_t (&a)[4],
                                                         uint64_t b_desc, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7, %8, "
      "%9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, "
      "%27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, "
      "%45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, "
      "%63}, {%64, %65, %66, %67}, %68, p, 1, 1;\n}\n"
      : MMGEN_WGMMA_F32_D64(d)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(accumulate));
}

}  // namespace mmgen::cuda::device
