// UniPCMultistepScheduler (diffusers schedulers/scheduling_unipc_multistep.py), the flow-matching
// form Wan uses: flow sigmas (static flow_shift, or dynamic with mu, optional shift_terminal),
// integer-truncated timesteps, data (x0) prediction, B(h) variants bh1 / bh2, any solver order
// with lower_order_final warm-down, the UniC corrector (disable_corrector honoured), final sigma
// zero or sigma_min.
//
// Supported configs: use_flow_sigmas true with predict_x0 true; prediction_type flow_prediction
// (also epsilon, v_prediction, sample, converted with α = 1 − σ); no thresholding, no
// karras/exponential/beta sigmas, no solver_p. Anything else is an Error saying so.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "pipeline/schedulers/scheduler.h"
#include "pipeline/schedulers/sigma_math.h"

namespace mmgen::schedulers {

struct UniPCConfig {
  enum class Prediction { Flow, Epsilon, VPrediction, Sample };
  enum class SolverType { BH1, BH2 };

  int num_train_timesteps = 1000;
  int solver_order = 2;
  Prediction prediction = Prediction::Epsilon;
  SolverType solver_type = SolverType::BH2;
  bool lower_order_final = true;
  std::vector<int> disable_corrector;
  double flow_shift = 1.0;
  bool final_sigma_zero = true;  // final_sigmas_type "zero" (else "sigma_min")
  bool use_dynamic_shifting = false;
  TimeShiftType time_shift_type = TimeShiftType::Exponential;
  std::optional<double> shift_terminal;

  // Reads a scheduler_config.json (class defaults for omitted keys) and rejects what this
  // implementation does not support.
  static UniPCConfig from_json(const nlohmann::json& config);
};

class UniPCMultistepScheduler final : public Scheduler {
 public:
  explicit UniPCMultistepScheduler(UniPCConfig config);

  std::string class_name() const override { return "UniPCMultistepScheduler"; }
  void set_timesteps(int num_inference_steps, const ScheduleOptions& options = {}) override;
  void begin() override;
  Tensor step(const Tensor& model_output, int step_index, const Tensor& sample) override;
  bool uses_dynamic_shifting() const override { return config_.use_dynamic_shifting; }
  const UniPCConfig& config() const { return config_; }

 private:
  struct Coefficients;
  Tensor to_data_prediction(const Tensor& model_output, const Tensor& sample) const;
  Tensor predict(const Tensor& sample, int order) const;
  Tensor correct(const Tensor& data_prediction, const Tensor& last_sample, int order) const;
  Coefficients coefficients(int s0_index, int t_index, int order) const;

  UniPCConfig config_;
  // Run state, as diffusers keeps it.
  int step_index_ = 0;
  int lower_order_nums_ = 0;
  int this_order_ = 0;
  std::vector<Tensor> model_outputs_;  // data predictions, oldest first (solver_order slots)
  Tensor last_sample_;
};

}  // namespace mmgen::schedulers
