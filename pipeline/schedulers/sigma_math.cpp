#include "pipeline/schedulers/sigma_math.h"

#include <cmath>

#include "core/error.h"
#include "pipeline/schedulers/exact_fp.h"

namespace mmgen::schedulers {

MMGEN_EXACT_FP std::vector<double> numpy_linspace(double start, double stop, int num) {
  if (num <= 0) return {};
  if (num == 1) return {start};
  std::vector<double> out(static_cast<size_t>(num));
  const double divisions = double(num - 1);
  const double delta = stop - start;
  const double step = delta / divisions;
  for (int i = 0; i < num; ++i) {
    // numpy: y = arange(num) * step (arange / div * delta when the step is 0); y += start.
    const double y = step != 0.0 ? double(i) * step : double(i) / divisions * delta;
    out[size_t(i)] = y + start;
  }
  out.back() = stop;
  return out;
}

MMGEN_EXACT_FP void apply_static_shift(std::vector<double>& sigmas, double shift) {
  const double shift_minus_one = shift - 1.0;
  for (double& s : sigmas) {
    const double numerator = shift * s;
    const double scaled = shift_minus_one * s;
    const double denominator = 1.0 + scaled;
    s = numerator / denominator;
  }
}

MMGEN_EXACT_FP void apply_static_shift(std::vector<float>& sigmas, double shift) {
  // numpy casts the Python floats to float32 and computes in float32.
  const float shift_f = float(shift);
  const float shift_minus_one = float(shift - 1.0);
  for (float& s : sigmas) {
    const float numerator = shift_f * s;
    const float scaled = shift_minus_one * s;
    const float denominator = 1.0f + scaled;
    s = numerator / denominator;
  }
}

TimeShiftType parse_time_shift_type(const std::string& name, const std::string& class_name) {
  if (name == "exponential") return TimeShiftType::Exponential;
  if (name == "linear") return TimeShiftType::Linear;
  fail(
      "{} in scheduler_config.json: time_shift_type '{}' is not supported (use 'exponential' or "
      "'linear')",
      class_name, name);
}

MMGEN_EXACT_FP void apply_dynamic_shift(std::vector<double>& sigmas, double mu,
                                        TimeShiftType type) {
  const double a = type == TimeShiftType::Exponential ? std::exp(mu) : mu;
  for (double& s : sigmas) {
    const double odds = 1.0 / s - 1.0;
    s = a / (a + odds);
  }
}

MMGEN_EXACT_FP void apply_dynamic_shift(std::vector<float>& sigmas, double mu, TimeShiftType type) {
  const float a = float(type == TimeShiftType::Exponential ? std::exp(mu) : mu);
  for (float& s : sigmas) {
    const float odds = 1.0f / s - 1.0f;
    s = a / (a + odds);
  }
}

namespace {

// The stretch divides by 1 - the last sigma, which is 0 when the schedule is the single sigma 1
// (one step): diffusers then runs on NaN and writes a black picture.
void check_stretchable(double last, double terminal) {
  check(last < 1.0,
        "the scheduler's shift_terminal {} cannot stretch a one-step schedule (it divides by 1 - "
        "sigma = 0; diffusers runs on NaN); use --num-inference-steps 2 or more",
        terminal);
}

}  // namespace

MMGEN_EXACT_FP void stretch_to_terminal(std::vector<double>& sigmas, double terminal) {
  if (sigmas.empty()) return;
  check_stretchable(sigmas.back(), terminal);
  const double scale = (1.0 - sigmas.back()) / (1.0 - terminal);
  for (double& s : sigmas) s = 1.0 - (1.0 - s) / scale;
}

MMGEN_EXACT_FP void stretch_to_terminal(std::vector<float>& sigmas, double terminal) {
  if (sigmas.empty()) return;
  check_stretchable(double(sigmas.back()), terminal);
  const float scale = (1.0f - sigmas.back()) / float(1.0 - terminal);
  for (float& s : sigmas) s = 1.0f - (1.0f - s) / scale;
}

}  // namespace mmgen::schedulers
