// INT8 quantisation of Q and K (int8_quantize.h) in four passes: the channel means (K only), each
// row's largest magnitude, each group's largest, then the levels. The arithmetic is the CPU's,
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

__device__ __forceinline__ float bf16_value(uint16_t bits) {
  return __uint_as_float(uint32_t(bits) << 16);
}

unsigned blocks_for(int64_t items, int threads) {
  return unsigned((items + threads - 1) / threads);
}

// Partial channel sums: grid (chunks, batch), a thread per column (head·head_dim + d).
__global__ void partial_sums_kernel(const uint16_t* x, int64_t row_stride, int64_t seq,
                                    int64_t width, double* partial) {
  const int64_t chunk = blockIdx.x, b = blockIdx.y, chunks = gridDim.x;
  for (int64_t column = threadIdx.x; column < width; column += blockDim.x) {
    double sum = 0.0;
    const int64_t last = min(seq, (chunk + 1) * kMeanChunk);
    for (int64_t t = chunk * kMeanChunk; t < last; ++t)
      sum += double(bf16_value(x[(b * seq + t) * row_stride + column]));
    partial[(b * chunks + chunk) * width + column] = sum;
  }
}

// Means = the partial sums added in chunk order, over the token count.
__global__ void means_kernel(const double* partial, int64_t chunks, int64_t width, int64_t seq,
                             int64_t batch, double* means) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= batch * width) return;
  const int64_t b = i / width, column = i % width;
  double sum = 0.0;
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

// A warp per (batch, token, head) row: its largest |value|, into [batch, heads, seq].
__global__ void row_max_kernel(const Int8QuantizeArgs args, const double* means, float* row_max) {
  const int64_t warp = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (warp >= args.batch * args.seq * args.heads) return;
  const int64_t h = warp % args.heads, t = (warp / args.heads) % args.seq,
                b = warp / (args.heads * args.seq);
  const uint16_t* row = static_cast<const uint16_t*>(args.x) +
                        (b * args.seq + t) * args.row_stride + h * args.head_dim;
  const double* mean = means ? means + (b * args.heads + h) * args.head_dim : nullptr;
  float m = 0.0f;
  for (int64_t d = lane; d < args.head_dim; d += 32)
    m = fmaxf(m, fabsf(prepared(bf16_value(row[d]), mean ? mean + d : nullptr, args.arithmetic,
                                args.multiplier)));
  for (int offset = 16; offset > 0; offset >>= 1) m = fmaxf(m, __shfl_xor_sync(kFull, m, offset));
  if (lane == 0) row_max[(b * args.heads + h) * args.seq + t] = m;
}

__host__ __device__ int64_t group_count(Int8Groups groups, int64_t run, int64_t seq) {
  switch (groups) {
    case Int8Groups::QueryThread:
      return (seq + 31) / 32 * 8;
    case Int8Groups::KeyThread:
      return (seq + 63) / 64 * 4;
    default:
      return (seq + run - 1) / run;
  }
}
__device__ __forceinline__ int64_t group_of(Int8Groups groups, int64_t run, int64_t row) {
  switch (groups) {
    case Int8Groups::QueryThread:
      return (row / 32) * 8 + row % 8;
    case Int8Groups::KeyThread:
      return (row / 64) * 4 + (row % 8) / 2;
    default:
      return row / run;
  }
}

// A thread per (batch·head, group): the group's largest magnitude over its member rows.
__global__ void group_max_kernel(const float* row_max, int64_t pairs, int64_t seq,
                                 Int8Groups groups, int64_t run, int64_t count, float* group_max) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= pairs * count) return;
  const int64_t pair = i / count, g = i % count;
  const float* rows = row_max + pair * seq;
  float m = 0.0f;
  if (groups == Int8Groups::QueryThread) {  // rows 32·slice + j + 8·m
    const int64_t first = (g / 8) * 32 + g % 8;
    for (int64_t r = first; r < min(seq, first + 32); r += 8) m = fmaxf(m, rows[r]);
  } else if (groups == Int8Groups::KeyThread) {  // rows 64·block + 8·i + 2·j + {0, 1}
    const int64_t first = (g / 4) * 64 + 2 * (g % 4);
    for (int64_t r = first; r < min(seq, first + 64); r += 8) {
      m = fmaxf(m, rows[r]);
      if (r + 1 < seq) m = fmaxf(m, rows[r + 1]);
    }
  } else {
    for (int64_t r = g * run; r < min(seq, (g + 1) * run); ++r) m = fmaxf(m, rows[r]);
  }
  group_max[i] = m;
}

