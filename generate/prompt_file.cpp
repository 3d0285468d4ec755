#include "generate/prompt_file.h"

#include <sstream>

#include "core/error.h"
#include "core/file.h"
#include "core/text.h"

namespace mmgen::cli {

std::vector<std::string> read_prompt_file(const fs::path& path) {
  check_regular_file(path, "--prompt-file-path");
  std::stringstream lines(read_text_file(path, Limits::kMaxPromptFile));
  std::vector<std::string> prompts;
  std::string line;
  size_t line_number = 0;
  while (std::getline(lines, line)) {
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    // Every line, comments too: a file that is not UTF-8 is the wrong file, or saved wrong.
    const size_t bad = invalid_utf8_offset(line);
    check(bad == std::string::npos,
          "--prompt-file-path {}: line {} is not valid UTF-8 (byte {}); save the file as UTF-8",
          path.string(), line_number, bad + 1);
    const size_t first = line.find_first_not_of(" \t");
    if (first == std::string::npos || line[first] == '#') continue;
    check(line.size() <= Limits::kMaxPromptBytes,
          "--prompt-file-path {}: line {} is {} bytes long; at most {} are taken", path.string(),
          line_number, line.size(), Limits::kMaxPromptBytes);
    prompts.push_back(line);
    check(prompts.size() <= size_t(Limits::kMaxPromptsPerFile),
          "--prompt-file-path {}: more than {} prompts; split the file", path.string(),
          Limits::kMaxPromptsPerFile);
  }
  return prompts;
}

}  // namespace mmgen::cli
