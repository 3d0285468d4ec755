#include "core/thread_placement.h"

#include <omp.h>
#include <pthread.h>
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

void place_threads_on(const std::vector<int>& cpus) {
  if (cpus.empty()) return;
#pragma omp parallel num_threads(int(cpus.size()))
  {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpus[size_t(omp_get_thread_num())], &set);
    // A refusal (a CPU gone offline since) leaves the thread where it may run: still correct.
    pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
  }
}

int place_threads() {
  for (const char* name : {"OMP_PROC_BIND", "OMP_PLACES", "GOMP_CPU_AFFINITY"})
    if (std::getenv(name)) return 0;
  const std::vector<int> cpus = allowed_cpus();
  if (cpus.size() < 2 || int(cpus.size()) != omp_get_max_threads()) return 0;
  place_threads_on(cpus);
  return int(cpus.size());
}

}  // namespace mmgen
