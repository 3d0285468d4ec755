// aiter: known by name so selection and `mmgen backends` can answer for it; no build of mmgen
// has a kernel for it yet (it needs a ROCm build), so it has no factory and no kernel row.
#include "attention/backends/descriptor.h"

namespace mmgen::attention::aiter {

const BackendDescriptor& descriptor() {
  using P = Platform;
  static const BackendDescriptor d = {.info = {.name = "aiter",
                                               .family = Family::Dit,
                                               .summary = "AMD AITER dense attention kernels",
                                               .aliases = {},
                                               .platforms = {P::Rocm},
                                               .build_needs = "a ROCm build with AITER",
                                               .gpu_arch = "gfx942 / gfx950 (MI300 / MI355)",
                                               .dtypes = {"bf16", "fp16"},
                                               .head_sizes = "64, 128",
                                               .paged_counterpart = "aiter"}};
  return d;
}

}  // namespace mmgen::attention::aiter
