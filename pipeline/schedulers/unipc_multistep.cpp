#include "pipeline/schedulers/unipc_multistep.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "pipeline/schedulers/config_reader.h"
#include "pipeline/schedulers/exact_fp.h"
#include "pipeline/schedulers/finite_step.h"
#include "pipeline/schedulers/small_solve.h"

namespace mmgen::schedulers {
namespace {

constexpr const char* kUniPcClass = "UniPCMultistepScheduler";

Tensor as_f32_contiguous(const Tensor& t) {
  return t.to(DType::F32).contiguous();
}

// x0 from the model output, elementwise in float32 as torch evaluates the expressions.
MMGEN_EXACT_FP void data_prediction_kernel(float* out, const float* sample, const float* output,
                                           UniPCConfig::Prediction prediction, float sigma,
                                           int64_t n) {
  const float alpha = 1.0f - sigma;  // flow sigmas: α = 1 − σ, σ_t = σ
#pragma omp parallel for schedule(static) if (n >= (1 << 16))
  for (int64_t e = 0; e < n; ++e) {
    switch (prediction) {
      case UniPCConfig::Prediction::Flow: {
        const float scaled = sigma * output[e];
        out[e] = sample[e] - scaled;
        break;
      }
      case UniPCConfig::Prediction::Epsilon: {
        const float scaled = sigma * output[e];
        out[e] = (sample[e] - scaled) / alpha;
        break;
      }
      case UniPCConfig::Prediction::VPrediction: {
        const float a = alpha * sample[e];
        const float b = sigma * output[e];
        out[e] = a - b;
        break;
      }
      case UniPCConfig::Prediction::Sample:
        out[e] = output[e];
        break;
    }
  }
}

// The shared form of predictor and corrector:
//   out = (c_x·x − c_m0·m0) − c_res·(Σ_k ρ_k·(m_k − m0)/r_k  [+ ρ_t·(m_t − m0)])
// each product and sum rounded to float32 in torch's order. Without history terms and without
// m_t, diffusers subtracts c_res·0: zero, except for bh1's step to a final sigma of 0, where c_res
// is infinite and diffusers returns NaN everywhere. We return the limit, x0, there instead (the
// only place where our numbers differ from diffusers').
struct UpdateTerms {
  const float* x;
  const float* m0;
  std::vector<const float*> history;  // m_k, k = 1..K
  std::vector<float> rks;             // r_k
  std::vector<float> rhos;            // ρ_k
  const float* m_t = nullptr;         // corrector only
  float rho_t = 0.0f;
  float c_x, c_m0, c_res;
};

MMGEN_EXACT_FP void update_kernel(float* out, const UpdateTerms& u, int64_t n) {
  const size_t history = u.history.size();
  const bool corrector = u.m_t != nullptr;
#pragma omp parallel for schedule(static) if (n >= (1 << 16))
  for (int64_t e = 0; e < n; ++e) {
    const float scaled_x = u.c_x * u.x[e];
    const float scaled_m0 = u.c_m0 * u.m0[e];
    const float base = scaled_x - scaled_m0;
    if (history == 0 && !corrector) {
      out[e] = base;
      continue;
    }
    float residual = 0.0f;
    for (size_t k = 0; k < history; ++k) {
      const float d = (u.history[k][e] - u.m0[e]) / u.rks[k];
      const float term = u.rhos[k] * d;
      residual = k == 0 ? term : residual + term;
    }
    if (corrector) {
      const float term = u.rho_t * (u.m_t[e] - u.m0[e]);
      residual = residual + term;
    }
    const float correction = u.c_res * residual;
    out[e] = base - correction;
  }
}

// torch.pow(r, k) for the small whole exponents the solver uses.
float power(float r, int k) {
  if (k == 0) return 1.0f;
  if (k == 1) return r;
  if (k == 2) return r * r;
  if (k == 3) return r * r * r;
  return std::pow(r, float(k));
}

}  // namespace

UniPCConfig UniPCConfig::from_json(const nlohmann::json& json) {
  ConfigReader read(json, kUniPcClass);
  UniPCConfig c;
  c.num_train_timesteps = read.integer("num_train_timesteps", 1000);
  c.solver_order = read.integer("solver_order", 2);
  if (c.solver_order < 1 || c.solver_order > 4)
    read.unsupported(fmt::format("solver_order {} is not supported (use 1 to 4)", c.solver_order));

  const std::string prediction = read.string("prediction_type", "epsilon");
  if (prediction == "flow_prediction")
    c.prediction = Prediction::Flow;
  else if (prediction == "epsilon")
    c.prediction = Prediction::Epsilon;
  else if (prediction == "v_prediction")
    c.prediction = Prediction::VPrediction;
  else if (prediction == "sample")
    c.prediction = Prediction::Sample;
  else
    read.unsupported(
        fmt::format("prediction_type '{}' is unknown (use flow_prediction, epsilon, "
                    "v_prediction or sample)",
                    prediction));

  if (!read.boolean("use_flow_sigmas", false))
    read.unsupported(
        "only flow-matching schedules are implemented: set use_flow_sigmas true (as Wan's "
        "config does); the VP (beta) noise schedule is not supported");
  if (!read.boolean("predict_x0", true))
    read.unsupported("predict_x0 false is not supported (only the data-prediction form)");
  if (read.boolean("thresholding", false))
    read.unsupported("thresholding is not supported (it applies to pixel-space models)");
  for (const char* key : {"use_karras_sigmas", "use_exponential_sigmas", "use_beta_sigmas"})
    if (read.boolean(key, false))
      read.unsupported(fmt::format("{} is not supported with flow sigmas; set it to false", key));
  if (read.is_set("solver_p"))
    read.unsupported("solver_p (an external predictor) is not supported");

  const std::string solver_type = read.string("solver_type", "bh2");
  if (solver_type == "bh1")
    c.solver_type = SolverType::BH1;
  else if (solver_type == "bh2" || solver_type == "midpoint" || solver_type == "heun" ||
           solver_type == "logrho")
    c.solver_type = SolverType::BH2;  // diffusers maps the DPM-Solver names to bh2
  else
    read.unsupported(fmt::format("solver_type '{}' is unknown (use bh1 or bh2)", solver_type));

  c.lower_order_final = read.boolean("lower_order_final", true);
  c.disable_corrector = read.integers("disable_corrector");
  c.flow_shift = read.number("flow_shift", 1.0);
  // As --flow-shift: σ·s / (1 + (s − 1)·σ) is 0/0 at σ = 1 for s = 0, a NaN timestep that does
  // not convert to an integer; s < 0 moves the sigmas out of [0, 1].
  if (!(c.flow_shift > 0))
    read.unsupported(fmt::format("flow_shift must be a positive number (got {})", c.flow_shift));
  const std::string final_sigmas = read.string("final_sigmas_type", "zero");
  if (final_sigmas != "zero" && final_sigmas != "sigma_min")
    read.unsupported(
        fmt::format("final_sigmas_type '{}' is unknown (use zero or sigma_min)", final_sigmas));
  c.final_sigma_zero = final_sigmas == "zero";
  if (!c.lower_order_final && c.final_sigma_zero && c.solver_order > 1)
    read.unsupported(
        "lower_order_final false with final_sigmas_type 'zero' makes the last step infinite (in "
        "diffusers too); set lower_order_final true or final_sigmas_type 'sigma_min'");
  c.use_dynamic_shifting = read.boolean("use_dynamic_shifting", false);
  c.time_shift_type =
      parse_time_shift_type(read.string("time_shift_type", "exponential"), kUniPcClass);
  // diffusers tests `if shift_terminal:`, so 0 means off.
  c.shift_terminal = read.optional_number("shift_terminal");
  if (c.shift_terminal && *c.shift_terminal == 0.0) c.shift_terminal.reset();
  // The last sigma is stretched to it, so it must be a sigma itself: in (0, 1).
  if (c.shift_terminal && !(*c.shift_terminal > 0 && *c.shift_terminal < 1))
    read.unsupported(
        fmt::format("shift_terminal must be between 0 and 1 (got {})", *c.shift_terminal));
  if (c.num_train_timesteps < 1)
    read.unsupported(
        fmt::format("num_train_timesteps must be positive (got {})", c.num_train_timesteps));
  return c;
}

UniPCMultistepScheduler::UniPCMultistepScheduler(UniPCConfig config) : config_(std::move(config)) {}

MMGEN_EXACT_FP void UniPCMultistepScheduler::set_timesteps(int num_inference_steps,
                                                           const ScheduleOptions& options) {
  check(num_inference_steps >= 1, "{}: the number of steps must be at least 1 (got {})",
        kUniPcClass, num_inference_steps);
  check(!options.sigmas, "{}: explicit sigmas are not supported; pass only the number of steps",
        kUniPcClass);
  check(!config_.use_dynamic_shifting || options.mu.has_value(),
        "{}: the config sets use_dynamic_shifting, so a mu value is required", kUniPcClass);

  // float64 as numpy: linspace(1, 1/T, N + 1)[:-1], shift, optional terminal stretch.
  std::vector<double> sigmas =
      numpy_linspace(1.0, 1.0 / config_.num_train_timesteps, num_inference_steps + 1);
  sigmas.pop_back();
  if (config_.use_dynamic_shifting) {
    apply_dynamic_shift(sigmas, *options.mu, config_.time_shift_type);
  } else {
    apply_static_shift(sigmas, config_.flow_shift);
  }
  if (config_.shift_terminal) stretch_to_terminal(sigmas, *config_.shift_terminal);
  // Keeps log(α) finite in the first update.
  constexpr double kEps = 1e-6;
  if (std::fabs(sigmas[0] - 1.0) < kEps) sigmas[0] -= kEps;

  timesteps_.clear();
  sigmas_.clear();
  for (double s : sigmas) {
    // (σ · T).astype(int64): truncation toward zero.
    const double t = s * double(config_.num_train_timesteps);
    timesteps_.push_back(float(int64_t(t)));
    sigmas_.push_back(float(s));
  }
  sigmas_.push_back(config_.final_sigma_zero ? 0.0f : float(sigmas.back()));
  begin();
}

void UniPCMultistepScheduler::begin() {
  step_index_ = 0;
  lower_order_nums_ = 0;
  this_order_ = 0;
  model_outputs_.assign(size_t(config_.solver_order), Tensor());
  last_sample_ = Tensor();
}

Tensor UniPCMultistepScheduler::to_data_prediction(const Tensor& model_output,
                                                   const Tensor& sample) const {
  Tensor out = Tensor::empty(sample.shape());
  data_prediction_kernel(out.data<float>(), sample.data<float>(), model_output.data<float>(),
                         config_.prediction, sigmas_[size_t(step_index_)], sample.numel());
  return out;
}

// The scalar part of a UniP / UniC update from σ[s0_index] to σ[t_index], in float32 as diffusers
// computes it with 0-dim tensors. History k = 1..order−1 sits at sigma index s0_index − k (its data
// prediction is model_outputs_[newest − k] for both the predictor, which runs after the newest
// prediction is pushed, and the corrector, which runs before).
struct UniPCMultistepScheduler::Coefficients {
  float c_x, c_m0, c_res;
  std::vector<float> rks;  // order − 1 history ratios
  std::vector<float> b;    // order right-hand sides
  std::vector<float> R;    // order × order, row-major: R[k][j] = rks_j^k (rks with a final 1)
};

MMGEN_EXACT_FP UniPCMultistepScheduler::Coefficients UniPCMultistepScheduler::coefficients(
    int s0_index, int t_index, int order) const {
  auto lambda_of = [&](int index) {
    const float sigma = sigmas_[size_t(index)];
    const float alpha = 1.0f - sigma;
    const float log_alpha = std::log(alpha);
    const float log_sigma = std::log(sigma);
    return log_alpha - log_sigma;
  };
  const float sigma_t = sigmas_[size_t(t_index)];
  const float sigma_s0 = sigmas_[size_t(s0_index)];
  const float alpha_t = 1.0f - sigma_t;
  const float lambda_t = lambda_of(t_index);
  const float lambda_s0 = lambda_of(s0_index);
  const float h = lambda_t - lambda_s0;

  Coefficients c;
  for (int k = 1; k < order; ++k) {
    const float lambda_sk = lambda_of(s0_index - k);
    c.rks.push_back((lambda_sk - lambda_s0) / h);
  }
  std::vector<float> rks_with_one = c.rks;
  rks_with_one.push_back(1.0f);

  const float hh = -h;  // predict_x0
  const float h_phi_1 = std::expm1(hh);
  float h_phi_k = h_phi_1 / hh - 1.0f;
  int64_t factorial = 1;
  const float b_h = config_.solver_type == UniPCConfig::SolverType::BH1 ? hh : std::expm1(hh);
  c.R.resize(size_t(order * order));
  for (int k = 1; k <= order; ++k) {
    for (int j = 0; j < order; ++j)
      c.R[size_t((k - 1) * order + j)] = power(rks_with_one[size_t(j)], k - 1);
    const float scaled = h_phi_k * float(factorial);
    c.b.push_back(scaled / b_h);
    factorial *= k + 1;
    // torch: h_phi_k / hh − (1 / factorial) with the Python float rounded to float32.
    const float quotient = h_phi_k / hh;
    h_phi_k = quotient - float(1.0 / double(factorial));
  }
  c.c_x = sigma_t / sigma_s0;
  c.c_m0 = alpha_t * h_phi_1;
  c.c_res = alpha_t * b_h;
  return c;
}

Tensor UniPCMultistepScheduler::predict(const Tensor& sample, int order) const {
  const int i = step_index_;
  Coefficients c = coefficients(i, i + 1, order);
  UpdateTerms u;
  u.x = sample.data<float>();
  const size_t newest = model_outputs_.size() - 1;
  u.m0 = model_outputs_[newest].data<float>();
  for (int k = 1; k < order; ++k)
    u.history.push_back(model_outputs_[newest - size_t(k)].data<float>());
  u.rks = c.rks;
  if (order == 2) {
    u.rhos = {0.5f};  // diffusers' simplified second order
  } else if (order > 2) {
    const int m = order - 1;
    std::vector<float> r(size_t(m * m));
    for (int row = 0; row < m; ++row)
      for (int col = 0; col < m; ++col) r[size_t(row * m + col)] = c.R[size_t(row * order + col)];
    u.rhos = solve_small_system(r, std::vector<float>(c.b.begin(), c.b.begin() + m));
  }
  u.c_x = c.c_x;
  u.c_m0 = c.c_m0;
  u.c_res = c.c_res;
  Tensor out = Tensor::empty(sample.shape());
  update_kernel(out.data<float>(), u, sample.numel());
  return out;
}

Tensor UniPCMultistepScheduler::correct(const Tensor& data_prediction, const Tensor& last_sample,
                                        int order) const {
  const int i = step_index_;
  Coefficients c = coefficients(i - 1, i, order);
  UpdateTerms u;
  u.x = last_sample.data<float>();
  const size_t newest = model_outputs_.size() - 1;  // the previous step's data prediction
  u.m0 = model_outputs_[newest].data<float>();
  for (int k = 1; k < order; ++k)
    u.history.push_back(model_outputs_[newest - size_t(k)].data<float>());
  u.rks = c.rks;
  std::vector<float> rhos = order == 1 ? std::vector<float>{0.5f} : solve_small_system(c.R, c.b);
  u.rho_t = rhos.back();
  rhos.pop_back();
  u.rhos = rhos;
  u.m_t = data_prediction.data<float>();
  u.c_x = c.c_x;
  u.c_m0 = c.c_m0;
  u.c_res = c.c_res;
  Tensor out = Tensor::empty(last_sample.shape());
  update_kernel(out.data<float>(), u, last_sample.numel());
  return out;
}

Tensor UniPCMultistepScheduler::step(const Tensor& model_output_in, int step_index,
                                     const Tensor& sample_in) {
  const int n = num_inference_steps();
  check(n > 0, "{}: call set_timesteps before step", kUniPcClass);
  check(step_index == step_index_,
        "{}: steps must be taken in order: expected step {}, got {} (call begin() to restart)",
        kUniPcClass, step_index_, step_index);
  check(step_index_ < n, "{}: all {} steps are done; call begin() to start a new run", kUniPcClass,
        n);
  check(model_output_in.shape() == sample_in.shape(),
        "{}: model output {} and sample {} must have the same shape", kUniPcClass,
        shape_string(model_output_in.shape()), shape_string(sample_in.shape()));
  const Tensor model_output = as_f32_contiguous(model_output_in);
  Tensor sample = as_f32_contiguous(sample_in);
  check_step_finite(model_output, sample, step_index, n);

  const Tensor data_prediction = to_data_prediction(model_output, sample);
  const bool disabled =
      std::find(config_.disable_corrector.begin(), config_.disable_corrector.end(),
                step_index_ - 1) != config_.disable_corrector.end();
  if (step_index_ > 0 && !disabled && last_sample_.defined()) {
    sample = correct(data_prediction, last_sample_, this_order_);
  } else if (sample.raw() == sample_in.raw()) {
    sample = sample.clone();  // kept as history: the caller may reuse its tensor
  }

  std::rotate(model_outputs_.begin(), model_outputs_.begin() + 1, model_outputs_.end());
  model_outputs_.back() = data_prediction;

  int order = config_.lower_order_final ? std::min(config_.solver_order, n - step_index_)
                                        : config_.solver_order;
  this_order_ = std::min(order, lower_order_nums_ + 1);  // warm-up
  last_sample_ = sample;
  Tensor next = predict(sample, this_order_);
  if (lower_order_nums_ < config_.solver_order) ++lower_order_nums_;
  ++step_index_;
  return next;
}

}  // namespace mmgen::schedulers
