#include "pipeline/schedulers/small_solve.h"

#include <cmath>
#include <utility>

#include "core/error.h"
#include "pipeline/schedulers/exact_fp.h"

namespace mmgen::schedulers {

MMGEN_EXACT_FP std::vector<float> solve_small_system(std::vector<float> a, std::vector<float> b) {
  const size_t n = b.size();
  check(a.size() == n * n, "solve_small_system: matrix and right-hand side sizes differ");
  auto at = [&](size_t row, size_t col) -> float& { return a[row * n + col]; };
  // LU factorisation as LAPACK's getrf: pick the largest pivot, scale the column below it by the
  // pivot's reciprocal, update the trailing block; the row swaps are applied to b as getrs does.
  for (size_t col = 0; col < n; ++col) {
    size_t pivot = col;
    for (size_t row = col + 1; row < n; ++row)
      if (std::fabs(at(row, col)) > std::fabs(at(pivot, col))) pivot = row;
    if (at(pivot, col) == 0.0f) fail("UniPC: singular coefficient matrix (sigmas repeat?)");
    if (pivot != col) {
      for (size_t j = 0; j < n; ++j) std::swap(at(col, j), at(pivot, j));
      std::swap(b[col], b[pivot]);
    }
    const float reciprocal = 1.0f / at(col, col);
    for (size_t row = col + 1; row < n; ++row) at(row, col) = at(row, col) * reciprocal;
    for (size_t row = col + 1; row < n; ++row)
      for (size_t j = col + 1; j < n; ++j) {
        const float product = at(row, col) * at(col, j);
        at(row, j) = at(row, j) - product;
      }
  }
  // Forward substitution with unit L, then back substitution with U, multiplying by the
  // diagonal's reciprocal: that is what torch's LAPACK (MKL) gives bit for bit on UniPC's systems.
  for (size_t row = 1; row < n; ++row)
    for (size_t j = 0; j < row; ++j) {
      const float product = b[j] * at(row, j);
      b[row] = b[row] - product;
    }
  for (size_t row = n; row-- > 0;) {
    const float reciprocal = 1.0f / at(row, row);
    b[row] = b[row] * reciprocal;
    for (size_t i = 0; i < row; ++i) {
      const float product = b[row] * at(i, row);
      b[i] = b[i] - product;
    }
  }
  return b;
}

}  // namespace mmgen::schedulers
