#include "pipeline/schedulers/flow_match_euler.h"

#include "core/error.h"
#include "pipeline/schedulers/config_reader.h"
#include "pipeline/schedulers/exact_fp.h"
#include "pipeline/schedulers/finite_step.h"

namespace mmgen::schedulers {
namespace {

constexpr const char* kFlowMatchClass = "FlowMatchEulerDiscreteScheduler";

// prev = sample + dt · v: the product rounded, then the sum (two torch ops).
MMGEN_EXACT_FP void euler_kernel(float* out, const float* sample, const float* output, float dt,
                                 int64_t n) {
#pragma omp parallel for schedule(static) if (n >= (1 << 16))
  for (int64_t e = 0; e < n; ++e) {
    const float delta = dt * output[e];
    out[e] = sample[e] + delta;
  }
}

}  // namespace

FlowMatchEulerConfig FlowMatchEulerConfig::from_json(const nlohmann::json& json) {
  ConfigReader read(json, kFlowMatchClass);
  FlowMatchEulerConfig c;
  c.num_train_timesteps = read.integer("num_train_timesteps", 1000);
  if (c.num_train_timesteps < 1)
    read.unsupported(
        fmt::format("num_train_timesteps must be positive (got {})", c.num_train_timesteps));
  c.shift = read.number("shift", 1.0);
  // As --flow-shift: σ·s / (1 + (s − 1)·σ) is 0/0 at σ = 1 for s = 0.
  if (!(c.shift > 0))
    read.unsupported(fmt::format("shift must be a positive number (got {})", c.shift));
  c.use_dynamic_shifting = read.boolean("use_dynamic_shifting", false);
  c.base_shift = read.number("base_shift", 0.5);
  c.max_shift = read.number("max_shift", 1.15);
  c.base_image_seq_len = read.integer("base_image_seq_len", 256);
  c.max_image_seq_len = read.integer("max_image_seq_len", 4096);
  c.invert_sigmas = read.boolean("invert_sigmas", false);
  c.shift_terminal = read.optional_number("shift_terminal");
  if (c.shift_terminal && *c.shift_terminal == 0.0)
    c.shift_terminal.reset();  // `if shift_terminal:`
  c.time_shift_type =
      parse_time_shift_type(read.string("time_shift_type", "exponential"), kFlowMatchClass);
  for (const char* key : {"use_karras_sigmas", "use_exponential_sigmas", "use_beta_sigmas"})
    if (read.boolean(key, false))
      read.unsupported(fmt::format("{} is not supported; set it to false", key));
  if (read.boolean("stochastic_sampling", false))
    read.unsupported("stochastic_sampling is not supported; set it to false");
  return c;
}

MMGEN_EXACT_FP FlowMatchEulerDiscreteScheduler::FlowMatchEulerDiscreteScheduler(
    FlowMatchEulerConfig config)
    : config_(std::move(config)) {
  // The training schedule in float32 torch arithmetic: t = linspace(1, T, T) reversed, σ = t / T,
  // statically shifted unless dynamic. Only its two ends are used later.
  const int T = config_.num_train_timesteps;
  std::vector<float> ends = {float(T) / float(T), 1.0f / float(T)};
  if (!config_.use_dynamic_shifting) apply_static_shift(ends, config_.shift);
  sigma_max_ = ends[0];
  sigma_min_ = ends[1];
}

MMGEN_EXACT_FP void FlowMatchEulerDiscreteScheduler::set_timesteps(int num_inference_steps,
                                                                   const ScheduleOptions& options) {
  check(num_inference_steps >= 1, "{}: the number of steps must be at least 1 (got {})",
        kFlowMatchClass, num_inference_steps);
  check(!config_.use_dynamic_shifting || options.mu.has_value(),
        "{}: the config sets use_dynamic_shifting, so a mu value is required", kFlowMatchClass);
  const double T = double(config_.num_train_timesteps);

  std::vector<float> sigmas;
  if (options.sigmas) {
    check(int(options.sigmas->size()) == num_inference_steps,
          "{}: {} explicit sigmas given for {} steps; they must match", kFlowMatchClass,
          options.sigmas->size(), num_inference_steps);
    // np.array(sigmas).astype(np.float32), then numpy float32 arithmetic.
    for (double s : *options.sigmas) sigmas.push_back(float(s));
    if (config_.use_dynamic_shifting) {
      apply_dynamic_shift(sigmas, *options.mu, config_.time_shift_type);
    } else {
      apply_static_shift(sigmas, config_.shift);
    }
    if (config_.shift_terminal) stretch_to_terminal(sigmas, *config_.shift_terminal);
  } else {
    // float64: linspace(σ_max·T, σ_min·T, N) / T, shifted (again, when static).
    std::vector<double> s = numpy_linspace(sigma_max_ * T, sigma_min_ * T, num_inference_steps);
    for (double& v : s) v = v / T;
    if (config_.use_dynamic_shifting) {
      apply_dynamic_shift(s, *options.mu, config_.time_shift_type);
    } else {
      apply_static_shift(s, config_.shift);
    }
    if (config_.shift_terminal) stretch_to_terminal(s, *config_.shift_terminal);
    for (double v : s) sigmas.push_back(float(v));
  }

  const float T_f = float(config_.num_train_timesteps);
  timesteps_.clear();
  if (config_.invert_sigmas) {
    for (float& s : sigmas) s = 1.0f - s;
  }
  for (float s : sigmas) timesteps_.push_back(s * T_f);
  sigmas_ = sigmas;
  sigmas_.push_back(config_.invert_sigmas ? 1.0f : 0.0f);
}

Tensor FlowMatchEulerDiscreteScheduler::step(const Tensor& model_output_in, int step_index,
                                             const Tensor& sample_in) {
  const int n = num_inference_steps();
  check(n > 0, "{}: call set_timesteps before step", kFlowMatchClass);
  check(step_index >= 0 && step_index < n, "{}: step {} is outside the {} scheduled steps",
        kFlowMatchClass, step_index, n);
  check(model_output_in.shape() == sample_in.shape(),
        "{}: model output {} and sample {} must have the same shape", kFlowMatchClass,
        shape_string(model_output_in.shape()), shape_string(sample_in.shape()));
  const Tensor model_output = model_output_in.to(DType::F32).contiguous();
  const Tensor sample = sample_in.to(DType::F32).contiguous();
  check_step_finite(model_output, sample, step_index, n);
  const float dt = sigmas_[size_t(step_index) + 1] - sigmas_[size_t(step_index)];
  // diffusers casts the result to the model output's dtype; the pipelines here keep float32.
  Tensor out = Tensor::empty(sample.shape());
  euler_kernel(out.data<float>(), sample.data<float>(), model_output.data<float>(), dt,
               sample.numel());
  return out;
}

double FlowMatchEulerDiscreteScheduler::mu_for_image_seq_len(int64_t image_seq_len) const {
  return calculate_shift(image_seq_len, config_.base_image_seq_len, config_.max_image_seq_len,
                         config_.base_shift, config_.max_shift);
}

MMGEN_EXACT_FP double calculate_shift(int64_t image_seq_len, double base_seq_len,
                                      double max_seq_len, double base_shift, double max_shift) {
  const double m = (max_shift - base_shift) / (max_seq_len - base_seq_len);
  const double offset = m * base_seq_len;
  const double b = base_shift - offset;
  const double scaled = double(image_seq_len) * m;
  return scaled + b;
}

}  // namespace mmgen::schedulers
