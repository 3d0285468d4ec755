#include "pipeline/hub_cache.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include "core/error.h"
#include "core/file.h"

namespace mmgen {

namespace {

std::string environment(const char* name) {
  const char* value = std::getenv(name);
  return value ? std::string(value) : std::string();
}

// org/name, each part letters, digits, '-', '_' and '.', not starting with '.' (as the hub allows).
bool is_model_id(const std::string& text) {
  const size_t slash = text.find('/');
  if (slash == std::string::npos || text.find('/', slash + 1) != std::string::npos) return false;
  const std::string parts[] = {text.substr(0, slash), text.substr(slash + 1)};
  for (const std::string& part : parts) {
    if (part.empty() || part.size() > 96 || part.front() == '.' || part.front() == '-')
      return false;
    for (char c : part)
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.')
        return false;
  }
  return true;
}

bool is_commit_hash(const std::string& text) {
  return text.size() == 40 && std::all_of(text.begin(), text.end(), [](char c) {
           return std::isdigit(static_cast<unsigned char>(c)) || (c >= 'a' && c <= 'f');
         });
}

// A branch or tag name as the cache stores it under refs/ (it may hold '/', as pr/1 does), never
// leaving that folder.
bool is_safe_revision(const std::string& revision) {
  if (revision.empty() || revision.front() == '/') return false;
  for (const auto& part : fs::path(revision))
    if (part == ".." || part == ".") return false;
  return revision.find('\0') == std::string::npos;
}

// A ref holds one commit hash; read as every file is (a FIFO there is refused, not waited on).
std::string first_line(const fs::path& file) {
  std::string line = read_file_head(file, 256);
  line.resize(std::min(line.size(), line.find('\n')));
  while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.pop_back();
  return line;
}

}  // namespace

fs::path hub_cache_folder() {
  if (const std::string cache = environment("HF_HUB_CACHE"); !cache.empty()) return cache;
  if (const std::string home = environment("HF_HOME"); !home.empty()) return fs::path(home) / "hub";
  return fs::path(environment("HOME")) / ".cache" / "huggingface" / "hub";
}

fs::path resolve_model_path(const std::string& given, const std::optional<std::string>& revision) {
  std::error_code error;
  if (given.empty() || fs::exists(given, error)) {
    check(!revision || given.empty(),
          "--revision {}: --model-path {} is a local folder; --revision picks the snapshot of a "
          "Hugging Face model id (org/name) in the local cache",
          revision.value_or(""), given);
    return given;
  }
  if (!is_model_id(given)) {
    check(!revision, "--revision {}: --model-path {} is neither a folder nor a model id (org/name)",
          revision.value_or(""), given);
    return given;
  }
  const std::string wanted = revision.value_or("main");
  check(is_safe_revision(wanted),
        "--revision '{}': expected a branch name (as under refs/, e.g. main) or a commit hash",
        wanted);
  const fs::path cache = hub_cache_folder();
  const size_t slash = given.find('/');
  const fs::path repo =
      cache / ("models--" + given.substr(0, slash) + "--" + given.substr(slash + 1));
  const std::string download =
      fmt::format("huggingface-cli download {}{}", given,
                  revision ? fmt::format(" --revision {}", *revision) : std::string());
  check(fs::is_directory(repo, error),
        "--model-path {}: no such folder, and the local Hugging Face cache {} has no model id {} "
        "({} is missing); download it with `{}` (mmgen never downloads), or pass the model's "
        "folder",
        given, cache.string(), given, repo.filename().string(), download);

  std::string commit;
  if (is_commit_hash(wanted) && fs::is_directory(repo / "snapshots" / wanted, error)) {
    commit = wanted;
  } else {
    const fs::path ref = repo / "refs" / wanted;
    check(fs::is_regular_file(ref, error),
          "--model-path {}: the local Hugging Face cache {} has no revision '{}' of it ({} is "
          "missing); download it with `{}` (mmgen never downloads), or pass --revision with a "
          "branch under {} or a cached commit",
          given, cache.string(), wanted, ref.string(), download, (repo / "refs").string());
    commit = first_line(ref);
    check(is_commit_hash(commit) || is_safe_revision(commit),
          "--model-path {}: {} holds '{}', not a commit hash; the cache is damaged, download the "
          "model again with `{}`",
          given, ref.string(), commit, download);
  }
  const fs::path snapshot = repo / "snapshots" / commit;
  check(fs::is_directory(snapshot, error),
        "--model-path {}: revision '{}' is commit {}, but the Hugging Face cache has no snapshot "
        "{}; download it with `{}` (mmgen never downloads)",
        given, wanted, commit, snapshot.string(), download);
  return snapshot;
}

}  // namespace mmgen
