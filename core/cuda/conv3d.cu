// The implicit-GEMM convolution kernel (see conv3d.h). One block computes a tile of
// [block rows (output channels) × 128 or 256 pixels] of one output frame: C = W · P, where W is the
// packed weight matrix and P the patch matrix (row k = (tap, input channel), column = pixel), which
// is never stored: each stage of 32 rows is gathered from the frames into shared memory with
// cp.async (zero-filled where a tap falls outside the frame or before the remembered frames), three
// stages in flight. 4 or 8 warps (2 along the channels × 2 or 4 along the pixels, 64 pixels each)
// run mma.sync m16n8k8 TF32
// with fp32 accumulators; the epilogue adds the bias and an optional residual.
#include <cstdint>

#include "core/cuda/conv3d_kernels.h"
#include "core/cuda/cuda_check.h"

namespace mmgen::cuda {
namespace {

constexpr int kGroup = 16;  // patch rows that share one tap when in_channels % 16 == 0
// Per-group (tap, channel) decode table in shared memory, filled once per block; convolutions
// with more groups decode with divisions instead.
constexpr int kMaxGroups = 1024;

// The K depth of one pipeline stage, the number of stages in flight, and the threads of a block
// (= its pixels: one per thread when gathering patches; 64 per warp column, 2 warp rows).
template <int Depth, int Stages, int Threads = 256>
struct Pipeline {
  static constexpr int kDepth = Depth, kStages = Stages, kThreads = Threads, kPixels = Threads;
  static constexpr int kWarpColumns = Threads / 64;
  static constexpr int kBRow = Threads + 8;  // padded: the fragment reads of a warp hit 32 banks
  static constexpr int kARow = Depth + 4;    // likewise
  template <int BM>
  static constexpr size_t stage_floats() {
    return size_t(BM) * kARow + size_t(Depth) * kBRow;
  }
};

struct Params {
  const float* weight;
  const float* bias;
  const float* input;
  const float* history;
  const float* residual;
  float* output;
  int history_frames;
  int in_channels, out_channels, src_h, src_w, height, width;
  int kt, kh, kw;
  int k_total, k_pad;
  long long in_frame, out_frame;  // floats per input / output frame
  bool upsample;
  bool spatial_inner;  // the weights' column order (see pack_conv_weights)
};

__device__ __forceinline__ uint32_t shared_address(const void* pointer) {
  return uint32_t(__cvta_generic_to_shared(pointer));
}

// 4 bytes global -> shared, or 4 zero bytes when !valid (then `source` is not read).
__device__ __forceinline__ void copy4(float* destination, const float* source, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(shared_address(destination)),
               "l"(source), "r"(valid ? 4 : 0)
               : "memory");
}
__device__ __forceinline__ void copy16(float* destination, const float* source) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(shared_address(destination)),
               "l"(source)
               : "memory");
}
__device__ __forceinline__ void commit_copies() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int Pending>
__device__ __forceinline__ void wait_copies() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(Pending) : "memory");
}

__device__ __forceinline__ uint32_t to_tf32(float value) {
  uint32_t result;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(result) : "f"(value));
  return result;
}

