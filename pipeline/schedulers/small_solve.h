// A tiny dense linear solve in float32 for UniPC's order-sized systems (diffusers calls
// torch.linalg.solve, i.e. LAPACK getrf/getrs with partial pivoting, in float32).
#pragma once

#include <vector>

namespace mmgen::schedulers {

// Solves A·x = b for square row-major A (n × n, n = b.size()) by LU with partial pivoting.
std::vector<float> solve_small_system(std::vector<float> a, std::vector<float> b);

}  // namespace mmgen::schedulers
