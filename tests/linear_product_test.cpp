// The CPU linear product against a double-precision reference, and the property the prompt-file and
// prefix-cache tests lean on: a row's values do not depend on the rows beside it, its place in the
// batch or the thread count.
#include <gtest/gtest.h>
#include <omp.h>

#include <array>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/gemm_cpu.h"
#include "core/ops.h"

namespace mmgen {
namespace {

struct Problem {
  int64_t m, k, n;
  std::vector<float> a, w, bias;
};

Problem random_problem(int64_t m, int64_t k, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  Problem p{m,
            k,
            n,
            std::vector<float>(size_t(m * k)),
            std::vector<float>(size_t(n * k)),
            std::vector<float>(size_t(n))};
  for (float& v : p.a) v = uniform(rng);
  for (float& v : p.w) v = uniform(rng);
  for (float& v : p.bias) v = uniform(rng);
  return p;
}

std::vector<float> product(const Problem& p, const float* bias = nullptr) {
  std::vector<float> c(size_t(p.m * p.n), -7.0f);
  cpu::linear_product(p.a.data(), p.k, p.w.data(), DType::F32, bias, c.data(), p.m, p.k, p.n);
  return c;
}

// Sizes around every edge: rows around the 8-row tile and the 112-row job, outputs around the
// 48-wide panel and the 16-wide vector, depths around the 16-step transpose and the 256-step block.
TEST(LinearProduct, MatchesADoublePrecisionProductAtEdgeSizes) {
  for (const auto [m, k, n] : {std::array<int64_t, 3>{1, 1, 1},
                               {7, 15, 17},
                               {8, 16, 47},
                               {9, 17, 48},
                               {13, 255, 49},
                               {14, 256, 95},
                               {15, 257, 97},
                               {29, 513, 70},
                               {113, 40, 300},
                               {230, 33, 241}}) {
    const Problem p = random_problem(m, k, n, uint32_t(m * 131 + k * 7 + n));
    const std::vector<float> c = product(p, p.bias.data());
    for (int64_t r = 0; r < m; ++r)
      for (int64_t j = 0; j < n; ++j) {
        double want = 0, magnitude = 0;
        for (int64_t i = 0; i < k; ++i) {
          want += double(p.a[size_t(r * k + i)]) * p.w[size_t(j * k + i)];
          magnitude += std::abs(double(p.a[size_t(r * k + i)]) * p.w[size_t(j * k + i)]);
        }
        want += p.bias[size_t(j)];
        ASSERT_NEAR(c[size_t(r * n + j)], want, 1e-6 * (magnitude + 1) + 1e-6)
            << "m " << m << " k " << k << " n " << n << " at " << r << "," << j;
      }
  }
}

// Each output is one chain of fused multiply-adds over k in order, then the bias: what the AVX-512
// kernel (8 rows x 48 outputs), the AVX2 one (4 rows x two halves of 24) and the plain C++ one all
// compute, so a build's values do not depend on which of them it has. Sizes around each kernel's
// rows, half panel, panel and depth block.
TEST(LinearProduct, EveryOutputIsOneFusedChainOverKThenTheBias) {
  for (const auto [m, k, n] : {std::array<int64_t, 3>{3, 7, 23},
                               {4, 255, 24},
                               {5, 256, 25},
                               {8, 257, 47},
                               {9, 513, 49},
                               {117, 40, 72}}) {
    const Problem p = random_problem(m, k, n, uint32_t(m * 17 + k * 3 + n));
    const std::vector<float> c = product(p, p.bias.data());
    for (int64_t r = 0; r < m; ++r)
      for (int64_t j = 0; j < n; ++j) {
        float chain = 0.0f;
        for (int64_t i = 0; i < k; ++i)
          chain = std::fma(p.a[size_t(r * k + i)], p.w[size_t(j * k + i)], chain);
        ASSERT_EQ(c[size_t(r * n + j)], chain + p.bias[size_t(j)])
            << "m " << m << " k " << k << " n " << n << " at " << r << "," << j;
      }
  }
}

// Rows of `batch` alone give their bits in the batch, and one thread gives the batch's bits.
void expect_rows_independent(const Problem& batch) {
  const std::vector<float> together = product(batch);
  for (const int64_t row : {int64_t(0), int64_t(13), int64_t(14), int64_t(151), batch.m - 1}) {
    Problem alone{
        1,
        batch.k,
        batch.n,
        std::vector<float>(batch.a.begin() + row * batch.k, batch.a.begin() + (row + 1) * batch.k),
        batch.w,
        batch.bias};
    const std::vector<float> single = product(alone);
    EXPECT_EQ(0, std::memcmp(single.data(), together.data() + row * batch.n,
                             size_t(batch.n) * sizeof(float)))
        << "row " << row;
  }
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const std::vector<float> one_thread = product(batch);
  omp_set_num_threads(threads);
  EXPECT_EQ(0, std::memcmp(one_thread.data(), together.data(), together.size() * sizeof(float)));
}

TEST(LinearProduct, ARowIsBitIdenticalAloneInABatchAndOnAnyThreadCount) {
  expect_rows_independent(random_problem(300, 300, 100, 5));
}

TEST(LinearProduct, ReadsBf16AndF16WeightsAsTheirFloat32Values) {
  Problem p = random_problem(20, 70, 40, 9);
  std::vector<uint16_t> bf16(p.w.size()), f16(p.w.size());
  for (size_t i = 0; i < p.w.size(); ++i) {
    bf16[i] = f32_to_bf16(p.w[i]);
    f16[i] = f32_to_f16(p.w[i]);
  }
  for (const auto& [dtype, bits] : {std::pair{DType::BF16, &bf16}, std::pair{DType::F16, &f16}}) {
    Problem widened = p;
    for (size_t i = 0; i < p.w.size(); ++i)
      widened.w[i] = dtype == DType::BF16 ? bf16_to_f32((*bits)[i]) : f16_to_f32((*bits)[i]);
    const std::vector<float> want = product(widened, p.bias.data());
    std::vector<float> got(want.size());
    cpu::linear_product(p.a.data(), p.k, bits->data(), dtype, p.bias.data(), got.data(), p.m, p.k,
                        p.n);
    EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)))
        << dtype_name(dtype);
  }
}

