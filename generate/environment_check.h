// The MMGEN_* environment variables mmgen reads, checked once when the CLI starts: a malformed
// value is an error naming the variable and what it takes, rather than being ignored where it is
// read, deep in a run (MMGEN_AVAILABLE_MEMORY=lots used to mean "read the machine").
#pragma once

namespace mmgen::cli {

// Throws Error for a malformed value.
void check_environment();

}  // namespace mmgen::cli
