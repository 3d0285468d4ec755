// Where the OpenMP threads run. When a run has exactly one thread per CPU it may use (the default,
// or `taskset -c` with as many threads), each thread is kept on its own CPU. Left to the kernel,
// threads move between CPUs between parallel regions, and a small model's working set (in a
// core's L2) goes cold with each move: wan-shapes (20 steps) on the 16-core Xeon took a median
// 0.241 s at 16 threads against 0.199 s on one, and 0.204 s with the threads placed.
#pragma once

#include <vector>

namespace mmgen {

// The CPUs this process may run on (its affinity mask), in increasing order.
std::vector<int> allowed_cpus();

// Thread i of an OpenMP team of cpus.size() threads runs on cpus[i] only from now on (OpenMP
// reuses its threads, so later teams keep their places).
void place_threads_on(const std::vector<int>& cpus);

// Places the threads when there is one per allowed CPU and the user has not placed them
// (OMP_PROC_BIND, OMP_PLACES or GOMP_CPU_AFFINITY set: OMP_PROC_BIND=false keeps them free).
// Returns how many threads were placed (0: left alone).
int place_threads();

}  // namespace mmgen
