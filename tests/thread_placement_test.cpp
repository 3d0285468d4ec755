// Thread placement: when mmgen asks OpenMP to place its threads, and that the executable does.
#include "core/thread_placement.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/test_support.h"

namespace mmgen {
namespace {

// One thread per allowed CPU: placed, unless the user placed them.
TEST(ThreadPlacement, WantedForOneThreadPerCpuUnlessTheUserPlacedThem) {
  const int cpus = int(allowed_cpus().size());
  ASSERT_GE(cpus, 1);
  const int before = omp_get_max_threads();
  omp_set_num_threads(cpus);
  EXPECT_EQ(threads_want_placing(), cpus >= 2);
  for (const char* name : {"OMP_PROC_BIND", "OMP_PLACES", "GOMP_CPU_AFFINITY"}) {
    setenv(name, "false", 1);
    EXPECT_FALSE(threads_want_placing()) << name;
    unsetenv(name);
  }
  omp_set_num_threads(cpus + 1);
  EXPECT_FALSE(threads_want_placing());
  omp_set_num_threads(before);
}

// The executable starts itself again with the placement set: with one thread per CPU, OpenMP's
// own report (OMP_DISPLAY_ENV) shows OMP_PROC_BIND 'CLOSE'; asked not to, it stays unset.
TEST(ThreadPlacement, TheExecutableRunsPlacedWithOneThreadPerCpu) {
  const int cpus = int(allowed_cpus().size());
  if (cpus < 2) GTEST_SKIP() << "one CPU: nothing to place";
  const std::filesystem::path log = testing::scratch_dir("thread_placement") / "env.txt";
  const auto display = [&](const std::string& extra) {
    const std::string command = "env -u OMP_PROC_BIND -u OMP_PLACES " + extra +
                                " OMP_DISPLAY_ENV=true OMP_NUM_THREADS=" + std::to_string(cpus) +
                                " " + testing::mmgen_binary().string() + " --version > " +
                                log.string() + " 2>&1";
    EXPECT_EQ(std::system(command.c_str()), 0) << command;
    std::ifstream in(log);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  EXPECT_NE(display("").find("OMP_PROC_BIND = 'CLOSE'"), std::string::npos) << display("");
  EXPECT_NE(display("OMP_PROC_BIND=false").find("OMP_PROC_BIND = 'FALSE'"), std::string::npos);
}

// `--gpus N` on the command line: the leader is not placed over every CPU (each rank gets a share
// of them instead), whatever --gpus is followed by on this CPU build (which then refuses it).
TEST(ThreadPlacement, SeveralGpusAreNotPlacedOverEveryCpu) {
  const int cpus = int(allowed_cpus().size());
  if (cpus < 2) GTEST_SKIP() << "one CPU: nothing to place";
  const std::filesystem::path log = testing::scratch_dir("thread_placement") / "gpus.txt";
  const auto display = [&](const std::string& gpus) {
    const std::string command =
        "env -u OMP_PROC_BIND -u OMP_PLACES OMP_DISPLAY_ENV=true "
        "OMP_NUM_THREADS=" +
        std::to_string(cpus) + " " + testing::mmgen_binary().string() + " --version " + gpus +
        " > " + log.string() + " 2>&1";
    EXPECT_EQ(std::system(command.c_str()), 0) << command;
    std::ifstream in(log);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  EXPECT_EQ(display("--gpus 2").find("OMP_PROC_BIND = 'CLOSE'"), std::string::npos);
  EXPECT_EQ(display("--gpus=4").find("OMP_PROC_BIND = 'CLOSE'"), std::string::npos);
  EXPECT_NE(display("--gpus 1").find("OMP_PROC_BIND = 'CLOSE'"), std::string::npos);
}

// The shares of the CPUs the ranks of `--gpus N` run on: contiguous, disjoint, covering every
// CPU, sizes within one; with fewer CPUs than ranks the ranks take them in turn.
TEST(ThreadPlacement, RanksGetDisjointSharesOfTheCpus) {
  const std::vector<int> cpus = {0, 1, 2, 3, 4, 5, 6, 8, 9, 10};
  const auto shares = share_cpus(cpus, 3);
  ASSERT_EQ(shares.size(), 3u);
  EXPECT_EQ(shares[0], (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(shares[1], (std::vector<int>{3, 4, 5}));
  EXPECT_EQ(shares[2], (std::vector<int>{6, 8, 9, 10}));
  EXPECT_EQ(share_cpus({0, 1}, 4), (std::vector<std::vector<int>>{{0}, {1}, {0}, {1}}));
  EXPECT_EQ(cpu_list(cpus), "0-6,8-10");
  EXPECT_EQ(parse_cpu_list("0-6,8-10"), cpus);
  EXPECT_EQ(parse_cpu_list("5"), std::vector<int>{5});
  EXPECT_TRUE(parse_cpu_list("3-1").empty());
  // What the kernel allows includes what this process runs on; pinning to one of them holds for
  // the thread that asked (a thread of its own, so the test's others keep theirs).
  const std::vector<int> permitted = permitted_cpus();
  for (const int cpu : allowed_cpus())
    EXPECT_NE(std::find(permitted.begin(), permitted.end(), cpu), permitted.end()) << cpu;
  std::thread pinned([&] {
    ASSERT_TRUE(run_on({permitted.back()}));
    EXPECT_EQ(allowed_cpus(), std::vector<int>{permitted.back()});
    EXPECT_EQ(permitted_cpus(), permitted);  // still every CPU, seen from the pinned thread
  });
  pinned.join();
  EXPECT_FALSE(run_on({}));
}

}  // namespace
}  // namespace mmgen
