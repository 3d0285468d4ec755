#include "core/op_profile.h"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#ifdef MMGEN_HAVE_CUDA
#include <cuda_runtime.h>

#include "core/cuda/device_memory.h"
#endif

namespace mmgen::profile {
namespace {

struct Entry {
  int64_t calls = 0;
  int64_t nanoseconds = 0;
};

struct Table {
  std::mutex mutex;
  std::map<std::string_view, Entry> entries;
  // Printed when the process ends, so every exit path of every command reports.
  ~Table() {
    if (enabled() && !entries.empty()) std::fputs(report().c_str(), stderr);
  }
};

Table& table() {
  static Table instance;
  return instance;
}

thread_local Scope* innermost = nullptr;

// MMGEN_OP_PROFILE=sync: the GPU's queued work finishes before a scope's clock starts or stops.
// Only once the process has GPU memory, so a CPU run never starts a CUDA context here.
void wait_for_device() {
#ifdef MMGEN_HAVE_CUDA
  if (synced() && cuda::CachingAllocator::instance().bytes_reserved() > 0)
    (void)cudaDeviceSynchronize();
#endif
}

void record(std::string_view name, int64_t nanoseconds) {
  Table& t = table();
  const std::lock_guard<std::mutex> lock(t.mutex);
  Entry& entry = t.entries[name];
  ++entry.calls;
  entry.nanoseconds += nanoseconds;
}

}  // namespace

bool enabled() {
  static const bool on = [] {
    const char* value = std::getenv("MMGEN_OP_PROFILE");
    return value && *value && std::string_view(value) != "0";
  }();
  return on;
}

bool synced() {
  static const bool on = [] {
    const char* value = std::getenv("MMGEN_OP_PROFILE");
    return value && std::string_view(value) == "sync";
  }();
  return on;
}

void add(std::string_view name, int64_t nanoseconds) {
  if (innermost && !omp_in_parallel()) innermost->children_ns_ += nanoseconds;
  record(name, nanoseconds);
}

std::string report() {
  Table& t = table();
  std::vector<std::pair<std::string_view, Entry>> rows;
  {
    const std::lock_guard<std::mutex> lock(t.mutex);
    rows.assign(t.entries.begin(), t.entries.end());
  }
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) {
    return a.second.nanoseconds > b.second.nanoseconds;
  });
  int64_t total = 0;
  for (const auto& row : rows) total += row.second.nanoseconds;
  const char* rank = std::getenv("MMGEN_RANK");  // a rank of `mmgen generate --gpus N`
  std::string out = fmt::format("op profile ({}{} threads{}): {:.1f} ms in profiled scopes\n",
                                rank ? fmt::format("rank {}, ", rank) : "", omp_get_max_threads(),
                                synced() ? ", GPU waited for" : "", double(total) / 1e6);
  out += fmt::format("{:<36} {:>8} {:>12} {:>10} {:>7}\n", "scope", "calls", "total ms", "ms/call",
                     "share");
  for (const auto& [name, entry] : rows)
    out += fmt::format("{:<36} {:>8} {:>12.1f} {:>10.3f} {:>6.1f}%\n", name, entry.calls,
                       double(entry.nanoseconds) / 1e6,
                       double(entry.nanoseconds) / 1e6 / double(std::max<int64_t>(entry.calls, 1)),
                       100.0 * double(entry.nanoseconds) / double(std::max<int64_t>(total, 1)));
  return out;
}

void reset() {
  Table& t = table();
  const std::lock_guard<std::mutex> lock(t.mutex);
  t.entries.clear();
}

Scope::Scope(std::string_view name) : name_(name) {
  if (!enabled() || omp_in_parallel()) return;
  active_ = true;
  parent_ = innermost;
  innermost = this;
  wait_for_device();
  start_ = std::chrono::steady_clock::now();
}

Scope::~Scope() {
  if (!active_) return;
  wait_for_device();
  const int64_t elapsed = std::chrono::duration_cast<std::chrono::nanoseconds>(
                              std::chrono::steady_clock::now() - start_)
                              .count();
  innermost = parent_;
  if (parent_) parent_->children_ns_ += elapsed;
  record(name_, elapsed - children_ns_);
}

}  // namespace mmgen::profile
