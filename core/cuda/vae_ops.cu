#include "core/cuda/cuda_check.h"
#include "core/cuda/vae_ops.h"

namespace mmgen::cuda {
namespace {

constexpr int kThreads = 256;

unsigned blocks_for(int64_t count) {
  const int64_t blocks = (count + kThreads - 1) / kThreads;
  return unsigned(blocks < 65536 ? blocks : 65536);
}

// One thread per pixel: consecutive threads read consecutive pixels of each channel plane.
__device__ __forceinline__ float round_to_tf32(float value) {
  uint32_t bits;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(bits) : "f"(value));
  return __uint_as_float(bits);
}

__global__ void channel_rms_norm_kernel(const float* x, const float* gamma, bool silu, float* y,
                                        int64_t frames, int64_t channels, int64_t positions,
                                        bool round_tf32) {
  const float scale = sqrtf(float(channels));
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < frames * positions;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t frame = i / positions, pixel = i - frame * positions;
    const float* in = x + frame * channels * positions + pixel;
    float* out = y + frame * channels * positions + pixel;
    float sum = 0.0f;
    for (int64_t c = 0; c < channels; ++c) sum = fmaf(in[c * positions], in[c * positions], sum);
    const float denominator = fmaxf(sqrtf(sum), 1e-12f);
    for (int64_t c = 0; c < channels; ++c) {
      float v = in[c * positions] / denominator * scale * gamma[c];
      if (silu) v = v / (1.0f + expf(-v));
      out[c * positions] = round_tf32 ? round_to_tf32(v) : v;
    }
  }
}

__device__ float block_reduce(float value, bool maximum) {
  __shared__ float partial[kThreads / 32];
  __shared__ float total;
  for (int offset = 16; offset > 0; offset /= 2) {
    const float other = __shfl_xor_sync(0xffffffffu, value, offset);
    value = maximum ? fmaxf(value, other) : value + other;
  }
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = value;
  __syncthreads();
  if (threadIdx.x == 0) {
    float result = partial[0];
    for (int i = 1; i < kThreads / 32; ++i)
      result = maximum ? fmaxf(result, partial[i]) : result + partial[i];
    total = result;
  }
  __syncthreads();
  const float result = total;
  __syncthreads();
  return result;
}

__global__ void softmax_rows_kernel(float* s, int64_t columns, float scale) {
  float* row = s + blockIdx.x * columns;
  float highest = -INFINITY;
  for (int64_t j = threadIdx.x; j < columns; j += kThreads)
    highest = fmaxf(highest, row[j] * scale);
  highest = block_reduce(highest, true);
  float sum = 0.0f;
  for (int64_t j = threadIdx.x; j < columns; j += kThreads) {
    const float e = expf(row[j] * scale - highest);
    row[j] = e;
    sum += e;
  }
  const float inverse = 1.0f / block_reduce(sum, false);
  for (int64_t j = threadIdx.x; j < columns; j += kThreads) row[j] *= inverse;
}

__global__ void clamp_transpose_kernel(const float* frames, float* out, int64_t count,
                                       int64_t channels, int64_t positions, float low, float high) {
  const int64_t total = count * channels * positions;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t pixel = i % positions, rest = i / positions;
    const int64_t c = rest % channels, t = rest / channels;
    out[(c * count + t) * positions + pixel] = fminf(fmaxf(frames[i], low), high);
  }
}

}  // namespace

void channel_rms_norm_f32(const float* x, const float* gamma, bool silu, float* y, int64_t frames,
                          int64_t channels, int64_t positions, bool round_tf32,
                          cudaStream_t stream) {
  if (frames * positions == 0) return;
  channel_rms_norm_kernel<<<blocks_for(frames * positions), kThreads, 0, stream>>>(
      x, gamma, silu, y, frames, channels, positions, round_tf32);
  MMGEN_CUDA_CHECK_LAUNCH();
}

void softmax_rows_f32(float* s, int64_t rows, int64_t columns, float scale, cudaStream_t stream) {
  if (rows == 0) return;
  // One block per row; rows beyond the grid limit go in slices.
  for (int64_t first = 0; first < rows; first += 2147483647) {
    const int64_t count = rows - first < 2147483647 ? rows - first : 2147483647;
    softmax_rows_kernel<<<unsigned(count), kThreads, 0, stream>>>(s + first * columns, columns,
                                                                  scale);
    MMGEN_CUDA_CHECK_LAUNCH();
  }
}

void clamp_to_channel_major_f32(const float* frames, float* out, int64_t count, int64_t channels,
                                int64_t positions, float low, float high, cudaStream_t stream) {
  if (count * channels * positions == 0) return;
  clamp_transpose_kernel<<<blocks_for(count * channels * positions), kThreads, 0, stream>>>(
      frames, out, count, channels, positions, low, high);
  MMGEN_CUDA_CHECK_LAUNCH();
}

}  // namespace mmgen::cuda
