// INT8 quantisation of Q and K (int8_quantize.h): the channel means (K only, two small passes),
// then one pass in which a CTA takes a span of whole groups of one (batch, head): each row's
// largest magnitude, each group's, the levels and the scales. The arithmetic is the CPU's,
// operation for operation, with the rounded IEEE intrinsics (no contraction into fused
// multiply-adds, no approximate division), so the levels are the same integers.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>

#include "attention/cuda/flash_attention.h"
#include "attention/cuda/int8_quantize.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/device_memory.h"
#include "core/error.h"

namespace mmgen::cuda {
namespace {

constexpr unsigned kFull = 0xffffffffu;
// Tokens per partial sum of the channel means. The sums are in double and of bf16 values (8
// significant bits): every partial sum is exact while the values span less than about 2^40, so
// the order of summation (the CPU's is token by token) does not change the result.
constexpr int64_t kMeanChunk = 256;
constexpr int kMeanThreads = 256;

__device__ __forceinline__ float bf16_value(uint16_t bits) {
  return __uint_as_float(uint32_t(bits) << 16);
}

unsigned blocks_for(int64_t items, int threads) {
  return unsigned((items + threads - 1) / threads);
}

// Partial channel sums: grid (chunks, batch, column blocks), a thread per column (head·head_dim +
// d) and chunk, so every load of a warp is one contiguous run of the row.
__global__ void partial_sums_kernel(const uint16_t* x, int64_t row_stride, int64_t seq,
                                    int64_t width, double* partial) {
  const int64_t chunk = blockIdx.x, b = blockIdx.y, chunks = gridDim.x;
  const int64_t column = int64_t(blockIdx.z) * blockDim.x + threadIdx.x;
  if (column >= width) return;
  double sum = 0.0;
  const int64_t last = min(seq, (chunk + 1) * kMeanChunk);
#pragma unroll 8
  for (int64_t t = chunk * kMeanChunk; t < last; ++t)
    sum += double(bf16_value(x[(b * seq + t) * row_stride + column]));
  partial[(b * chunks + chunk) * width + column] = sum;
}

// Means = the partial sums added in chunk order, over the token count.
__global__ void means_kernel(const double* partial, int64_t chunks, int64_t width, int64_t seq,
                             int64_t batch, double* means) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= batch * width) return;
  const int64_t b = i / width, column = i % width;
  double sum = 0.0;
  // Unrolled so the loads are in flight together (the sum stays in chunk order).
#pragma unroll 16
  for (int64_t c = 0; c < chunks; ++c) sum += partial[(b * chunks + c) * width + column];
  means[i] = sum / double(seq);
}

// The value the quantiser sees: smoothed (the CPU's two ways) or multiplied.
__device__ __forceinline__ float prepared(float x, const double* mean, Int8Arithmetic arithmetic,
                                          float multiplier) {
  if (arithmetic == Int8Arithmetic::Sage) return mean ? __fsub_rn(x, float(*mean)) : x;
  if (mean) return float(double(x) - *mean);
  return __fmul_rn(x, multiplier);
}

// The rows one CTA quantises: a span of whole groups (thread groups live inside 32 or 64 rows).
int64_t span_rows(Int8Groups groups, int64_t run) {
  return groups == Int8Groups::QueryThread ? 32 : groups == Int8Groups::KeyThread ? 64 : run;
}

// Per-thread groups: the first member of row r's group (span-relative), the step between
// members and their count.
struct Members {
  int first, step, count;
};
__device__ __forceinline__ Members members_of(Int8Groups groups, int r) {
  if (groups == Int8Groups::QueryThread) return {r % 8, 8, 4};  // r mod 8 in a 32-row slice
  return {(r % 8) / 2 * 2, 8, 8};                               // key row pairs, see below
}

constexpr int kQuantizeThreads = 256, kQuantizeWarps = kQuantizeThreads / 32, kBatch = 4;

// Lane `lane`'s four elements 4·lane .. 4·lane + 3 of a row (zeros past head_dim): one 8-byte load
// when the rows allow it (`vector`: head_dim and the row stride multiples of 4).
__device__ __forceinline__ void load_four(const uint16_t* row, int lane, int64_t head_dim,
                                          bool vector, float* value) {
  const int d0 = 4 * lane;
  if (vector && d0 < head_dim) {
    const uint2 word = *reinterpret_cast<const uint2*>(row + d0);
    value[0] = __uint_as_float(word.x << 16), value[1] = __uint_as_float(word.x & 0xffff0000u);
    value[2] = __uint_as_float(word.y << 16), value[3] = __uint_as_float(word.y & 0xffff0000u);
    return;
  }
#pragma unroll
  for (int j = 0; j < 4; ++j) value[j] = d0 + j < head_dim ? bf16_value(row[d0 + j]) : 0.0f;
}

