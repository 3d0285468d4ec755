#include "pipeline/schedulers/finite_step.h"

#include <cmath>

#include "core/error.h"

namespace mmgen::schedulers {

namespace {

bool all_finite(const Tensor& values) {
  const float* p = values.data<float>();
  bool finite = true;
  // A sum of comparisons (no early exit) vectorizes; NaN and infinity both fail isfinite.
  for (int64_t i = 0; i < values.numel(); ++i) finite &= std::isfinite(p[i]);
  return finite;
}

}  // namespace

void check_step_finite(const Tensor& model_output, const Tensor& sample, int step_index,
                       int steps) {
  if (!all_finite(sample))
    fail("denoising step {} of {}: the latents hold NaN or infinity {}", step_index + 1, steps,
         step_index == 0 ? "before the first step (check --latents, if given)"
                         : "(the previous step's result)");
  check(all_finite(model_output),
        "denoising step {} of {}: the transformer's prediction holds NaN or infinity; its "
        "weights may hold NaN, or the model overflowed in this precision",
        step_index + 1, steps);
}

}  // namespace mmgen::schedulers
