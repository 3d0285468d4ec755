// Command-line entry point: parses the subcommand and its flags, runs it, and turns any Error
// into one line on stderr and a non-zero exit code.
#pragma once

namespace mmgen {

int run_cli(int argc, char** argv);

}  // namespace mmgen
