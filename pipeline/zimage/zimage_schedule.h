// Z-Image's sigmas, as ZImagePipeline sets them up: torch.linspace(1, 1/N, N) in float32 (the
// rest of its schedule is every image DiT's, image_schedule.h).
#pragma once

#include <vector>

namespace mmgen {

// torch.linspace(1.0, 1 / steps, steps) in float32, as torch's CPU kernel computes it (the first
// half counted up from the start, the second half down from the end).
std::vector<double> zimage_default_sigmas(int steps);

}  // namespace mmgen
