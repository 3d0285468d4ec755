#include "generate/cli.h"

#include <cstdio>

namespace mmgen {

int run_cli(int argc, char** argv) {
  std::fprintf(stderr, "mmgen: not built yet\n");
  return 2;
}

}  // namespace mmgen
