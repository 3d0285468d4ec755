#include "pipeline/zimage_schedule.h"

#include "core/error.h"
#include "pipeline/schedulers/exact_fp.h"
#include "pipeline/schedulers/flow_match_euler.h"

namespace mmgen {

MMGEN_EXACT_FP std::vector<double> zimage_default_sigmas(int steps) {
  check(steps >= 1, "--num-inference-steps {} must be at least 1", steps);
  const float start = 1.0f;
  // 1 / steps is a Python float, rounded to float32 when torch takes it as the end.
  const float end = float(1.0 / double(steps));
  std::vector<double> sigmas(static_cast<size_t>(steps));
  if (steps == 1) {
    sigmas[0] = start;
    return sigmas;
  }
  const float step = (end - start) / float(steps - 1);
  const int halfway = steps / 2;
  for (int i = 0; i < steps; ++i) {
    // The product on its own statement: rounded before the sum, as torch does.
    const float offset = i < halfway ? step * float(i) : step * float(steps - i - 1);
    sigmas[size_t(i)] = i < halfway ? start + offset : end - offset;
  }
  return sigmas;
}

double zimage_mu(const nlohmann::json& config, int64_t latent_height, int64_t latent_width) {
  const auto number = [&](const char* key, double fallback) {
    return config.contains(key) && config[key].is_number() ? config[key].get<double>() : fallback;
  };
  const int64_t image_seq_len = (latent_height / 2) * (latent_width / 2);
  return schedulers::calculate_shift(image_seq_len, number("base_image_seq_len", 256),
                                     number("max_image_seq_len", 4096), number("base_shift", 0.5),
                                     number("max_shift", 1.15));
}

std::unique_ptr<schedulers::Scheduler> make_zimage_scheduler(const std::string& class_name,
                                                             const nlohmann::json& config,
                                                             std::optional<double> flow_shift,
                                                             int steps, int64_t latent_height,
                                                             int64_t latent_width) {
  auto scheduler = schedulers::make_scheduler(class_name, config, flow_shift);
  schedulers::ScheduleOptions options;
  options.sigmas = zimage_default_sigmas(steps);
  options.mu = zimage_mu(config, latent_height, latent_width);
  scheduler->set_timesteps(steps, options);
  return scheduler;
}

}  // namespace mmgen
