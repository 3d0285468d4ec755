// A row's statistics for the norms, in double: Σx, Σx², Σ(x − c)². Each is 16 interleaved partial
// sums (lane j takes elements j, j + 16, ...), added together at the end in a fixed order. The
// compiler keeps the lanes in vector registers without any licence to reorder (no -ffast-math),
// so a sum costs a sixteenth of a serial double chain (a 1536-wide row: about 400 cycles against
// 6000) and its value is the same on every instruction set and thread count.
#pragma once

#include <cstdint>

namespace mmgen {

namespace row_stats_detail {

constexpr int kLanes = 16;

template <typename Term>
double lane_sum(const float* x, int64_t n, Term term) {
  double lanes[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) lanes[j] += term(double(x[i + j]));
  double tail = 0;
  for (; i < n; ++i) tail += term(double(x[i]));
  for (int width = kLanes / 2; width > 0; width /= 2)
    for (int j = 0; j < width; ++j) lanes[j] += lanes[j + width];
  return lanes[0] + tail;
}

}  // namespace row_stats_detail

inline double row_sum(const float* x, int64_t n) {
  return row_stats_detail::lane_sum(x, n, [](double v) { return v; });
}

inline double row_squares(const float* x, int64_t n) {
  return row_stats_detail::lane_sum(x, n, [](double v) { return v * v; });
}

inline double row_squares_about(const float* x, int64_t n, double centre) {
  return row_stats_detail::lane_sum(x, n,
                                    [centre](double v) { return (v - centre) * (v - centre); });
}

}  // namespace mmgen
