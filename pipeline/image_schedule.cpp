#include "pipeline/image_schedule.h"

#include "core/error.h"
#include "pipeline/schedulers/flow_match_euler.h"

namespace mmgen {

std::vector<double> numpy_linspace_sigmas(int steps) {
  check(steps >= 1, "--num-inference-steps {} must be at least 1", steps);
  std::vector<double> sigmas(static_cast<size_t>(steps));
  const double end = 1.0 / double(steps);
  if (steps == 1) return {1.0};
  // numpy's linspace: start + i · step, the last one exactly `end`.
  const double step = (end - 1.0) / double(steps - 1);
  for (int i = 0; i < steps; ++i) sigmas[size_t(i)] = 1.0 + double(i) * step;
  sigmas.back() = end;
  return sigmas;
}

double image_mu(const nlohmann::json& config, int64_t latent_height, int64_t latent_width) {
  const auto number = [&](const char* key, double fallback) {
    return config.contains(key) && config[key].is_number() ? config[key].get<double>() : fallback;
  };
  const int64_t image_seq_len = (latent_height / 2) * (latent_width / 2);
  return schedulers::calculate_shift(image_seq_len, number("base_image_seq_len", 256),
                                     number("max_image_seq_len", 4096), number("base_shift", 0.5),
                                     number("max_shift", 1.15));
}

std::unique_ptr<schedulers::Scheduler> make_image_scheduler(
    const std::string& class_name, const nlohmann::json& config, std::optional<double> flow_shift,
    std::vector<double> sigmas, int64_t latent_height, int64_t latent_width) {
  auto scheduler = schedulers::make_scheduler(class_name, config, flow_shift);
  const int steps = int(sigmas.size());
  schedulers::ScheduleOptions options;
  options.sigmas = std::move(sigmas);
  options.mu = image_mu(config, latent_height, latent_width);
  scheduler->set_timesteps(steps, options);
  return scheduler;
}

}  // namespace mmgen
