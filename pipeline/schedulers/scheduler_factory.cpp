#include <fmt/format.h>

#include <cmath>

#include "core/error.h"
#include "pipeline/schedulers/flow_match_euler.h"
#include "pipeline/schedulers/scheduler.h"
#include "pipeline/schedulers/unipc_multistep.h"

namespace mmgen::schedulers {

std::vector<std::string> supported_scheduler_classes() {
  return {"FlowMatchEulerDiscreteScheduler", "UniPCMultistepScheduler"};
}

std::unique_ptr<Scheduler> make_scheduler(const nlohmann::json& config,
                                          std::optional<double> flow_shift_override) {
  check(config.is_object(), "scheduler_config.json must hold a JSON object");
  auto it = config.find("_class_name");
  check(it != config.end() && it->is_string(),
        "scheduler_config.json has no '_class_name' string; it must name the scheduler class "
        "(supported: {})",
        fmt::join(supported_scheduler_classes(), ", "));
  const std::string name = it->get<std::string>();
  if (flow_shift_override)
    check(std::isfinite(*flow_shift_override) && *flow_shift_override > 0,
          "--flow-shift must be a positive number (got {})", *flow_shift_override);

  if (name == "UniPCMultistepScheduler") {
    UniPCConfig c = UniPCConfig::from_json(config);
    if (flow_shift_override) c.flow_shift = *flow_shift_override;
    return std::make_unique<UniPCMultistepScheduler>(std::move(c));
  }
  if (name == "FlowMatchEulerDiscreteScheduler") {
    FlowMatchEulerConfig c = FlowMatchEulerConfig::from_json(config);
    if (flow_shift_override) c.shift = *flow_shift_override;
    return std::make_unique<FlowMatchEulerDiscreteScheduler>(std::move(c));
  }
  fail(
      "scheduler class '{}' is not supported (supported: {}); use a model whose "
      "scheduler_config.json names one of them",
      name, fmt::join(supported_scheduler_classes(), ", "));
}

}  // namespace mmgen::schedulers