// A warp per row: the levels (int8, zero-padded to kInt8Width) and the row's scale.
__global__ void levels_kernel(const Int8QuantizeArgs args, const double* means,
                              const float* group_max, int64_t count) {
  const int64_t warp = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (warp >= args.batch * args.seq * args.heads) return;
  const int64_t h = warp % args.heads, t = (warp / args.heads) % args.seq,
                b = warp / (args.heads * args.seq), pair = b * args.heads + h;
  const uint16_t* row = static_cast<const uint16_t*>(args.x) +
                        (b * args.seq + t) * args.row_stride + h * args.head_dim;
  const double* mean = means ? means + pair * args.head_dim : nullptr;
  const float m = group_max[pair * count + group_of(args.groups, args.run, t)];
  const bool sage = args.arithmetic == Int8Arithmetic::Sage;
  // Sage divides by its scale; SLA multiplies by the reciprocal of its step (both rounded IEEE).
  const float scale = sage ? (m > 0.0f ? __fdiv_rn(m, 127.0f) : 1.0f) : __fdiv_rn(m, 127.0f);
  const float inverse = sage || m == 0.0f ? 0.0f : __frcp_rn(scale);
  int8_t* out = args.out + ((b * args.seq + t) * args.heads + h) * kInt8Width;
  for (int64_t d = lane; d < kInt8Width; d += 32) {
    float level = 0.0f;
    if (d < args.head_dim && (sage || m > 0.0f)) {
      const float x =
          prepared(bf16_value(row[d]), mean ? mean + d : nullptr, args.arithmetic, args.multiplier);
      level = roundf(sage ? __fdiv_rn(x, scale) : __fmul_rn(x, inverse));
      level = fminf(fmaxf(level, -127.0f), 127.0f);
    }
    out[d] = int8_t(level);
  }
  if (lane != 0) return;
  if (args.row_scales) args.row_scales[pair * args.seq + t] = scale;
  // Key form: the first two rows of each fragment group of a 64-key block (rows 0, 2, 4, 6).
  if (args.block_scales && t % 64 < 8 && t % 2 == 0)
    args.block_scales[(pair * ((args.seq + 63) / 64) + t / 64) * 4 + (t % 64) / 2] = scale;
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
  const int64_t width = args.heads * args.head_dim, pairs = args.batch * args.heads;
  DeviceBuffer means;
  if (args.smooth) {
    const int64_t chunks = (args.seq + kMeanChunk - 1) / kMeanChunk;
    DeviceBuffer partial(size_t(args.batch * chunks * width) * 8);
    means = DeviceBuffer(size_t(args.batch * width) * 8);
    partial_sums_kernel<<<dim3(unsigned(chunks), unsigned(args.batch)), 256, 0, stream>>>(
        static_cast<const uint16_t*>(args.x), args.row_stride, args.seq, width,
        partial.as<double>());
    MMGEN_CUDA_CHECK_LAUNCH();
    means_kernel<<<blocks_for(args.batch * width, 256), 256, 0, stream>>>(
        partial.as<double>(), chunks, width, args.seq, args.batch, means.as<double>());
    MMGEN_CUDA_CHECK_LAUNCH();
  }
  const int64_t rows = args.batch * args.seq * args.heads;
  const int64_t count = group_count(args.groups, args.run, args.seq);
  DeviceBuffer row_max(size_t(rows) * 4), group_max(size_t(pairs * count) * 4);
  const double* mean_data = args.smooth ? means.as<double>() : nullptr;
  row_max_kernel<<<blocks_for(rows * 32, 256), 256, 0, stream>>>(args, mean_data,
                                                                 row_max.as<float>());
  MMGEN_CUDA_CHECK_LAUNCH();
  group_max_kernel<<<blocks_for(pairs * count, 256), 256, 0, stream>>>(
      row_max.as<float>(), pairs, args.seq, args.groups, args.run, count, group_max.as<float>());
  MMGEN_CUDA_CHECK_LAUNCH();
  levels_kernel<<<blocks_for(rows * 32, 256), 256, 0, stream>>>(args, mean_data,
                                                                group_max.as<float>(), count);
  MMGEN_CUDA_CHECK_LAUNCH();
}

}  // namespace mmgen::cuda