// A weight packed once gives the bits of the per-call packing, at edge sizes and for a bf16 weight,
// and repeated products with it give the same bits again.
TEST(LinearProduct, APackedWeightGivesThePerCallProductsBits) {
  for (const auto [m, k, n] :
       {std::array<int64_t, 3>{1, 1, 1}, {9, 17, 48}, {15, 257, 97}, {230, 33, 241}}) {
    const Problem p = random_problem(m, k, n, uint32_t(m + k + n));
    const std::vector<float> want = product(p, p.bias.data());
    const cpu::PackedWeight packed(p.w.data(), DType::F32, n, k);
    for (int repeat = 0; repeat < 2; ++repeat) {
      std::vector<float> got(want.size(), -7.0f);
      cpu::linear_product(p.a.data(), k, packed, p.bias.data(), got.data(), m);
      EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)))
          << "m " << m << " k " << k << " n " << n;
    }
  }
  const Problem p = random_problem(20, 70, 40, 9);
  std::vector<uint16_t> bf16(p.w.size());
  for (size_t i = 0; i < p.w.size(); ++i) bf16[i] = f32_to_bf16(p.w[i]);
  std::vector<float> want(size_t(p.m * p.n)), got(want.size());
  cpu::linear_product(p.a.data(), p.k, bf16.data(), DType::BF16, nullptr, want.data(), p.m, p.k,
                      p.n);
  cpu::linear_product(p.a.data(), p.k, cpu::PackedWeight(bf16.data(), DType::BF16, p.n, p.k),
                      nullptr, got.data(), p.m);
  EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)));
}

TEST(LinearProduct, LinearOpTakesBf16WeightsAsStored) {
  const Problem p = random_problem(9, 48, 33, 3);
  Tensor x = Tensor::empty({p.m, p.k}), w32 = Tensor::empty({p.n, p.k});
  std::memcpy(x.data<float>(), p.a.data(), p.a.size() * sizeof(float));
  std::memcpy(w32.data<float>(), p.w.data(), p.w.size() * sizeof(float));
  const Tensor w16 = w32.to(DType::BF16);
  const Tensor via_f32 = ops::linear(x, w16.to(DType::F32));
  const Tensor via_bf16 = ops::linear(x, w16);
  EXPECT_EQ(0, std::memcmp(via_f32.data<float>(), via_bf16.data<float>(),
                           size_t(p.m * p.n) * sizeof(float)));
}

