#include "core/thread_placement.h"

#include <omp.h>
#include <sched.h>

#include <cstdlib>

namespace mmgen {

std::vector<int> allowed_cpus() {
  std::vector<int> cpus;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  return cpus;
}

bool threads_want_placing() {
  for (const char* name : {"OMP_PROC_BIND", "OMP_PLACES", "GOMP_CPU_AFFINITY"})
    if (std::getenv(name)) return false;
  const size_t cpus = allowed_cpus().size();
  return cpus >= 2 && int(cpus) == omp_get_max_threads();
}

void set_thread_placement_environment() {
  setenv("OMP_PROC_BIND", "close", 1);
  setenv("OMP_PLACES", "cores", 1);
}

}  // namespace mmgen