__device__ __forceinline__ void mma_tf32(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// The input frame temporal tap `t` of output frame `frame` reads: in the chunk, in the history,
// or null (causal zero padding).
__device__ __forceinline__ const float* tap_frame(const Params& p, int frame, int t) {
  const int f = frame + t - (p.kt - 1);
  if (f >= 0) return p.input + f * p.in_frame;
  const int h = p.history_frames + f;
  return h >= 0 ? p.history + h * p.in_frame : nullptr;
}

// Where patch row (tap, channel) of pixel (y, x) lives, or null for a zero.
__device__ __forceinline__ const float* patch_source(const Params& p, int frame, int tap,
                                                     int channel, int y, int x) {
  const int taps_2d = p.kh * p.kw;
  const int t = tap / taps_2d, r = tap - t * taps_2d;
  const int yy = y + r / p.kw - p.kh / 2, xx = x + r % p.kw - p.kw / 2;
  const float* frame_start = tap_frame(p, frame, t);
  if (frame_start == nullptr || yy < 0 || yy >= p.height || xx < 0 || xx >= p.width) return nullptr;
  const int offset = p.upsample ? (yy >> 1) * p.src_w + (xx >> 1) : yy * p.src_w + xx;
  return frame_start + (long long)channel * p.src_h * p.src_w + offset;
}

// One 16-row group of the patch matrix when in_channels % 16 == 0: temporal tap, spatial offset
// and first channel.
struct Group {
  int t, dy, dx, channel;
};

__device__ __forceinline__ Group decode_group(const Params& p, int k0) {
  const int taps_2d = p.kh * p.kw;
  if (p.spatial_inner) {  // k0 / 16 = (t · in/16 + channel group) · kh·kw + spatial tap
    const int group = k0 / kGroup, per_t = p.in_channels / kGroup * taps_2d;
    const int t = group / per_t, rest = group - t * per_t;
    const int channel_group = rest / taps_2d, r = rest - channel_group * taps_2d;
    return {t, r / p.kw - p.kh / 2, r % p.kw - p.kw / 2, channel_group * kGroup};
  }
  const int tap = k0 / p.in_channels;
  const int t = tap / taps_2d, r = tap - t * taps_2d;
  return {t, r / p.kw - p.kh / 2, r % p.kw - p.kw / 2, k0 - tap * p.in_channels};
}

// Patch rows k0 .. k0 + 15 for this thread's pixel into `destination` (rows BRow apart).
template <int kBRow>
__device__ __forceinline__ void load_patch_group(const Params& p, float* destination, int k0,
                                                 int frame, int y, int x, bool pixel_ok,
                                                 bool aligned, const int4* groups) {
  if (aligned) {  // the 16 rows share one tap and hold consecutive channels
    const float* source = nullptr;
    if (pixel_ok && k0 < p.k_pad) {
      Group g;
      if (groups) {
        const int4 entry = groups[k0 / kGroup];
        g = {entry.x, entry.y, entry.z, entry.w};
      } else {
        g = decode_group(p, k0);
      }
      const int yy = y + g.dy, xx = x + g.dx;
      const float* frame_start = tap_frame(p, frame, g.t);
      if (frame_start != nullptr && yy >= 0 && yy < p.height && xx >= 0 && xx < p.width)
        source = frame_start + (long long)g.channel * p.src_h * p.src_w +
                 (p.upsample ? (yy >> 1) * p.src_w + (xx >> 1) : yy * p.src_w + xx);
    }
    const int plane = p.src_h * p.src_w;
#pragma unroll
    for (int j = 0; j < kGroup; ++j)
      copy4(destination + j * kBRow, source ? source + j * plane : p.weight, source != nullptr);
  } else {
#pragma unroll 4
    for (int j = 0; j < kGroup; ++j) {
      const int k = k0 + j;
      const float* source = nullptr;
      if (pixel_ok && k < p.k_total) {
        const int tap = k / p.in_channels;
        source = patch_source(p, frame, tap, k - tap * p.in_channels, y, x);
      }
      copy4(destination + j * kBRow, source ? source : p.weight, source != nullptr);
    }
  }
}

// Weight rows m0 .. m0 + BM - 1, columns k0 .. k0 + Depth - 1 into one A stage ([BM][ARow]);
// columns past k_pad (a deep stage's tail) are zero-filled.
template <int BM, int Depth, int ARow, int kThreads>
__device__ __forceinline__ void load_weights(const Params& p, float* stage, int m0, int k0) {
  constexpr int kQuads = Depth / 4;
  for (int v = threadIdx.x; v < BM * kQuads; v += kThreads) {
    const int m = v / kQuads, quad = v % kQuads;
    const int k = k0 + quad * 4;
    float* destination = stage + m * ARow + quad * 4;
    if (k < p.k_pad) {
      copy16(destination, p.weight + (long long)(m0 + m) * p.k_pad + k);
    } else {
#pragma unroll
      for (int e = 0; e < 4; ++e) copy4(destination + e, p.weight, false);
    }
  }
}

// kMode: 0 TF32 (operands rounded here), 1 TF32 with the input already TF32-rounded (only the
// weights are rounded here), 2 three TF32 products (float32 accuracy).
template <int MF, int kMode, class P>
__global__ void __launch_bounds__(P::kThreads, 256 / P::kThreads) conv3d_kernel(const Params p) {
  constexpr bool kSplit = kMode == 2, kRoundedInput = kMode == 1;
  constexpr int BM = 32 * MF;  // 2 warps along the channels, MF 16-row fragments each
  constexpr int kDepth = P::kDepth, kStages = P::kStages, kARow = P::kARow, kBRow = P::kBRow;
  constexpr int kThreads = P::kThreads, kPixels = P::kPixels;
  extern __shared__ __align__(16) float shared[];
  float* a_stages = shared;
  float* b_stages = shared + kStages * BM * kARow;
  int4* group_table = reinterpret_cast<int4*>(shared + kStages * P::template stage_floats<BM>());

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int warp_m = warp / P::kWarpColumns, warp_n = warp % P::kWarpColumns;
  const int g = lane >> 2, t4 = lane & 3;
  const int frame = blockIdx.z;
  const int m0 = blockIdx.y * BM, p0 = blockIdx.x * kPixels;
  const int pixels = p.height * p.width;
  const int pixel = p0 + int(threadIdx.x);
  const bool pixel_ok = pixel < pixels;
  const int y = pixel_ok ? pixel / p.width : 0, x = pixel_ok ? pixel - y * p.width : 0;
  const bool aligned = p.in_channels % kGroup == 0;
  const int group_count = p.k_pad / kGroup;
  const int4* groups = nullptr;
  if (aligned && group_count <= kMaxGroups) {
    for (int i = threadIdx.x; i < group_count; i += kThreads) {
      const Group decoded = decode_group(p, i * kGroup);
      group_table[i] = make_int4(decoded.t, decoded.dy, decoded.dx, decoded.channel);
    }
    __syncthreads();
    groups = group_table;
  }

  // Temporal taps that reach before the remembered frames only add zeros: skip their columns.
  const int first_tap = max(0, p.kt - 1 - frame - p.history_frames);
  const int k_begin = first_tap * p.kh * p.kw * p.in_channels / kGroup * kGroup;
  const int chunks = (p.k_pad - k_begin + kDepth - 1) / kDepth;

  float acc[MF][8][4];
#pragma unroll
  for (int i = 0; i < MF; ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

  auto load = [&](int chunk, int stage) {
    const int k0 = k_begin + chunk * kDepth;
    load_weights<BM, kDepth, kARow, kThreads>(p, a_stages + stage * BM * kARow, m0, k0);
    float* b_stage = b_stages + stage * kDepth * kBRow + threadIdx.x;
#pragma unroll
    for (int group = 0; group < kDepth / kGroup; ++group)
      load_patch_group<kBRow>(p, b_stage + group * kGroup * kBRow, k0 + group * kGroup, frame, y, x,
                              pixel_ok, aligned, groups);
  };
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < chunks) load(s, s);
    commit_copies();
  }
  for (int chunk = 0; chunk < chunks; ++chunk) {
    wait_copies<kStages - 2>();
    __syncthreads();  // the stage read last iteration is free again, this one has landed
    const int next = chunk + kStages - 1;
    if (next < chunks) load(next, next % kStages);
    commit_copies();

    const float* a = a_stages + (chunk % kStages) * BM * kARow + warp_m * 16 * MF * kARow;
    const float* b = b_stages + (chunk % kStages) * kDepth * kBRow + warp_n * 64;
#pragma unroll
    for (int ks = 0; ks < kDepth; ks += 8) {
      uint32_t a_big[MF][4], a_small[MF][4];
#pragma unroll
      for (int mf = 0; mf < MF; ++mf) {
        const float* rows = a + (mf * 16 + g) * kARow + ks + t4;
        const float values[4] = {rows[0], rows[8 * kARow], rows[4], rows[8 * kARow + 4]};
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          a_big[mf][e] = to_tf32(values[e]);
          if (kSplit) a_small[mf][e] = to_tf32(values[e] - __uint_as_float(a_big[mf][e]));
        }
      }
#pragma unroll
      for (int nf = 0; nf < 8; ++nf) {
        const float v0 = b[(ks + t4) * kBRow + nf * 8 + g];
        const float v1 = b[(ks + t4 + 4) * kBRow + nf * 8 + g];
        const uint32_t b0 = kRoundedInput ? __float_as_uint(v0) : to_tf32(v0);
        const uint32_t b1 = kRoundedInput ? __float_as_uint(v1) : to_tf32(v1);
        if (kSplit) {
          const uint32_t s0 = to_tf32(v0 - __uint_as_float(b0));
          const uint32_t s1 = to_tf32(v1 - __uint_as_float(b1));
#pragma unroll
          for (int mf = 0; mf < MF; ++mf) {  // the small terms first: they are the smallest
            mma_tf32(acc[mf][nf], a_small[mf], b0, b1);
            mma_tf32(acc[mf][nf], a_big[mf], s0, s1);
          }
        }
#pragma unroll
        for (int mf = 0; mf < MF; ++mf) mma_tf32(acc[mf][nf], a_big[mf], b0, b1);
      }
    }
  }
  wait_copies<0>();

  float* output = p.output + frame * p.out_frame;
  const float* residual = p.residual ? p.residual + frame * p.out_frame : nullptr;
