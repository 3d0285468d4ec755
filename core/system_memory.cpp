#include "core/system_memory.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

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

// The cgroup v2 folder of this process ("0::/some/path" in /proc/self/cgroup).
std::optional<std::string> cgroup_folder() {
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("0::", 0) == 0) return "/sys/fs/cgroup" + line.substr(3);
  return std::nullopt;
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
  if (!std::isfinite(value) || value < 0) return std::nullopt;
  return uint64_t(value * scale);
}

std::optional<AvailableMemory> available_memory() {
  if (const char* forced = std::getenv("MMGEN_AVAILABLE_MEMORY"); forced && *forced)
    if (auto bytes = parse_byte_size(forced))
      return AvailableMemory{*bytes, "MMGEN_AVAILABLE_MEMORY"};
  std::optional<AvailableMemory> result;
  if (auto bytes = proc_kib("/proc/meminfo", "MemAvailable"))
    result = AvailableMemory{*bytes, "MemAvailable"};
  // Walk up the cgroup tree: any ancestor's limit binds too.
  if (auto folder = cgroup_folder()) {
    for (std::string dir = *folder; dir.size() >= std::string("/sys/fs/cgroup").size();) {
      auto limit = read_number_file(dir + "/memory.max");
      auto usage = read_number_file(dir + "/memory.current");
      if (limit && usage) {
        const uint64_t left = *limit > *usage ? *limit - *usage : 0;
        if (!result || left < result->bytes)
          result = AvailableMemory{left, "the cgroup limit of " + dir};
      }
      const size_t slash = dir.find_last_of('/');
      if (slash == std::string::npos || dir == "/sys/fs/cgroup") break;
      dir.resize(slash);
    }
  }
  return result;
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
