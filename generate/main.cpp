// The mmgen executable: a thin front end over the library.
#include <unistd.h>

#include "core/thread_placement.h"
#include "generate/cli.h"

int main(int argc, char** argv) {
  // OpenMP reads its placement when a program starts: set it, then start again (once: the
  // variables are set the second time). If that fails, run unplaced.
  if (mmgen::threads_want_placing()) {
    mmgen::set_thread_placement_environment();
    execv("/proc/self/exe", argv);
  }
  return mmgen::run_cli(argc, argv);
}