#pragma unroll
  for (int mf = 0; mf < MF; ++mf)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = m0 + warp_m * 16 * MF + mf * 16 + g + half * 8;
      if (row >= p.out_channels) continue;
      const float bias = p.bias ? p.bias[row] : 0.0f;
#pragma unroll
      for (int nf = 0; nf < 8; ++nf)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int column = p0 + warp_n * 64 + nf * 8 + 2 * t4 + e;
          if (column >= pixels) continue;
          const long long index = (long long)row * pixels + column;
          float value = acc[mf][nf][half * 2 + e] + bias;
          if (residual) value += residual[index];
          output[index] = value;
        }
    }
}

template <int MF, int kMode, class P>
void launch(const Params& p, int frames, int rows, cudaStream_t stream) {
  constexpr int BM = 32 * MF;
  const bool table = p.in_channels % kGroup == 0 && p.k_pad / kGroup <= kMaxGroups;
  const size_t stage_bytes = size_t(P::kStages) * P::template stage_floats<BM>() * sizeof(float);
  const size_t shared_bytes = stage_bytes + (table ? size_t(p.k_pad / kGroup) * sizeof(int4) : 0);
  static const bool configured = [&] {
    MMGEN_CUDA_CHECK(cudaFuncSetAttribute(conv3d_kernel<MF, kMode, P>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          int(stage_bytes + kMaxGroups * sizeof(int4))));
    return true;
  }();
  (void)configured;
  const dim3 grid(unsigned((p.height * p.width + P::kPixels - 1) / P::kPixels), unsigned(rows / BM),
                  unsigned(frames));
  conv3d_kernel<MF, kMode, P><<<grid, P::kThreads, shared_bytes, stream>>>(p);
  MMGEN_CUDA_CHECK_LAUNCH();
}

