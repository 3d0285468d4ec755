#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cmath>
#include <functional>

#include "core/error.h"
#include "pipeline/schedulers/flow_match_euler.h"
#include "pipeline/schedulers/scheduler.h"
#include "pipeline/schedulers/unipc_multistep.h"

namespace mmgen::schedulers {

namespace {

using Maker =
    std::function<std::unique_ptr<Scheduler>(const nlohmann::json&, std::optional<double>)>;

struct SchedulerClass {
  const char* name;
  const char* shift_key;  // the scheduler_config.json key --flow-shift replaces
  Maker make;
};

// Every scheduler mmgen implements, by diffusers class name: the one place a class is added.
const std::vector<SchedulerClass>& scheduler_classes() {
  static const std::vector<SchedulerClass> classes = {
      {"FlowMatchEulerDiscreteScheduler", "shift",
       [](const nlohmann::json& config, std::optional<double> shift) {
         FlowMatchEulerConfig c = FlowMatchEulerConfig::from_json(config);
         if (shift) c.shift = *shift;
         return std::unique_ptr<Scheduler>(new FlowMatchEulerDiscreteScheduler(std::move(c)));
       }},
      {"UniPCMultistepScheduler", "flow_shift",
       [](const nlohmann::json& config, std::optional<double> shift) {
         UniPCConfig c = UniPCConfig::from_json(config);
         if (shift) c.flow_shift = *shift;
         return std::unique_ptr<Scheduler>(new UniPCMultistepScheduler(std::move(c)));
       }},
  };
  return classes;
}

}  // namespace

std::string flow_shift_key(const std::string& class_name) {
  for (const SchedulerClass& entry : scheduler_classes())
    if (class_name == entry.name) return entry.shift_key;
  return "flow_shift";
}

std::vector<std::string> supported_scheduler_classes() {
  std::vector<std::string> names;
  for (const SchedulerClass& entry : scheduler_classes()) names.push_back(entry.name);
  return names;
}

std::unique_ptr<Scheduler> make_scheduler(const std::string& class_name,
                                          const nlohmann::json& config,
                                          std::optional<double> flow_shift_override) {
  check(config.is_object(), "scheduler_config.json must hold a JSON object");
  if (flow_shift_override)
    check(std::isfinite(*flow_shift_override) && *flow_shift_override > 0,
          "--flow-shift must be a positive number (got {})", *flow_shift_override);
  for (const SchedulerClass& entry : scheduler_classes())
    if (class_name == entry.name) return entry.make(config, flow_shift_override);
  fail(
      "scheduler class '{}' is not supported (supported schedulers: {}); use a model whose "
      "model_index.json names one of them",
      class_name, fmt::join(supported_scheduler_classes(), ", "));
}

std::unique_ptr<Scheduler> make_scheduler(const nlohmann::json& config,
                                          std::optional<double> flow_shift_override) {
  check(config.is_object(), "scheduler_config.json must hold a JSON object");
  auto it = config.find("_class_name");
  check(it != config.end() && it->is_string(),
        "scheduler_config.json has no '_class_name' string; it must name the scheduler class "
        "(supported: {})",
        fmt::join(supported_scheduler_classes(), ", "));
  return make_scheduler(it->get<std::string>(), config, flow_shift_override);
}

}  // namespace mmgen::schedulers
