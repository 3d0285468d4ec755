// The mmgen executable: a thin front end over the library.
#include "core/thread_placement.h"
#include "generate/cli.h"

int main(int argc, char** argv) {
  mmgen::place_threads();
  return mmgen::run_cli(argc, argv);
}
