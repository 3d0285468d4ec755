// `mmgen attention`: runs one DiT attention backend on q, k, v from .npy files, for kernel
// developers and tests. Prints the measured time and the fraction of key blocks visited, and
// writes the output as .npy.
#pragma once

#include <string>
#include <vector>

namespace mmgen::cli {

int run_attention(const std::vector<std::string>& arguments);

std::string attention_help();

}  // namespace mmgen::cli
