// The norms' row statistics (core/row_stats.h) against serial long-double sums.
#include "core/row_stats.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace mmgen {
namespace {

TEST(RowStats, MatchSerialLongDoubleSumsAtEveryLengthAroundTheLanes) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.5f, 3.0f);
  for (const int64_t n : {0, 1, 15, 16, 17, 33, 1536, 5121}) {
    std::vector<float> x(static_cast<size_t>(n));
    for (float& v : x) v = normal(rng);
    long double sum = 0, squares = 0, about = 0;
    for (const float v : x) sum += v, squares += (long double)v * v;
    const double centre = n ? double(sum / n) : 0.0;
    for (const float v : x) about += ((long double)v - centre) * ((long double)v - centre);
    const auto near = [](double got, long double want) {
      return std::abs(got - double(want)) <= 1e-12 * (std::abs(double(want)) + 1);
    };
    EXPECT_TRUE(near(row_sum(x.data(), n), sum)) << n;
    EXPECT_TRUE(near(row_squares(x.data(), n), squares)) << n;
    EXPECT_TRUE(near(row_squares_about(x.data(), n, centre), about)) << n;
  }
}

}  // namespace
}  // namespace mmgen
