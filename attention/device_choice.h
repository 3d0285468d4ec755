// Where a run goes: --device auto (the default) takes the GPU when this build has CUDA and the
// GPU can run its kernels, and the CPU otherwise; --device cpu / cuda are taken as asked. The
// reason travels with the choice, so the log, --dry-run and `mmgen backends` can say why.
#pragma once

#include <string>
#include <string_view>

namespace mmgen::attention {

struct DeviceChoice {
  std::string device;  // "cpu" or "cuda"
  std::string reason;  // "auto: ...", or "--device cuda"
};

// `requested` is "auto", "cpu" or "cuda" (the option table checks the spelling).
DeviceChoice choose_device(std::string_view requested);

}  // namespace mmgen::attention
