// Diffusion schedulers: the noise schedule (timesteps and sigmas) and the update that turns a
// model output into the next sample. Each class reproduces its diffusers namesake number for number
// (float32 results, the schedule computed in the precision diffusers uses), configured from the
// component's scheduler_config.json.
//
// Use: make_scheduler(class, config) → set_timesteps(N) → for i in 0..N-1: run the model at
// timesteps()[i], then sample = step(model_output, i, sample). set_timesteps() and begin() start a
// new run (multistep solvers keep a history of earlier steps).
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace mmgen::schedulers {

struct ScheduleOptions {
  // The resolution-dependent shift; required when the config sets use_dynamic_shifting.
  std::optional<double> mu = std::nullopt;
  // Explicit sigmas, one per step (FLUX / Qwen-Image / Z-Image pass linspace(1, 1/N, N)); they are
  // rounded to float32 and shifted as diffusers does. FlowMatchEulerDiscreteScheduler only.
  std::optional<std::vector<double>> sigmas = std::nullopt;
};

class Scheduler {
 public:
  virtual ~Scheduler() = default;

  // The diffusers class this reproduces ("UniPCMultistepScheduler", ...).
  virtual std::string class_name() const = 0;

  // Computes the schedule for `num_inference_steps` steps and starts a new run.
  virtual void set_timesteps(int num_inference_steps, const ScheduleOptions& options = {}) = 0;

  // Starts a new run with the current schedule, forgetting any history.
  virtual void begin() = 0;

  // One denoising step: `model_output` is the (guided) model prediction at timesteps()[step_index]
  // for `sample`; returns the sample for the next step, float32, same shape. Inputs may be any
  // float dtype; they are not modified. Steps must be taken in order 0, 1, ... (multistep solvers
  // check).
  virtual Tensor step(const Tensor& model_output, int step_index, const Tensor& sample) = 0;

  // True when set_timesteps needs ScheduleOptions::mu.
  virtual bool uses_dynamic_shifting() const = 0;

  int num_inference_steps() const { return int(timesteps_.size()); }
  // The timestep the transformer sees at each step (UniPC's are whole numbers, as diffusers'
  // int64 timesteps).
  const std::vector<float>& timesteps() const { return timesteps_; }
  // num_inference_steps() + 1 values; the last is the final sigma (0 unless configured otherwise).
  const std::vector<float>& sigmas() const { return sigmas_; }

 protected:
  std::vector<float> timesteps_;
  std::vector<float> sigmas_;
};

// Builds the scheduler `class_name` (UniPCMultistepScheduler, FlowMatchEulerDiscreteScheduler)
// configured by a scheduler_config.json. The class is the one model_index.json names, as diffusers
// loads it; the config's own `_class_name` is not consulted, so a config saved for another
// scheduler gives its shared settings (other keys are ignored). Omitted keys take the class
// defaults. `flow_shift_override` (the CLI's --flow-shift) replaces `flow_shift` (UniPC) or
// `shift` (FlowMatchEuler). Unknown classes and settings this engine does not implement are
// Errors that say what is supported.
std::unique_ptr<Scheduler> make_scheduler(const std::string& class_name,
                                          const nlohmann::json& config,
                                          std::optional<double> flow_shift_override = std::nullopt);
// The same, keyed on the config's `_class_name` (a scheduler_config.json on its own).
std::unique_ptr<Scheduler> make_scheduler(const nlohmann::json& config,
                                          std::optional<double> flow_shift_override = std::nullopt);

// The class names make_scheduler accepts.
std::vector<std::string> supported_scheduler_classes();

// The scheduler_config.json key that holds the flow shift for `class_name` (UniPC and DPM++ call
// it flow_shift, FlowMatchEuler shift); flow_shift for a class mmgen does not build.
std::string flow_shift_key(const std::string& class_name);

}  // namespace mmgen::schedulers
