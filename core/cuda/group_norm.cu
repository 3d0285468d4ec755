#include "core/cuda/cuda_check.h"
#include "core/cuda/group_norm.h"

namespace mmgen::cuda {
namespace {

constexpr int kThreads = 256;
// Values one block reduces: 16 per thread, so a 1024² VAE layer (32 groups of 262144 values)
// launches 2048 blocks, two waves of an H100, while a small layer still gets one block per group.
constexpr int64_t kChunkValues = 16 * kThreads;
// At most this many chunks per group (bigger groups give each block more values): keeps the
// partial sums, and the one-warp sum over them, small.
constexpr int64_t kMaxChunks = 1024;

unsigned elementwise_blocks(int64_t count) {
  const int64_t blocks = (count + kThreads - 1) / kThreads;
  return unsigned(blocks < 65536 ? blocks : 65536);
}

// The chunk length for a group: a multiple of 4, so float4 reads never straddle two chunks.
int64_t chunk_values(int64_t group_values, int64_t chunks) {
  const int64_t values = (group_values + chunks - 1) / chunks;
  return (values + 3) / 4 * 4;
}

__device__ __forceinline__ double warp_sum(double value) {
  for (int offset = 16; offset > 0; offset /= 2)
    value += __shfl_xor_sync(0xffffffffu, value, offset);
  return value;
}

// The block's threads' values summed in double (each thread's own share was summed in float).
__device__ double block_sum(double value) {
  __shared__ double warps[kThreads / 32];
  value = warp_sum(value);
  if (threadIdx.x % 32 == 0) warps[threadIdx.x / 32] = value;
  __syncthreads();
  double total = 0;
  if (threadIdx.x == 0)
    for (int i = 0; i < kThreads / 32; ++i) total += warps[i];
  return total;  // meaningful in thread 0
}

__device__ __forceinline__ float term(float value, bool centred, float mean) {
  if (!centred) return value;
  const float d = value - mean;
  return d * d;
}

// One block per (group, chunk): the sum of the chunk's values, or with `mean` of their squared
// distances from their group's mean, into partial[group · chunks + chunk]. kVec4: the groups and
// chunks are whole float4s (positions % 4 == 0 and an aligned x), read 16 bytes at a time.
template <bool kVec4>
__global__ void partial_sums_kernel(const float* x, int64_t group_values, int64_t chunks,
                                    int64_t chunk_length, const double* mean, double* partial) {
  const int64_t block = blockIdx.x, group = block / chunks, chunk = block - group * chunks;
  const int64_t begin = chunk * chunk_length;
  const int64_t end = min(group_values, begin + chunk_length);
  const float* values = x + group * group_values;
  const bool centred = mean != nullptr;
  const float m = centred ? float(mean[group]) : 0.0f;
  float sum = 0.0f;
  if (kVec4) {
    const float4* quads = reinterpret_cast<const float4*>(values);
    for (int64_t i = begin / 4 + threadIdx.x; i < end / 4; i += kThreads) {
      const float4 q = quads[i];
      sum += term(q.x, centred, m) + term(q.y, centred, m) + term(q.z, centred, m) +
             term(q.w, centred, m);
    }
  } else {
    for (int64_t i = begin + threadIdx.x; i < end; i += kThreads)
      sum += term(values[i], centred, m);
  }
  const double total = block_sum(double(sum));
  if (threadIdx.x == 0) partial[block] = total;
}

// One warp per group: its chunks' partial sums combined. The first pass leaves the mean in
// stats[group]; the second 1 / √(variance + eps) rounded to float32, as the CPU keeps it, in
// stats[groups + group].
__global__ void finish_groups_kernel(const double* partial, int64_t groups, int64_t chunks,
                                     int64_t group_values, float eps, bool squares, double* stats) {
  const int64_t group = blockIdx.x;
  double sum = 0;
  for (int64_t i = threadIdx.x; i < chunks; i += 32) sum += partial[group * chunks + i];
  sum = warp_sum(sum);
  if (threadIdx.x != 0) return;
  const double average = sum / double(group_values);
  if (squares)
    stats[groups + group] = double(float(1.0 / sqrt(average + double(eps))));
  else
    stats[group] = average;
}

// One thread per (n, c) plane: the CPU's folded affine factors, scale = rstd · weight[c] and
// shift = −scale · mean + bias[c], each rounded as the CPU rounds them (no contraction to fma).
__global__ void plane_factors_kernel(const double* stats, const float* weight, const float* bias,
                                     int64_t batch, int64_t channels, int64_t groups_per_image,
                                     float* scale, float* shift) {
  const int64_t plane = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (plane >= batch * channels) return;
  const int64_t n = plane / channels, c = plane - n * channels;
  const int64_t groups = batch * groups_per_image;
  const int64_t group = n * groups_per_image + c / (channels / groups_per_image);
  const float mean = float(stats[group]), rstd = float(stats[groups + group]);
  const float s = weight ? __fmul_rn(rstd, weight[c]) : rstd;
  const float b = __fmul_rn(-s, mean);
  scale[plane] = s;
  shift[plane] = bias ? __fadd_rn(b, bias[c]) : b;
}

__device__ __forceinline__ float affine(float value, float scale, float shift, bool silu) {
  const float v = __fadd_rn(__fmul_rn(value, scale), shift);  // the CPU's x · scale + shift
  return silu ? v / (1.0f + expf(-v)) : v;
}

template <bool kVec4>
__global__ void apply_kernel(const float* x, float* y, int64_t total, int64_t positions,
                             const float* scale, const float* shift, bool silu) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  if (kVec4) {
    const float4* in = reinterpret_cast<const float4*>(x);
    float4* out = reinterpret_cast<float4*>(y);
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total / 4; i += stride) {
      const int64_t plane = i * 4 / positions;  // positions % 4 == 0: one plane per float4
      const float s = scale[plane], t = shift[plane];
      const float4 q = in[i];
      out[i] = make_float4(affine(q.x, s, t, silu), affine(q.y, s, t, silu),
                           affine(q.z, s, t, silu), affine(q.w, s, t, silu));
    }
  } else {
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += stride) {
      const int64_t plane = i / positions;
      y[i] = affine(x[i], scale[plane], shift[plane], silu);
    }
  }
}