// Refused before any thread starts: an exception thrown inside the parallel region would abort.
TEST(LinearProduct, RefusesAnUnsupportedWeightTypeWithAnError) {
  const Problem p = random_problem(64, 64, 64, 2);
  std::vector<int32_t> ints(p.w.size(), 1);
  std::vector<float> c(size_t(p.m * p.n));
  EXPECT_THROW(cpu::linear_product(p.a.data(), p.k, ints.data(), DType::I32, nullptr, c.data(), p.m,
                                   p.k, p.n),
               Error);
}

}  // namespace
// The bf16 products: the input and the weight rounded to bfloat16 (nearest even), their exact
// products summed in float32 chains. Checked against a double-precision sum of the rounded values,
// at the edge sizes, from float32, bfloat16 and float16 weights.
struct Bf16Products {
  Bf16Products() { cpu::set_product_precision(cpu::ProductPrecision::BF16); }
  ~Bf16Products() { cpu::set_product_precision(cpu::ProductPrecision::F32); }
};

float rounded(float v) {
  return bf16_to_f32(f32_to_bf16(v));
}

TEST(LinearProductBf16, SumsTheBf16RoundedValuesInFloat32) {
  if (!cpu::bf16_products_available()) {
    EXPECT_THROW(cpu::set_product_precision(cpu::ProductPrecision::BF16), Error);
    EXPECT_EQ(cpu::product_precision(), cpu::ProductPrecision::F32);
    GTEST_SKIP() << "this build has no AVX-512 BF16 products (the refusal was checked)";
  }
  const Bf16Products bf16;
  double worst_unrounded = 0;
  for (const auto [m, k, n] : {std::array<int64_t, 3>{1, 1, 1},
                               {7, 15, 17},
                               {9, 17, 48},
                               {13, 31, 49},
                               {14, 33, 95},
                               {15, 511, 97},
                               {29, 513, 70},
                               {113, 40, 300}}) {
    const Problem p = random_problem(m, k, n, uint32_t(m * 17 + k * 5 + n));
    std::vector<uint16_t> w16(p.w.size()), h16(p.w.size());
    for (size_t i = 0; i < p.w.size(); ++i) {
      w16[i] = f32_to_bf16(p.w[i]);
      h16[i] = f32_to_f16(p.w[i]);
    }
    for (const DType dtype : {DType::F32, DType::BF16, DType::F16}) {
      const void* w = dtype == DType::F32    ? static_cast<const void*>(p.w.data())
                      : dtype == DType::BF16 ? static_cast<const void*>(w16.data())
                                             : static_cast<const void*>(h16.data());
      std::vector<float> c(size_t(m * n), -7.0f);
      cpu::linear_product(p.a.data(), k, w, dtype, p.bias.data(), c.data(), m, k, n);
      for (int64_t r = 0; r < m; ++r)
        for (int64_t j = 0; j < n; ++j) {
          double want = 0, exact = 0, magnitude = 0;
          for (int64_t i = 0; i < k; ++i) {
            const float a = p.a[size_t(r * k + i)], wv = p.w[size_t(j * k + i)];
            const float as_stored = dtype == DType::F16 ? f16_to_f32(h16[size_t(j * k + i)]) : wv;
            want += double(rounded(a)) * rounded(as_stored);
            exact += double(a) * wv;
            magnitude += std::abs(double(a) * wv);
          }
          want += p.bias[size_t(j)];
          exact += p.bias[size_t(j)];
          const float got = c[size_t(r * n + j)];
          ASSERT_NEAR(got, want, 1e-6 * (magnitude + 1) + 1e-6)
              << dtype_name(dtype) << " m " << m << " k " << k << " n " << n << " at " << r << ","
              << j;
          worst_unrounded = std::max(worst_unrounded, std::abs(got - exact) / (magnitude + 1));
        }
    }
  }
  // The rounding happened: against the unrounded product the error is bfloat16's, not float32's.
  EXPECT_GT(worst_unrounded, 1e-4);
}

TEST(LinearProductBf16, ARowIsBitIdenticalAloneInABatchAndOnAnyThreadCount) {
  if (!cpu::bf16_products_available()) GTEST_SKIP() << "this build has no AVX-512 BF16 products";
  const Bf16Products bf16;
  expect_rows_independent(random_problem(300, 301, 100, 6));
}

}  // namespace mmgen
