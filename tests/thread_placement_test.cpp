// Thread placement: when mmgen asks OpenMP to place its threads, and that the executable does.
#include "core/thread_placement.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

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

}  // namespace
}  // namespace mmgen
