#include "attention/device_choice.h"

#include <fmt/format.h>

#include "attention/catalogue.h"
#include "core/error.h"

namespace mmgen::attention {

DeviceChoice choose_device(std::string_view requested) {
#ifndef MMGEN_HAVE_CUDA
  // Said here, before the attention plan looks for GPU kernels this build cannot have.
  check(requested != "cuda",
        "--device cuda: this mmgen was built without CUDA support; rebuild with -DMMGEN_CUDA=ON "
        "(needs nvcc; see README, GPU) or use --device cpu");
#endif
  if (requested == "cpu" || requested == "cuda")
    return {std::string(requested), fmt::format("--device {}", requested)};
#ifndef MMGEN_HAVE_CUDA
  return {"cpu", "auto: this build has no CUDA support (-DMMGEN_CUDA=ON adds it)"};
#else
  const Machine& gpu = machine_for_device("cuda");
  if (gpu.sm == 0) return {"cpu", "auto: this CUDA build found no GPU"};
  // The GPU must run the transformer's dense kernel; the kernel table says which GPUs can.
  const Availability dense = kernel_availability(gpu, Family::Dit, "fa", gpu.dtype, 0);
  if (!dense.ok)
    return {"cpu", fmt::format("auto: the GPU ({}) cannot run this build's kernels: {}",
                               gpu.description, dense.reason)};
  return {"cuda", fmt::format("auto: this CUDA build found a supported GPU ({})", gpu.description)};
#endif
}

}  // namespace mmgen::attention
