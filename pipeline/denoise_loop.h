// The one denoise loop every pipeline runs. A pipeline supplies only its prediction: the
// transformer call(s) for the step and its guidance (CFG, true CFG, Z-Image's truncation and
// normalisation), returned in the shape the scheduler steps. The loop owns what is the same for
// every model: the scheduler's order of steps, the stop check at each step boundary (core/
// interrupt.h), the progress line, the latents kept for tests, and the places later features
// hook into (a first step other than 0 for image-to-image, a callback after each step).
#pragma once

#include <functional>
#include <vector>

#include "core/tensor.h"
#include "pipeline/schedulers/scheduler.h"

namespace mmgen {

// The step being predicted.
struct DenoiseStep {
  int index;       // 0-based position in the schedule
  int steps;       // the schedule's length
  float timestep;  // scheduler.timesteps()[index], as the scheduler gives it
};

// A pipeline's (guided) prediction for `latents` at `step`, in `latents`' shape.
using PredictStep = std::function<Tensor(const DenoiseStep& step, const Tensor& latents)>;

struct DenoiseOptions {
  // Steps before this one are skipped (image-to-image starts part way down the schedule).
  int first_step = 0;
  // When set, receives the latents after each step (tests compare them with diffusers').
  std::vector<Tensor>* latents_after_step = nullptr;
  // Called after each step with the new latents (previews, step callbacks).
  std::function<void(const DenoiseStep& step, const Tensor& latents)> after_step;
};

// Runs the schedule from `options.first_step` to its end and returns the final latents. The
// scheduler's schedule must be set (set_timesteps, which also starts its run).
Tensor run_denoise_loop(schedulers::Scheduler& scheduler, Tensor latents,
                        const PredictStep& predict, const DenoiseOptions& options = {});

}  // namespace mmgen
