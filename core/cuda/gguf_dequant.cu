#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "core/cuda/cuda_check.h"
#include "core/cuda/gguf_dequant.h"

namespace mmgen::cuda {
namespace {

// One thread per block, as core/gguf_quants.cpp computes each block: the same products and sums,
// each rounded on its own (__fmul_rn, __fadd_rn, __fsub_rn: never contracted into an FMA, which
// the host build does not do either, -ffp-contract=off).

__device__ float half_at(const uint8_t* p) {
  return __half2float(__ushort_as_half(uint16_t(p[0] | (p[1] << 8))));
}

__device__ uint32_t u32_at(const uint8_t* p) {
  return uint32_t(p[0]) | (uint32_t(p[1]) << 8) | (uint32_t(p[2]) << 16) | (uint32_t(p[3]) << 24);
}

__device__ void scale_min_k4(int j, const uint8_t* q, uint8_t& scale, uint8_t& min) {
  if (j < 4) {
    scale = q[j] & 63;
    min = q[j + 4] & 63;
  } else {
    scale = uint8_t((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    min = uint8_t((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

template <typename Out>
__device__ void put(Out* y, int i, float value) {
  if constexpr (sizeof(Out) == 2)
    y[i] = __float2bfloat16_rn(value);
  else
    y[i] = value;
}

template <typename Out>
__device__ void q8_0(const uint8_t* b, Out* y) {
  const float d = half_at(b);
  for (int j = 0; j < 32; ++j) put(y, j, __fmul_rn(float(int8_t(b[2 + j])), d));
}

template <typename Out>
__device__ void q4_0(const uint8_t* b, Out* y) {
  const float d = half_at(b);
  const uint8_t* qs = b + 2;
  for (int j = 0; j < 16; ++j) {
    put(y, j, __fmul_rn(float((qs[j] & 0x0F) - 8), d));
    put(y, j + 16, __fmul_rn(float((qs[j] >> 4) - 8), d));
  }
}

template <typename Out>
__device__ void q4_1(const uint8_t* b, Out* y) {
  const float d = half_at(b), m = half_at(b + 2);
  const uint8_t* qs = b + 4;
  for (int j = 0; j < 16; ++j) {
    put(y, j, __fadd_rn(__fmul_rn(float(qs[j] & 0x0F), d), m));
    put(y, j + 16, __fadd_rn(__fmul_rn(float(qs[j] >> 4), d), m));
  }
}

template <typename Out>
__device__ void q5_0(const uint8_t* b, Out* y) {
  const float d = half_at(b);
  const uint32_t qh = u32_at(b + 2);
  const uint8_t* qs = b + 6;
  for (int j = 0; j < 16; ++j) {
    const int high0 = int(((qh >> j) << 4) & 0x10), high1 = int((qh >> (j + 12)) & 0x10);
    put(y, j, __fmul_rn(float(((qs[j] & 0x0F) | high0) - 16), d));
    put(y, j + 16, __fmul_rn(float(((qs[j] >> 4) | high1) - 16), d));
  }
}

template <typename Out>
__device__ void q5_1(const uint8_t* b, Out* y) {
  const float d = half_at(b), m = half_at(b + 2);
  const uint32_t qh = u32_at(b + 4);
  const uint8_t* qs = b + 8;
  for (int j = 0; j < 16; ++j) {
    const int high0 = int(((qh >> j) << 4) & 0x10), high1 = int((qh >> (j + 12)) & 0x10);
    put(y, j, __fadd_rn(__fmul_rn(float((qs[j] & 0x0F) | high0), d), m));
    put(y, j + 16, __fadd_rn(__fmul_rn(float((qs[j] >> 4) | high1), d), m));
  }
}

template <typename Out>
__device__ void q4_k(const uint8_t* b, Out* y) {
  const float d = half_at(b), dmin = half_at(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* q = b + 16;
  int at = 0;
  for (int j = 0, is = 0; j < 256; j += 64, is += 2, q += 32) {
    uint8_t sc, m;
    scale_min_k4(is, scales, sc, m);
    const float d1 = __fmul_rn(d, float(sc)), m1 = __fmul_rn(dmin, float(m));
    scale_min_k4(is + 1, scales, sc, m);
    const float d2 = __fmul_rn(d, float(sc)), m2 = __fmul_rn(dmin, float(m));
    for (int l = 0; l < 32; ++l) put(y, at++, __fsub_rn(__fmul_rn(d1, float(q[l] & 0xF)), m1));
    for (int l = 0; l < 32; ++l) put(y, at++, __fsub_rn(__fmul_rn(d2, float(q[l] >> 4)), m2));
  }
}

template <typename Out>
__device__ void q5_k(const uint8_t* b, Out* y) {
  const float d = half_at(b), dmin = half_at(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qh = b + 16;
  const uint8_t* ql = b + 48;
  uint8_t u1 = 1, u2 = 2;
  int at = 0;
  for (int j = 0, is = 0; j < 256; j += 64, is += 2, ql += 32) {
    uint8_t sc, m;
    scale_min_k4(is, scales, sc, m);
    const float d1 = __fmul_rn(d, float(sc)), m1 = __fmul_rn(dmin, float(m));
    scale_min_k4(is + 1, scales, sc, m);
    const float d2 = __fmul_rn(d, float(sc)), m2 = __fmul_rn(dmin, float(m));
    for (int l = 0; l < 32; ++l)
      put(y, at++, __fsub_rn(__fmul_rn(d1, float((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0))), m1));
    for (int l = 0; l < 32; ++l)
      put(y, at++, __fsub_rn(__fmul_rn(d2, float((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0))), m2));
    u1 = uint8_t(u1 << 2);
    u2 = uint8_t(u2 << 2);
  }
}

template <typename Out>
__device__ void q6_k(const uint8_t* b, Out* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
  const float d = half_at(b + 208);
  for (int n = 0; n < 256; n += 128, y += 128, ql += 64, qh += 32, sc += 8)
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      put(y, l, __fmul_rn(__fmul_rn(d, float(sc[is])), float(q1)));
      put(y, l + 32, __fmul_rn(__fmul_rn(d, float(sc[is + 2])), float(q2)));
      put(y, l + 64, __fmul_rn(__fmul_rn(d, float(sc[is + 4])), float(q3)));
      put(y, l + 96, __fmul_rn(__fmul_rn(d, float(sc[is + 6])), float(q4)));
    }
}

template <typename Out>
__global__ void dequantize_kernel(GgufBlock type, const uint8_t* blocks, int64_t count, int bytes,
                                  int values, Out* out) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count;
       i += int64_t(gridDim.x) * blockDim.x) {
    const uint8_t* b = blocks + i * bytes;
    Out* y = out + i * values;
    switch (type) {
      case GgufBlock::Q8_0:
        q8_0(b, y);
        break;
      case GgufBlock::Q4_0:
        q4_0(b, y);
        break;
      case GgufBlock::Q4_1:
        q4_1(b, y);
        break;
      case GgufBlock::Q5_0:
        q5_0(b, y);
        break;
      case GgufBlock::Q5_1:
        q5_1(b, y);
        break;
      case GgufBlock::Q4_K:
        q4_k(b, y);
        break;
      case GgufBlock::Q5_K:
        q5_k(b, y);
        break;
      default:  // Q6_K (dequantize_blocks checked the type)
        q6_k(b, y);
        break;
    }
  }
}

}  // namespace

void dequantize_blocks(GgufBlock type, int bytes, int values, const void* blocks, int64_t count,
                       void* out, bool out_bf16, cudaStream_t stream) {
  if (count == 0) return;
  const int threads = 128;
  const int64_t wanted = (count + threads - 1) / threads;
  const unsigned grid = unsigned(wanted < 65535 ? wanted : 65535);
  const auto* in = static_cast<const uint8_t*>(blocks);
  if (out_bf16)
    dequantize_kernel<<<grid, threads, 0, stream>>>(type, in, count, bytes, values,
                                                    static_cast<__nv_bfloat16*>(out));
  else
    dequantize_kernel<<<grid, threads, 0, stream>>>(type, in, count, bytes, values,
                                                    static_cast<float*>(out));
  MMGEN_CUDA_CHECK_LAUNCH();
}

}  // namespace mmgen::cuda
