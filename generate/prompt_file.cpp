#include "generate/prompt_file.h"

#include <sstream>

#include "core/error.h"

namespace mmgen::cli {

std::vector<std::string> read_prompt_file(const fs::path& path) {
  check(fs::is_regular_file(path), "--prompt-file-path {}: no such file", path.string());
  std::stringstream lines(read_text_file(path));
  std::vector<std::string> prompts;
  std::string line;
  while (std::getline(lines, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const size_t first = line.find_first_not_of(" \t");
    if (first == std::string::npos || line[first] == '#') continue;
    prompts.push_back(line);
  }
  return prompts;
}

}  // namespace mmgen::cli
