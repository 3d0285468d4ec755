// Seconds and GFLOP/s of the CPU's linear-layer product at the shapes of a Wan2.1-1.3B forward and
// of the wan-shapes example, for mmgen's product (cpu::linear_product) and Eigen's, with float32
// and bfloat16 weights, and mmgen's bf16 products (where the CPU has AVX-512 BF16; 0 otherwise).
// torch's figure for the same shapes comes from bench/linear_torch.py.
//
//   linear_bench [--repeats N] [--shapes N] [--rows M] [--no-eigen] [--check]   (threads from
//   OMP_NUM_THREADS)
//
// --check first compares the bf16 products (AMX tiles or AVX-512 BF16, whichever this CPU runs)
// with a double-precision sum of the bf16-rounded values at edge sizes and exits 1 on a mismatch:
// tests/linear_product_test.cpp's check, for machines without GoogleTest.
//
// --shapes N times the first N shapes only; --rows M gives every shape of more than one row M rows
// (3120: the 1.3B's guided batch of two); --no-eigen skips Eigen's product (printed as 0).
#include <omp.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
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

// The largest error of the bf16 products against double sums of the rounded values, relative to
// the sum of magnitudes (+1), over edge sizes; and whether a row alone equals it in the batch.
bool check_bf16_products() {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  const auto rounded = [](float v) { return mmgen::bf16_to_f32(mmgen::f32_to_bf16(v)); };
  double worst = 0;
  bool rows_alone = true;
  mmgen::cpu::set_product_precision(mmgen::cpu::ProductPrecision::BF16);
  for (const auto [m, k, n] : {std::array<int64_t, 3>{1, 1, 1},
                               {7, 15, 17},
                               {17, 33, 49},
                               {31, 511, 97},
                               {33, 513, 70},
                               {129, 40, 300},
                               {300, 1536, 200}}) {
    std::vector<float> a(static_cast<size_t>(m * k)), w(static_cast<size_t>(n * k)),
        bias(static_cast<size_t>(n)), c(static_cast<size_t>(m * n));
    for (float& v : a) v = uniform(rng);
    for (float& v : w) v = uniform(rng);
    for (float& v : bias) v = uniform(rng);
    mmgen::cpu::linear_product(a.data(), k, w.data(), mmgen::DType::F32, bias.data(), c.data(), m,
                               k, n);
    for (int64_t r = 0; r < m; ++r)
      for (int64_t j = 0; j < n; ++j) {
        double want = bias[size_t(j)], magnitude = 0;
        for (int64_t i = 0; i < k; ++i) {
          want += double(rounded(a[size_t(r * k + i)])) * rounded(w[size_t(j * k + i)]);
          magnitude += std::abs(double(a[size_t(r * k + i)]) * w[size_t(j * k + i)]);
        }
        worst = std::max(worst, std::abs(c[size_t(r * n + j)] - want) / (magnitude + 1));
      }
    std::vector<float> alone(static_cast<size_t>(n));
    const int64_t row = m / 2;
    mmgen::cpu::linear_product(a.data() + row * k, k, w.data(), mmgen::DType::F32, bias.data(),
                               alone.data(), 1, k, n);
    rows_alone = rows_alone && std::memcmp(alone.data(), c.data() + row * n, size_t(n) * 4) == 0;
  }
  mmgen::cpu::set_product_precision(mmgen::cpu::ProductPrecision::F32);
  const bool ok = worst <= 1e-6 && rows_alone;
  std::printf("bf16 products check: worst relative error %.3g (bound 1e-6), row alone %s: %s\n",
              worst, rows_alone ? "identical" : "DIFFERENT", ok ? "ok" : "FAILED");
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  int repeats = 7;
  size_t shapes = std::size(kShapes);
  bool eigen_too = true, check = false;
  int64_t rows = 0;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--no-eigen") == 0) eigen_too = false;
    if (std::strcmp(argv[i], "--check") == 0) check = true;
    if (i + 1 == argc) continue;
    if (std::strcmp(argv[i], "--rows") == 0) rows = std::max(0, std::atoi(argv[i + 1]));
    if (std::strcmp(argv[i], "--repeats") == 0) repeats = std::max(1, std::atoi(argv[i + 1]));
    if (std::strcmp(argv[i], "--shapes") == 0)
      shapes = std::clamp<size_t>(size_t(std::max(1, std::atoi(argv[i + 1]))), 1, shapes);
  }
  if (check && mmgen::cpu::bf16_products_available() && !check_bf16_products()) return 1;
  std::printf("threads %d, median of %d\n", omp_get_max_threads(), repeats);
  std::printf("%-30s %10s %10s %10s %10s %8s %8s %8s\n", "shape (m x k -> n)", "eigen s",
              "mmgen f32", "bf16 w", "bf16 prod", "GFLOP/s", "bf16 GF", "eig/mm");
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (size_t index = 0; index < shapes; ++index) {
    Shape3 s = kShapes[index];
    if (rows > 0 && s.m > 1) s.m = rows;
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