// Measured on an H100 (conv3d_cuda_bench, 2026-11-24): 32-deep stages are 5-10% faster than
// 16-deep and a fourth stage gained nothing; 128-thread blocks (two per SM, so one computes while
// the other waits at its barrier) are 5-10% faster for 96-row blocks but slower for 128-row
// blocks, whose shared memory leaves room for one block per SM only.
using Wide = Pipeline<32, 3, 256>;
using Half = Pipeline<32, 3, 128>;
using Shallow = Pipeline<16, 3, 256>;  // the first version, kept for the benchmark

template <int kMode, class P96, class P128>
void dispatch(const Params& p, int block_rows, int frames, int rows, cudaStream_t stream) {
  switch (block_rows) {
    case 32:
      return launch<1, kMode, Wide>(p, frames, rows, stream);
    case 64:
      return launch<2, kMode, Wide>(p, frames, rows, stream);
    case 96:
      return launch<3, kMode, P96>(p, frames, rows, stream);
    default:
      return launch<4, kMode, P128>(p, frames, rows, stream);
  }
}

template <int kMode>
void dispatch_variant(const Params& p, int variant, int block_rows, int frames, int rows,
                      cudaStream_t stream) {
  if (variant == 1) return dispatch<kMode, Shallow, Shallow>(p, block_rows, frames, rows, stream);
  if (variant == 2) return dispatch<kMode, Wide, Wide>(p, block_rows, frames, rows, stream);
  dispatch<kMode, Half, Wide>(p, block_rows, frames, rows, stream);
}

}  // namespace

void launch_conv3d(const Conv3dArgs& args, int block_rows, ConvPrecision precision, int variant,
                   cudaStream_t stream) {
  Params p;
  p.weight = args.weight;
  p.bias = args.bias;
  p.input = args.input;
  p.history = args.history;
  p.history_frames = args.history ? int(args.history_frames) : 0;
  p.residual = args.residual;
  p.output = args.output;
  p.in_channels = int(args.in_channels);
  p.out_channels = int(args.out_channels);
  p.src_h = int(args.src_h);
  p.src_w = int(args.src_w);
  p.height = int(args.upsample2x ? 2 * args.src_h : args.src_h);
  p.width = int(args.upsample2x ? 2 * args.src_w : args.src_w);
  p.kt = int(args.kt);
  p.kh = int(args.kh);
  p.kw = int(args.kw);
  p.k_total = int(args.kt * args.kh * args.kw * args.in_channels);
  p.k_pad = int(args.k_pad);
  p.in_frame = (long long)args.in_channels * args.src_h * args.src_w;
  p.out_frame = (long long)args.out_channels * p.height * p.width;
  p.upsample = args.upsample2x;
  p.spatial_inner = args.spatial_inner;
  const int rows = int((args.out_channels + block_rows - 1) / block_rows * block_rows);
  const int frames = int(args.frames);
  if (precision == ConvPrecision::TF32x3)
    return dispatch<2, Wide, Wide>(p, block_rows, frames, rows, stream);
  if (args.input_tf32_rounded)
    return dispatch_variant<1>(p, variant, block_rows, frames, rows, stream);
  dispatch_variant<0>(p, variant, block_rows, frames, rows, stream);
}

}  // namespace mmgen::cuda
