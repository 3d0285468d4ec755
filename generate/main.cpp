// The mmgen executable: a thin front end over the library.
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "core/thread_placement.h"
#include "generate/cli.h"

namespace {

// `--gpus N` with N > 1 on the command line: each rank gets a share of the CPUs instead
// (generate/multi_gpu.h), so the leader's threads are not placed over all of them.
bool asks_for_several_gpus(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const char* value = arg == "--gpus" && i + 1 < argc ? argv[i + 1]
                        : arg.rfind("--gpus=", 0) == 0  ? argv[i] + 7
                                                        : nullptr;
    if (value && std::atol(value) > 1) return true;
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  // OpenMP reads its placement when a program starts: set it, then start again (once: the
  // variables are set the second time). If that fails, run unplaced.
  if (mmgen::threads_want_placing() && !asks_for_several_gpus(argc, argv)) {
    mmgen::set_thread_placement_environment();
    execv("/proc/self/exe", argv);
  }
  return mmgen::run_cli(argc, argv);
}
