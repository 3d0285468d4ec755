// The implicit-GEMM convolution kernel alone, at the Wan2.1 VAE decoder's heaviest shapes (4
// output frames of a chunk, two remembered frames), in both weight orders (tap-major and
// spatial-inner, see pack_conv_weights): TF32 in the default pipeline and the two others of
// set_conv3d_variant, the default with the input marked as already TF32-rounded, and FP32
// (3xTF32).
// Milliseconds per call (median of 10, CUDA events) and TFLOP/s. The inputs are TF32 values, so
// every TF32 mode must give the default's bits; the run fails if not.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/cuda/conv3d.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/device_memory.h"
#include "core/error.h"

using namespace mmgen;
using namespace mmgen::cuda;

namespace {

struct Shape3 {
  const char* name;
  int64_t in, out, kt, kh, kw, src_h, src_w, frames;
  bool upsample;
};

// Uniform values, rounded to TF32 (nearest, ties away) so every TF32 mode sees the same operands.
DeviceBuffer random_buffer(size_t count, float spread, std::mt19937& generator) {
  std::uniform_real_distribution<float> uniform(-spread, spread);
  std::vector<float> values(count);
  for (float& v : values) {
    uint32_t bits;
    const float x = uniform(generator);
    std::memcpy(&bits, &x, 4);
    bits = (bits + 0x1000u) & 0xffffe000u;
    std::memcpy(&v, &bits, 4);
  }
  DeviceBuffer buffer(count * sizeof(float));
  buffer.upload(values.data(), count * sizeof(float));
  return buffer;
}

}  // namespace

int main() try {
  const Shape3 shapes[] = {
      {"96->96 3x3x3 at 480x832 (up block 3)", 96, 96, 3, 3, 3, 480, 832, 4, false},
      {"192->192 3x3x3 at 240x416 (up block 2)", 192, 192, 3, 3, 3, 240, 416, 4, false},
      {"384->384 3x3x3 at 120x208 (up block 1)", 384, 384, 3, 3, 3, 120, 208, 2, false},
      {"192->96 3x3 after x2 to 480x832 (upsampler)", 192, 96, 1, 3, 3, 240, 416, 4, true},
      {"384->384 3x3x3 at 60x104 (mid, 1 frame)", 384, 384, 3, 3, 3, 60, 104, 1, false},
  };
  std::mt19937 generator(7);
  bool same_bits = true;
  for (const Shape3& s : shapes) {
    std::vector<float> weight(size_t(s.out * s.in * s.kt * s.kh * s.kw));
    std::uniform_real_distribution<float> uniform(-0.05f, 0.05f);
    for (float& v : weight) v = uniform(generator);
    const int64_t in_frame = s.in * s.src_h * s.src_w;
    const int64_t scale = s.upsample ? 2 : 1;
    const int64_t out_count = s.frames * s.out * s.src_h * s.src_w * scale * scale;
    DeviceBuffer input = random_buffer(size_t(s.frames * in_frame), 1.0f, generator);
    DeviceBuffer history = random_buffer(size_t(2 * in_frame), 1.0f, generator);
    DeviceBuffer bias = random_buffer(size_t(s.out), 0.1f, generator);
    DeviceBuffer output(size_t(out_count) * sizeof(float));
    const size_t count = static_cast<size_t>(out_count);
    cudaEvent_t start, stop;
    MMGEN_CUDA_CHECK(cudaEventCreate(&start));
    MMGEN_CUDA_CHECK(cudaEventCreate(&stop));
    for (const bool spatial_inner : {false, true}) {
      const PackedConvWeights packed =
          pack_conv_weights(weight.data(), s.out, s.in, s.kt, s.kh, s.kw, spatial_inner);
      DeviceBuffer w(packed.values.size() * sizeof(float));
      w.upload(packed.values.data(), packed.values.size() * sizeof(float));
      Conv3dArgs a;
      a.weight = w.as<float>();
      a.bias = bias.as<float>();
      a.input = input.as<float>();
      if (s.kt > 1) a.history = history.as<float>(), a.history_frames = 2;
      a.output = output.as<float>();
      a.frames = s.frames, a.in_channels = s.in, a.out_channels = s.out;
      a.src_h = s.src_h, a.src_w = s.src_w, a.kt = s.kt, a.kh = s.kh, a.kw = s.kw;
      a.k_pad = packed.k_pad;
      a.spatial_inner = packed.spatial_inner;
      a.upsample2x = s.upsample;
      const double flops = conv3d_flops(a);
      std::printf("%s, %s K order: %.1f GFLOP per call\n", s.name,
                  spatial_inner ? "spatial-inner" : "tap-major", flops / 1e9);
      std::vector<float> reference(count), result(count);
      for (int run = 0; run < 5; ++run) {
        const bool split = run == 4;
        set_conv3d_variant(run == 1 || run == 2 ? run : 0);  // run 3: the default, pre-rounded
        a.input_tf32_rounded = run == 3;
        const ConvPrecision precision = split ? ConvPrecision::TF32x3 : ConvPrecision::TF32;
        output.fill_bytes(0xff);
        for (int i = 0; i < 2; ++i) conv3d_forward(a, precision);
        std::vector<float> times;
        for (int i = 0; i < 10; ++i) {
          MMGEN_CUDA_CHECK(cudaEventRecord(start));
          conv3d_forward(a, precision);
          MMGEN_CUDA_CHECK(cudaEventRecord(stop));
          MMGEN_CUDA_CHECK(cudaEventSynchronize(stop));
          float ms = 0;
          MMGEN_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
          times.push_back(ms);
        }
        std::sort(times.begin(), times.end());
        const double ms = times[times.size() / 2];
        std::string note;
        if (!split) {
          output.download(run == 0 ? reference.data() : result.data(), count * sizeof(float));
          if (run > 0) {
            const bool same = std::memcmp(reference.data(), result.data(), count * 4) == 0;
            same_bits = same_bits && same;
            note = same ? ", same bits as variant 0" : ", DIFFERENT bits from variant 0";
          }
        }
        static const char* names[] = {"TF32 (default)", "TF32, 16-deep, 256 threads",
                                      "TF32, 32-deep, 256 threads", "TF32, input pre-rounded",
                                      "FP32 (3xTF32)"};
        std::printf("  %-28s %8.3f ms  %6.1f TFLOP/s%s\n", names[run], ms, flops / ms / 1e9,
                    note.c_str());
      }
      set_conv3d_variant(0);
    }
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  }
  std::printf("conv3d_cuda_bench: %s\n",
              same_bits ? "every variant gives the same bits" : "FAILED: variants disagree");
  return same_bits ? 0 : 1;
} catch (const std::exception& error) {
  std::fprintf(stderr, "conv3d_cuda_bench: %s\n", error.what());
  return 1;
}