// A CTA per (span of rows, head, batch): each row's largest magnitude, each group's (shared
// memory), then the levels (a lane per 4 bytes of the 128-byte int8 row) and the scales.
__global__ void __launch_bounds__(kQuantizeThreads)
    quantize_kernel(const Int8QuantizeArgs args, const double* means, int span) {
  extern __shared__ float row_max[];  // [span], then the group maxima [span] (runs: [1])
  float* group_max = row_max + span;
  const int64_t first_row = int64_t(blockIdx.x) * span, h = blockIdx.y, b = blockIdx.z;
  const int64_t pair = b * args.heads + h;
  const int rows = int(min(int64_t(span), args.seq - first_row));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const double* mean = means ? means + pair * args.head_dim : nullptr;
  const bool vector = args.head_dim % 4 == 0 && args.row_stride % 4 == 0;
  auto row_of = [&](int r) {
    return static_cast<const uint16_t*>(args.x) + (b * args.seq + first_row + r) * args.row_stride +
           h * args.head_dim;
  };
  // Rows go kBatch at a time per warp, their loads issued before any use, so a warp has several
  // rows in flight.
  for (int r0 = warp; r0 < span; r0 += kQuantizeWarps * kBatch) {
    float value[kBatch][4];
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      const int r = r0 + i * kQuantizeWarps;
      if (r < rows) load_four(row_of(r), lane, args.head_dim, vector, value[i]);
    }
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      const int r = r0 + i * kQuantizeWarps;
      if (r >= span) break;
      float m = 0.0f;
      if (r < rows) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int d = 4 * lane + j;
          if (d < args.head_dim)
            m = fmaxf(m, fabsf(prepared(value[i][j], mean ? mean + d : nullptr, args.arithmetic,
                                        args.multiplier)));
        }
        for (int offset = 16; offset > 0; offset >>= 1)
          m = fmaxf(m, __shfl_xor_sync(kFull, m, offset));
      }
      if (lane == 0) row_max[r] = m;  // rows past the end count as zeros, as on the CPU
    }
  }
  __syncthreads();
  const bool runs = args.groups == Int8Groups::Runs;
  if (runs) {  // the span is one group: one maximum, taken once
    if (warp == 0) {
      float m = 0.0f;
      for (int r = lane; r < span; r += 32) m = fmaxf(m, row_max[r]);
      for (int offset = 16; offset > 0; offset >>= 1)
        m = fmaxf(m, __shfl_xor_sync(kFull, m, offset));
      if (lane == 0) group_max[0] = m;
    }
  } else {
    for (int r = threadIdx.x; r < span; r += kQuantizeThreads) {
      const Members members = members_of(args.groups, r);
      float m = 0.0f;
      for (int i = 0; i < members.count; ++i) {
        const int at = members.first + i * members.step;
        m = fmaxf(m, row_max[at]);
        // Per-thread key groups are row pairs 8i + 2g and 8i + 2g + 1.
        if (args.groups == Int8Groups::KeyThread) m = fmaxf(m, row_max[at + 1]);
      }
      group_max[r] = m;
    }
  }
  __syncthreads();
  const bool sage = args.arithmetic == Int8Arithmetic::Sage;
  for (int r0 = warp; r0 < rows; r0 += kQuantizeWarps * kBatch) {
    float values[kBatch][4];
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      const int r = r0 + i * kQuantizeWarps;
      if (r < rows) load_four(row_of(r), lane, args.head_dim, vector, values[i]);
    }
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      const int r = r0 + i * kQuantizeWarps;
      if (r >= rows) break;
      const float* value = values[i];
      const float m = group_max[runs ? 0 : r];
      // Sage divides by its scale; SLA multiplies by the reciprocal of its step (both rounded
      // IEEE).
      const float scale = sage ? (m > 0.0f ? __fdiv_rn(m, 127.0f) : 1.0f) : __fdiv_rn(m, 127.0f);
      const float inverse = sage || m == 0.0f ? 0.0f : __frcp_rn(scale);
      const int64_t t = first_row + r;
      uint32_t packed = 0;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int d = 4 * lane + j;
        float level = 0.0f;
        if (d < args.head_dim && (sage || m > 0.0f)) {
          const float x =
              prepared(value[j], mean ? mean + d : nullptr, args.arithmetic, args.multiplier);
          level = roundf(sage ? __fdiv_rn(x, scale) : __fmul_rn(x, inverse));
          level = fminf(fmaxf(level, -127.0f), 127.0f);
        }
        packed |= uint32_t(uint8_t(int8_t(level))) << (8 * j);
      }
      reinterpret_cast<uint32_t*>(args.out + ((b * args.seq + t) * args.heads + h) *
                                                 kInt8Width)[lane] = packed;
      if (lane != 0) continue;
      if (args.row_scales) args.row_scales[pair * args.seq + t] = scale;
      // Key form: the first two rows of each fragment group of a 64-key block (rows 0, 2, 4, 6).
      if (args.block_scales && t % 64 < 8 && t % 2 == 0)
        args.block_scales[(pair * ((args.seq + 63) / 64) + t / 64) * 4 + (t % 64) / 2] = scale;
    }
  }
}

}  // namespace

