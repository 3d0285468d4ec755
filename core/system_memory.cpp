#include "core/system_memory.h"

#include <fmt/format.h>
#include <malloc.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

namespace mmgen {

namespace {

// The value of `key` (in kB) from a /proc file of "Key:   1234 kB" lines.
std::optional<uint64_t> proc_kib(const char* file, const std::string& key) {
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key + ":", 0) != 0) continue;
    std::istringstream fields(line.substr(key.size() + 1));
    uint64_t kib = 0;
    if (fields >> kib) return kib * 1024;
  }
  return std::nullopt;
}

std::optional<uint64_t> read_number_file(const std::string& path) {
  std::ifstream in(path);
  std::string text;
  if (!(in >> text) || text == "max") return std::nullopt;
  char* end = nullptr;
  const unsigned long long value = std::strtoull(text.c_str(), &end, 10);
  if (end == text.c_str() || *end != '\0') return std::nullopt;
  return uint64_t(value);
}

// The value of `key` in a cgroup's memory.stat ("key 1234" lines, bytes).
std::optional<uint64_t> stat_value(const std::string& file, const std::string& key) {
  std::ifstream in(file);
  std::string name;
  uint64_t value = 0;
  while (in >> name >> value)
    if (name == key) return value;
  return std::nullopt;
}

// A memory cgroup hierarchy: its root folder and the files that hold the limit, the usage and the
// inactive page cache (cgroup v2, or v1's memory controller).
struct CgroupLayout {
  std::string root, limit, usage, inactive_cache;
};

// This process's folder in each hierarchy it belongs to (/proc/self/cgroup lines
// "0::/path" for v2, "N:memory:/path" for v1).
std::vector<std::pair<CgroupLayout, std::string>> cgroup_folders() {
  std::vector<std::pair<CgroupLayout, std::string>> folders;
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    const size_t first = line.find(':'), second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1);
    const std::string path = line.substr(second + 1);
    if (line.rfind("0::", 0) == 0)
      folders.push_back({{"/sys/fs/cgroup", "memory.max", "memory.current", "inactive_file"},
                         "/sys/fs/cgroup" + path});
    else if (controllers == "memory")
      folders.push_back({{"/sys/fs/cgroup/memory", "memory.limit_in_bytes", "memory.usage_in_bytes",
                          "total_inactive_file"},
                         "/sys/fs/cgroup/memory" + path});
  }
  return folders;
}

}  // namespace

std::optional<uint64_t> parse_byte_size(const std::string& text) {
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  std::string unit = text.substr(used);
  std::transform(unit.begin(), unit.end(), unit.begin(), ::tolower);
  if (unit.ends_with("ib")) unit.resize(unit.size() - 2);
  if (unit.ends_with("b") && unit.size() == 2) unit.resize(1);
  static const std::string units = "kmgt";
  double scale = 1;
  if (!unit.empty()) {
    const size_t at = units.find(unit);
    if (unit.size() != 1 || at == std::string::npos) return std::nullopt;
    scale = std::pow(1024.0, double(at + 1));
  }
  // Past 1 EiB is no machine's memory (and past 2^64 the conversion would be undefined).
  if (!std::isfinite(value) || value < 0 || value * scale > 0x1p60) return std::nullopt;
  return uint64_t(value * scale);
}

std::optional<AvailableMemory> available_memory() {
  if (const char* forced = std::getenv("MMGEN_AVAILABLE_MEMORY"); forced && *forced)
    if (auto bytes = parse_byte_size(forced))
      return AvailableMemory{*bytes, "MMGEN_AVAILABLE_MEMORY"};
  std::optional<AvailableMemory> result;
  if (auto bytes = proc_kib("/proc/meminfo", "MemAvailable"))
    result = AvailableMemory{*bytes, "MemAvailable"};
  // Walk up each cgroup tree: any ancestor's limit binds too.
  for (const auto& [layout, folder] : cgroup_folders()) {
    for (std::string dir = folder; dir.size() >= layout.root.size();) {
      const auto limit = read_number_file(dir + "/" + layout.limit);
      const auto usage = read_number_file(dir + "/" + layout.usage);
      // v1 reports "no limit" as a number near 2^63.
      if (limit && usage && *limit < (uint64_t(1) << 62)) {
        // The usage counts page cache, which the kernel reclaims before it kills anything:
        // discount the inactive part, as container runtimes' "working set" does.
        const uint64_t cache = stat_value(dir + "/memory.stat", layout.inactive_cache).value_or(0);
        const uint64_t working = *usage > cache ? *usage - cache : 0;
        const uint64_t left = *limit > working ? *limit - working : 0;
        if (!result || left < result->bytes)
          result = AvailableMemory{left, "the cgroup limit of " + dir};
      }
      const size_t slash = dir.find_last_of('/');
      if (slash == std::string::npos || dir == layout.root) break;
      dir.resize(slash);
    }
  }
  return result;
}

void keep_freed_host_memory() {
#if defined(__GLIBC__) && defined(M_MMAP_THRESHOLD) && defined(M_TRIM_THRESHOLD)
  // Setting either turns off glibc's own adjustment of both, so both are set.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
#endif
}

uint64_t peak_resident_bytes() {
  return proc_kib("/proc/self/status", "VmHWM").value_or(0);
}

std::string format_bytes(uint64_t bytes) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double value = double(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 5) value /= 1024, ++unit;
  if (unit == 0) return fmt::format("{} B", bytes);
  return fmt::format("{:.{}f} {}", value, value < 10 ? 2 : value < 100 ? 1 : 0, units[unit]);
}

}  // namespace mmgen
