#include "pipeline/zimage/zimage_guidance.h"

#include <cmath>

#include "core/error.h"
#include "pipeline/schedulers/exact_fp.h"

namespace mmgen {

double ZImageGuidance::scale_at(float t_norm) const {
  // diffusers checks truncation only when it is <= 1, and compares the float32 time as a double.
  if (enabled() && truncation <= 1.0 && double(t_norm) > truncation) return 0.0;
  return scale;
}

MMGEN_EXACT_FP Tensor zimage_guided_prediction(const Tensor& pos_in, const Tensor& neg_in,
                                               double scale, double normalization) {
  check(pos_in.shape() == neg_in.shape(), "guidance: predictions {} and {} differ in shape",
        shape_string(pos_in.shape()), shape_string(neg_in.shape()));
  const Tensor pos = pos_in.to(DType::F32).contiguous();
  const Tensor neg = neg_in.to(DType::F32).contiguous();
  Tensor out = Tensor::empty(pos.shape());
  const float* p = pos.data<float>();
  const float* n = neg.data<float>();
  float* o = out.data<float>();
  // torch: (pos - neg) rounded, times the Python float (as float32), plus pos.
  const float g = float(scale);
  for (int64_t i = 0; i < out.numel(); ++i) {
    const float difference = p[i] - n[i];
    const float push = g * difference;
    o[i] = p[i] + push;
  }
  if (normalization > 0.0) {
    double pos_norm = 0, new_norm = 0;
    for (int64_t i = 0; i < out.numel(); ++i) {
      pos_norm += double(p[i]) * double(p[i]);
      new_norm += double(o[i]) * double(o[i]);
    }
    const float original = float(std::sqrt(pos_norm)), guided = float(std::sqrt(new_norm));
    const float cap = original * float(normalization);
    if (guided > cap) {
      const float factor = cap / guided;
      for (int64_t i = 0; i < out.numel(); ++i) o[i] *= factor;
    }
  }
  return out;
}

}  // namespace mmgen