void int8_quantize(const Int8QuantizeArgs& args, cudaStream_t stream) {
  check(args.x && args.out && (args.row_scales != nullptr) != (args.block_scales != nullptr),
        "int8_quantize: x, out and exactly one of row_scales and block_scales must be set");
  check(args.head_dim > 0 && args.head_dim <= kInt8Width,
        "int8_quantize: head size {} is above the INT8 row of {}", args.head_dim, kInt8Width);
  check(args.groups != Int8Groups::Runs || args.run > 0, "int8_quantize: a run of 0 rows");
  // The key form stores four scales per 64-key block: the groups must not split a fragment group.
  check(!args.block_scales || args.groups == Int8Groups::KeyThread ||
            (args.groups == Int8Groups::Runs && args.run % 64 == 0),
        "int8_quantize: key scales need groups of whole 64-key blocks or per-thread key groups");
  check(!(args.smooth && args.arithmetic == Int8Arithmetic::Sla) || args.multiplier == 1.0f,
        "int8_quantize: SLA's smoothed keys take no multiplier");
  if (args.batch * args.seq * args.heads == 0) return;
  // A last block of fewer than 8 keys leaves groups without rows: their (masked) keys read 0.
  if (args.block_scales)
    MMGEN_CUDA_CHECK(
        cudaMemsetAsync(args.block_scales, 0,
                        size_t(args.batch * args.heads * ((args.seq + 63) / 64) * 4) * 4, stream));
  const int64_t width = args.heads * args.head_dim;
  DeviceBuffer means;
  if (args.smooth) {
    const int64_t chunks = (args.seq + kMeanChunk - 1) / kMeanChunk;
    DeviceBuffer partial(size_t(args.batch * chunks * width) * 8);
    means = DeviceBuffer(size_t(args.batch * width) * 8);
    partial_sums_kernel<<<dim3(unsigned(chunks), unsigned(args.batch),
                               blocks_for(width, kMeanThreads)),
                          kMeanThreads, 0, stream>>>(static_cast<const uint16_t*>(args.x),
                                                     args.row_stride, args.seq, width,
                                                     partial.as<double>());
    MMGEN_CUDA_CHECK_LAUNCH();
    means_kernel<<<blocks_for(args.batch * width, 256), 256, 0, stream>>>(
        partial.as<double>(), chunks, width, args.seq, args.batch, means.as<double>());
    MMGEN_CUDA_CHECK_LAUNCH();
  }
  const int64_t span = span_rows(args.groups, args.run);
  check(span <= 1024, "int8_quantize: groups of {} rows exceed the 1024 one CTA takes", span);
  const double* mean_data = args.smooth ? means.as<double>() : nullptr;
  const dim3 grid(unsigned((args.seq + span - 1) / span), unsigned(args.heads),
                  unsigned(args.batch));
  quantize_kernel<<<grid, kQuantizeThreads, size_t(2 * span) * 4, stream>>>(args, mean_data,
                                                                            int(span));
  MMGEN_CUDA_CHECK_LAUNCH();
}

}  // namespace mmgen::cuda
