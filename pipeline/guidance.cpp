#include "pipeline/guidance.h"

#include <cmath>

#include "core/error.h"
#include "pipeline/schedulers/exact_fp.h"

namespace mmgen {
namespace {

// ‖c_row‖ / ‖guided_row‖ for each row: torch.norm of each in float32, then their quotient.
void rescale_rows_to_conditional_norm(const float* c, float* o, int64_t rows, int64_t width) {
  for (int64_t r = 0; r < rows; ++r) {
    double conditional_squares = 0, guided_squares = 0;
    for (int64_t i = r * width; i < (r + 1) * width; ++i) {
      conditional_squares += double(c[i]) * c[i];
      guided_squares += double(o[i]) * o[i];
    }
    const float ratio = float(std::sqrt(conditional_squares)) / float(std::sqrt(guided_squares));
    for (int64_t i = r * width; i < (r + 1) * width; ++i) o[i] *= ratio;
  }
}

void cap_at_conditional_norm(const float* c, float* o, int64_t count, double cap) {
  double conditional_squares = 0, guided_squares = 0;
  for (int64_t i = 0; i < count; ++i) {
    conditional_squares += double(c[i]) * double(c[i]);
    guided_squares += double(o[i]) * double(o[i]);
  }
  const float limit = float(std::sqrt(conditional_squares)) * float(cap);
  const float guided = float(std::sqrt(guided_squares));
  if (guided <= limit) return;
  const float factor = limit / guided;
  for (int64_t i = 0; i < count; ++i) o[i] *= factor;
}

}  // namespace

MMGEN_EXACT_FP Tensor guided_prediction(const Tensor& conditional, const Tensor& unconditional,
                                        const GuidancePolicy& policy) {
  check(conditional.shape() == unconditional.shape(),
        "guidance: the conditional prediction {} and the unconditional one {} differ in shape",
        shape_string(conditional.shape()), shape_string(unconditional.shape()));
  const Tensor cond = conditional.to(DType::F32).contiguous();
  const Tensor uncond = unconditional.to(DType::F32).contiguous();
  Tensor out = Tensor::empty(cond.shape());
  const float* c = cond.data<float>();
  const float* u = uncond.data<float>();
  float* o = out.data<float>();
  const int64_t count = out.numel();
  // The scale as the Python float diffusers multiplies by: float32 against a float32 tensor.
  const float s = float(policy.scale);
  if (policy.form == GuidancePolicy::Form::FromUnconditional) {
    for (int64_t i = 0; i < count; ++i) o[i] = u[i] + s * (c[i] - u[i]);
  } else {
    for (int64_t i = 0; i < count; ++i) o[i] = c[i] + s * (c[i] - u[i]);
  }
  switch (policy.rescale) {
    case GuidancePolicy::Rescale::None:
      break;
    case GuidancePolicy::Rescale::RowsToConditionalNorm: {
      const int64_t width = cond.dim() > 0 ? cond.size(cond.dim() - 1) : 1;
      if (width > 0) rescale_rows_to_conditional_norm(c, o, count / width, width);
      break;
    }
    case GuidancePolicy::Rescale::CapAtConditionalNorm:
      if (policy.cap > 0) cap_at_conditional_norm(c, o, count, policy.cap);
      break;
  }
  return out;
}

}  // namespace mmgen
