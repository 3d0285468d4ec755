// Seconds and GFLOP/s of the CPU's linear-layer product at the shapes of a Wan2.1-1.3B forward and
// of the wan-shapes example, for mmgen's product (cpu::linear_product) and Eigen's, with float32
// and bfloat16 weights, and mmgen's bf16 products (where the CPU has AVX-512 BF16; 0 otherwise).
// torch's figure for the same shapes comes from bench/linear_torch.py.
//
//   linear_bench [--repeats N] [--shapes N] [--no-eigen]   (threads from OMP_NUM_THREADS)
//
// --shapes N times the first N shapes only; --no-eigen skips Eigen's product (printed as 0).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/gemm_cpu.h"
#include "core/ops.h"

namespace {

struct Shape3 {
  const char* what;
  int64_t m, k, n;
};

const Shape3 kShapes[] = {
    {"1.3B q/k/v/o (1560 tokens)", 1560, 1536, 1536},
    {"1.3B ffn up", 1560, 1536, 8960},
    {"1.3B ffn down", 1560, 8960, 1536},
    {"1.3B cross k/v (512 text)", 512, 1536, 1536},
    {"1.3B text embed", 512, 4096, 1536},
    {"1.3B time proj (1 row)", 1, 1536, 9216},
    {"wan-shapes q/k/v/o", 64, 128, 128},
    {"wan-shapes ffn up", 64, 128, 512},
    {"wan-shapes ffn down", 64, 512, 128},
};

template <typename F>
double median_seconds(int repeats, F run) {
  run();
  std::vector<double> times;
  for (int i = 0; i < repeats; ++i) {
    const auto start = std::chrono::steady_clock::now();
    run();
    times.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int repeats = 7;
  size_t shapes = std::size(kShapes);
  bool eigen_too = true;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--no-eigen") == 0) eigen_too = false;
    if (i + 1 == argc) continue;
    if (std::strcmp(argv[i], "--repeats") == 0) repeats = std::max(1, std::atoi(argv[i + 1]));
    if (std::strcmp(argv[i], "--shapes") == 0)
      shapes = std::clamp<size_t>(size_t(std::max(1, std::atoi(argv[i + 1]))), 1, shapes);
  }
  std::printf("threads %d, median of %d\n", omp_get_max_threads(), repeats);
  std::printf("%-30s %10s %10s %10s %10s %8s %8s %8s\n", "shape (m x k -> n)", "eigen s",
              "mmgen f32", "bf16 w", "bf16 prod", "GFLOP/s", "bf16 GF", "eig/mm");
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (size_t index = 0; index < shapes; ++index) {
    const Shape3& s = kShapes[index];
    std::vector<float> a(size_t(s.m * s.k)), w(size_t(s.n * s.k)), c(size_t(s.m * s.n)),
        bias(size_t(s.n));
    std::vector<uint16_t> w16(w.size());
    for (float& v : a) v = uniform(rng);
    for (size_t i = 0; i < w.size(); ++i) {
      w16[i] = mmgen::f32_to_bf16(uniform(rng));
      w[i] = mmgen::bf16_to_f32(w16[i]);
    }
    const double eigen =
        eigen_too ? median_seconds(
                        repeats,
                        [&] { mmgen::ops::gemm_bt(a.data(), w.data(), c.data(), s.m, s.k, s.n); })
                  : 0.0;
    const double ours = median_seconds(repeats, [&] {
      mmgen::cpu::linear_product(a.data(), s.k, w.data(), mmgen::DType::F32, bias.data(), c.data(),
                                 s.m, s.k, s.n);
    });
    const double ours16 = median_seconds(repeats, [&] {
      mmgen::cpu::linear_product(a.data(), s.k, w16.data(), mmgen::DType::BF16, bias.data(),
                                 c.data(), s.m, s.k, s.n);
    });
    double bf16_products = 0.0;
    if (mmgen::cpu::bf16_products_available()) {
      mmgen::cpu::set_product_precision(mmgen::cpu::ProductPrecision::BF16);
      bf16_products = median_seconds(repeats, [&] {
        mmgen::cpu::linear_product(a.data(), s.k, w16.data(), mmgen::DType::BF16, bias.data(),
                                   c.data(), s.m, s.k, s.n);
      });
      mmgen::cpu::set_product_precision(mmgen::cpu::ProductPrecision::F32);
    }
    const double flop = 2.0 * double(s.m * s.k * s.n);
    std::printf("%-30s %10.6f %10.6f %10.6f %10.6f %8.1f %8.1f %8.2f\n", s.what, eigen, ours,
                ours16, bf16_products, flop / ours / 1e9,
                bf16_products > 0 ? flop / bf16_products / 1e9 : 0.0, eigen / ours);
  }
  return 0;
}
