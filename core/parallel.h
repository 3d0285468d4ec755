// How many threads a loop runs on. Starting and joining an OpenMP team costs microseconds per
// thread, more than a small loop's share of work: a loop of `work` units gets one thread per
// `grain` units, at most OpenMP's maximum. Time then never grows with the thread count because
// small loops were split too finely (on the 16-core host, wan-shapes got slower with every thread
// added).
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>

namespace mmgen {

// Elements an element-wise or row loop gives each thread (torch's intra-op grain is the same).
inline constexpr int64_t kParallelGrain = int64_t(1) << 15;

// Loops run `num_threads(threads) if (threads > 1)`: below two grains, no team is started at all.
inline int threads_for(int64_t work, int64_t grain = kParallelGrain) {
  return int(std::clamp<int64_t>(work / std::max<int64_t>(grain, 1), 1, omp_get_max_threads()));
}

}  // namespace mmgen
