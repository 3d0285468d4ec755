// Thread placement: after place_threads_on, each thread of a team runs on its CPU only.
#include "core/thread_placement.h"

#include <gtest/gtest.h>
#include <omp.h>
#include <sched.h>

#include <algorithm>
#include <vector>

namespace mmgen {
namespace {

// The CPUs each thread of a team of `threads` may run on.
std::vector<std::vector<int>> team_affinity(int threads) {
  std::vector<std::vector<int>> result(static_cast<size_t>(threads));
#pragma omp parallel num_threads(threads)
  result[size_t(omp_get_thread_num())] = allowed_cpus();
  return result;
}

// Every thread of the largest team may run anywhere in `cpus` again.
void free_threads(const std::vector<int>& cpus) {
#pragma omp parallel num_threads(std::max(omp_get_max_threads(), int(cpus.size())))
  {
    cpu_set_t set;
    CPU_ZERO(&set);
    for (const int cpu : cpus) CPU_SET(cpu, &set);
    sched_setaffinity(0, sizeof(set), &set);
  }
}

TEST(ThreadPlacement, EachThreadKeepsToItsCpuInLaterTeams) {
  const std::vector<int> all = allowed_cpus();
  ASSERT_FALSE(all.empty());
  if (all.size() < 2) GTEST_SKIP() << "one CPU: nothing to place";
  const std::vector<int> two = {all[1], all[0]};  // not the order they come in
  place_threads_on(two);
  EXPECT_EQ(team_affinity(2), (std::vector<std::vector<int>>{{all[1]}, {all[0]}}));
  EXPECT_EQ(team_affinity(2), (std::vector<std::vector<int>>{{all[1]}, {all[0]}}));
  free_threads(all);
  EXPECT_EQ(team_affinity(2), std::vector<std::vector<int>>(2, all));
}

// One thread per allowed CPU: placed, unless the user placed them (ctest runs with two threads).
TEST(ThreadPlacement, PlacesOneThreadPerCpuUnlessTheUserPlacedThem) {
  const std::vector<int> all = allowed_cpus();
  setenv("OMP_PROC_BIND", "false", 1);
  EXPECT_EQ(place_threads(), 0);
  unsetenv("OMP_PROC_BIND");
  const bool one_each = all.size() >= 2 && int(all.size()) == omp_get_max_threads();
  EXPECT_EQ(place_threads(), one_each ? int(all.size()) : 0);
  if (one_each) {
    std::vector<std::vector<int>> each;
    for (const int cpu : all) each.push_back({cpu});
    EXPECT_EQ(team_affinity(int(all.size())), each);
  }
  free_threads(all);
}

}  // namespace
}  // namespace mmgen