template <bool kVec4>
void run(const float* x, float* y, int64_t batch, int64_t channels, int64_t positions,
         int64_t groups_per_image, float eps, const float* weight, const float* bias, bool silu,
         const GroupNormWorkspace& workspace, cudaStream_t stream) {
  const int64_t groups = batch * groups_per_image;
  const int64_t group_values = channels / groups_per_image * positions;
  const int64_t chunks = group_norm_chunks(group_values);
  const int64_t length = chunk_values(group_values, chunks);
  const unsigned stat_blocks = unsigned(groups * chunks);
  partial_sums_kernel<kVec4><<<stat_blocks, kThreads, 0, stream>>>(x, group_values, chunks, length,
                                                                   nullptr, workspace.partial);
  MMGEN_CUDA_CHECK_LAUNCH();
  finish_groups_kernel<<<unsigned(groups), 32, 0, stream>>>(
      workspace.partial, groups, chunks, group_values, eps, false, workspace.mean);
  MMGEN_CUDA_CHECK_LAUNCH();
  partial_sums_kernel<kVec4><<<stat_blocks, kThreads, 0, stream>>>(
      x, group_values, chunks, length, workspace.mean, workspace.partial);
  MMGEN_CUDA_CHECK_LAUNCH();
  finish_groups_kernel<<<unsigned(groups), 32, 0, stream>>>(
      workspace.partial, groups, chunks, group_values, eps, true, workspace.mean);
  MMGEN_CUDA_CHECK_LAUNCH();
  const int64_t planes = batch * channels;
  float* scale = workspace.factors;
  float* shift = workspace.factors + planes;
  plane_factors_kernel<<<unsigned((planes + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
      workspace.mean, weight, bias, batch, channels, groups_per_image, scale, shift);
  MMGEN_CUDA_CHECK_LAUNCH();
  const int64_t total = planes * positions;
  apply_kernel<kVec4><<<elementwise_blocks(kVec4 ? total / 4 : total), kThreads, 0, stream>>>(
      x, y, total, positions, scale, shift, silu);
  MMGEN_CUDA_CHECK_LAUNCH();
}

}  // namespace

int64_t group_norm_chunks(int64_t group_values) {
  const int64_t chunks = (group_values + kChunkValues - 1) / kChunkValues;
  return chunks < 1 ? 1 : chunks > kMaxChunks ? kMaxChunks : chunks;
}

void group_norm_f32(const float* x, float* y, int64_t batch, int64_t channels, int64_t positions,
                    int64_t groups, float eps, const float* weight, const float* bias, bool silu,
                    const GroupNormWorkspace& workspace, cudaStream_t stream) {
  if (batch * channels * positions == 0) return;
  const bool aligned =
      reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(y) % 16 == 0;
  if (positions % 4 == 0 && aligned)
    run<true>(x, y, batch, channels, positions, groups, eps, weight, bias, silu, workspace, stream);
  else
    run<false>(x, y, batch, channels, positions, groups, eps, weight, bias, silu, workspace,
               stream);
}

}  // namespace mmgen::cuda
