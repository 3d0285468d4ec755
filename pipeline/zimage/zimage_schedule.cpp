#include "pipeline/zimage/zimage_schedule.h"

#include "core/error.h"
#include "pipeline/schedulers/exact_fp.h"

namespace mmgen {

MMGEN_EXACT_FP std::vector<double> zimage_default_sigmas(int steps) {
  check(steps >= 1, "--num-inference-steps {} must be at least 1", steps);
  const float start = 1.0f;
  // 1 / steps is a Python float, rounded to float32 when torch takes it as the end.
  const float end = float(1.0 / double(steps));
  std::vector<double> sigmas(static_cast<size_t>(steps));
  if (steps == 1) {
    sigmas[0] = start;
    return sigmas;
  }
  const float step = (end - start) / float(steps - 1);
  const int halfway = steps / 2;
  for (int i = 0; i < steps; ++i) {
    // The product on its own statement: rounded before the sum, as torch does.
    const float offset = i < halfway ? step * float(i) : step * float(steps - i - 1);
    sigmas[size_t(i)] = i < halfway ? start + offset : end - offset;
  }
  return sigmas;
}

}  // namespace mmgen
