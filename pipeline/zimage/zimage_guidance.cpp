#include "pipeline/zimage/zimage_guidance.h"

namespace mmgen {

double ZImageGuidance::scale_at(float t_norm) const {
  // diffusers checks truncation only when it is <= 1, and compares the float32 time as a double.
  if (enabled() && truncation <= 1.0 && double(t_norm) > truncation) return 0.0;
  return scale;
}

}  // namespace mmgen
