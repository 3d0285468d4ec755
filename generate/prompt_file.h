// Reading a --prompt-file-path file (shared by `mmgen generate` and `mmgen encode`): one prompt
// per line; blank lines and lines whose first non-blank character is '#' are skipped; a trailing
// '\r' (Windows line ends) is dropped.
#pragma once

#include <string>
#include <vector>

#include "core/file.h"

namespace mmgen::cli {

// The file's prompts in order; may be empty. A missing file is an Error naming the flag.
std::vector<std::string> read_prompt_file(const fs::path& path);

}  // namespace mmgen::cli
