#include "pipeline/component_models.h"

#include <spdlog/spdlog.h>

#include "core/error.h"
#include "pipeline/progress.h"
#include "pipeline/schedulers/scheduler.h"

namespace mmgen {

SchedulerSpec SchedulerSpec::load(const ModelIndex& index) {
  const ComponentEntry& entry = index.component("scheduler");
  SchedulerSpec spec{entry.class_name, index.config("scheduler")};
  const auto saved = spec.config.find("_class_name");
  if (saved != spec.config.end() && saved->is_string() &&
      saved->get<std::string>() != spec.class_name)
    spdlog::warn("scheduler: model_index.json names {} but {} was saved for {}; using {}",
                 spec.class_name, component_config_path(entry).string(), saved->get<std::string>(),
                 spec.class_name);
  schedulers::make_scheduler(spec.class_name, spec.config);
  return spec;
}

std::string planned_backend(const AttentionPlan& plan, const std::string& component) {
  const auto* choice = planned_component(plan, component);
  return choice ? choice->primary().backend : std::string();
}

bool place_models(bool cuda, std::initializer_list<ModelMove> models) {
  const Device device = cuda ? Device::CUDA : Device::CPU;
#ifndef MMGEN_HAVE_CUDA
  check(!cuda,
        "--device cuda: this build has no CUDA support; rebuild with -DMMGEN_CUDA=ON or use "
        "--device cpu");
#endif
  bool all_there = true;
  for (const ModelMove& model : models) all_there = all_there && model.device() == device;
  if (all_there) return false;
  Progress upload(cuda ? "upload" : "place", 1);
  for (const ModelMove& model : models)
    if (model.device() != device) model.move(device);
  upload.finish();
  return true;
}

}  // namespace mmgen
