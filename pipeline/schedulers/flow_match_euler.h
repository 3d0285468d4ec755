// FlowMatchEulerDiscreteScheduler (diffusers schedulers/scheduling_flow_match_euler_discrete.py):
// x ← x + (σ_{i+1} − σ_i) · v. Static shift (applied at construction and again in set_timesteps,
// as diffusers does), dynamic shifting with mu (exponential or linear), shift_terminal,
// invert_sigmas, and explicit sigmas (FLUX / Qwen-Image / Z-Image style).
//
// Not supported (an Error): karras / exponential / beta sigmas, stochastic_sampling.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>

#include "pipeline/schedulers/scheduler.h"
#include "pipeline/schedulers/sigma_math.h"

namespace mmgen::schedulers {

struct FlowMatchEulerConfig {
  int num_train_timesteps = 1000;
  double shift = 1.0;
  bool use_dynamic_shifting = false;
  double base_shift = 0.5;
  double max_shift = 1.15;
  int base_image_seq_len = 256;
  int max_image_seq_len = 4096;
  bool invert_sigmas = false;
  std::optional<double> shift_terminal;
  TimeShiftType time_shift_type = TimeShiftType::Exponential;

  static FlowMatchEulerConfig from_json(const nlohmann::json& config);
};

class FlowMatchEulerDiscreteScheduler final : public Scheduler {
 public:
  explicit FlowMatchEulerDiscreteScheduler(FlowMatchEulerConfig config);

  std::string class_name() const override { return "FlowMatchEulerDiscreteScheduler"; }
  void set_timesteps(int num_inference_steps, const ScheduleOptions& options = {}) override;
  void begin() override {}
  Tensor step(const Tensor& model_output, int step_index, const Tensor& sample) override;
  bool uses_dynamic_shifting() const override { return config_.use_dynamic_shifting; }
  const FlowMatchEulerConfig& config() const { return config_; }

  // The mu FLUX-family pipelines pass for a latent of `image_seq_len` tokens (diffusers'
  // calculate_shift): linear from base_shift at base_image_seq_len to max_shift at
  // max_image_seq_len.
  double mu_for_image_seq_len(int64_t image_seq_len) const;

 private:
  FlowMatchEulerConfig config_;
  double sigma_min_ = 0.0;  // the training schedule's ends (after the static shift)
  double sigma_max_ = 1.0;
};

// diffusers' calculate_shift(image_seq_len, base_seq_len, max_seq_len, base_shift, max_shift).
double calculate_shift(int64_t image_seq_len, double base_seq_len, double max_seq_len,
                       double base_shift, double max_shift);

}  // namespace mmgen::schedulers
