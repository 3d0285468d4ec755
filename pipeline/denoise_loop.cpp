#include "pipeline/denoise_loop.h"

#include "core/error.h"
#include "core/interrupt.h"
#include "pipeline/progress.h"

namespace mmgen {

Tensor run_denoise_loop(schedulers::Scheduler& scheduler, Tensor latents,
                        const PredictStep& predict, const DenoiseOptions& options) {
  const int steps = scheduler.num_inference_steps();
  check(options.first_step >= 0 && options.first_step < steps,
        "denoise: the first step {} is outside the schedule of {} steps", options.first_step,
        steps);
  Progress denoise("denoise", steps, "step");
  for (int i = options.first_step; i < steps; ++i) {
    stop_if_requested();  // Ctrl-C / SIGTERM: the step boundary is where a run stops
    const DenoiseStep step{i, steps, scheduler.timesteps()[size_t(i)]};
    const Tensor prediction = predict(step, latents);
    latents = scheduler.step(prediction, i, latents);
    if (options.latents_after_step) options.latents_after_step->push_back(latents);
    if (options.after_step) options.after_step(step, latents);
    denoise.update(i + 1);
  }
  denoise.finish();
  return latents;
}

}  // namespace mmgen
