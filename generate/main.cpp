// The mmgen executable: a thin front end over the library.
#include "generate/cli.h"

int main(int argc, char** argv) {
  return mmgen::run_cli(argc, argv);
}
