#include "core/thread_placement.h"

#include <omp.h>
#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <thread>

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

std::vector<int> permitted_cpus() {
  // A fresh thread asks for every CPU; the kernel keeps those the cpuset allows. The calling
  // thread's own mask is left as it is.
  std::vector<int> cpus;
  std::thread probe([&cpus] {
    cpu_set_t all;
    CPU_ZERO(&all);
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) CPU_SET(cpu, &all);
    if (sched_setaffinity(0, sizeof(all), &all) == 0) cpus = allowed_cpus();
  });
  probe.join();
  return cpus.empty() ? allowed_cpus() : cpus;
}

std::vector<std::vector<int>> share_cpus(const std::vector<int>& cpus, int parts) {
  std::vector<std::vector<int>> shares(size_t(std::max(parts, 0)));
  if (cpus.empty()) return shares;
  const size_t n = cpus.size();
  for (size_t p = 0; p < shares.size(); ++p) {
    if (n < shares.size()) {
      shares[p] = {cpus[p % n]};
      continue;
    }
    for (size_t i = p * n / shares.size(); i < (p + 1) * n / shares.size(); ++i)
      shares[p].push_back(cpus[i]);
  }
  return shares;
}

bool run_on(const std::vector<int>& cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (const int cpu : cpus)
    if (cpu >= 0 && cpu < CPU_SETSIZE) CPU_SET(cpu, &set);
  return CPU_COUNT(&set) > 0 && sched_setaffinity(0, sizeof(set), &set) == 0;
}

std::string cpu_list(const std::vector<int>& cpus) {
  std::string text;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!text.empty()) text += ',';
    text += std::to_string(cpus[i]);
    if (j > i) text += '-' + std::to_string(cpus[j]);
    i = j + 1;
  }
  return text;
}

std::vector<int> parse_cpu_list(const std::string& text) {
  std::vector<int> cpus;
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find(',', at);
    if (end == std::string::npos) end = text.size();
    const std::string part = text.substr(at, end - at);
    const size_t dash = part.find('-');
    char* rest = nullptr;
    const long first = std::strtol(part.c_str(), &rest, 10);
    const long last =
        dash == std::string::npos ? first : std::strtol(part.c_str() + dash + 1, &rest, 10);
    if (first < 0 || last < first || last >= CPU_SETSIZE) return {};  // not a cpulist
    for (long cpu = first; cpu <= last; ++cpu) cpus.push_back(int(cpu));
    at = end + 1;
  }
  return cpus;
}

}  // namespace mmgen
