// Where a run's time goes, operation by operation: with MMGEN_OP_PROFILE=1 in the environment,
// every profiled scope adds its wall time (its own, less the profiled scopes inside it) to a table
// printed on stderr when the process ends. It is the per-op profile issue 20 asked for on hosts
// without perf (the GPU machine's host), and costs one branch per scope when off.
//
// Scopes are timed on the thread that opens them, outside parallel regions only: an operation's
// threads are inside it. GPU work is asynchronous, so on the GPU a scope times only its launches;
// MMGEN_OP_PROFILE=sync waits for the GPU at each scope's start and end, so the table gives each
// scope's GPU time (plus a few microseconds of idle GPU per scope) at the price of a slower run.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

namespace mmgen::profile {

// MMGEN_OP_PROFILE is set to something other than "" or "0" (read once).
bool enabled();
// MMGEN_OP_PROFILE=sync: scopes wait for the GPU (see above).
bool synced();

// Adds `nanoseconds` and one call to `name` (a string with static storage), and takes them from
// the enclosing scope's own time: for parts of an operation timed inside it by hand.
void add(std::string_view name, int64_t nanoseconds);

// The table so far, as printed at exit: one line per name, most time first.
std::string report();
// Forgets what was recorded so far (a benchmark's warm-up).
void reset();

class Scope {
 public:
  explicit Scope(std::string_view name);
  ~Scope();
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  std::string_view name_;
  bool active_ = false;
  std::chrono::steady_clock::time_point start_;
  int64_t children_ns_ = 0;
  Scope* parent_ = nullptr;
  friend void add(std::string_view name, int64_t nanoseconds);
};

}  // namespace mmgen::profile

#define MMGEN_PROFILE_CONCAT_(a, b) a##b
#define MMGEN_PROFILE_CONCAT(a, b) MMGEN_PROFILE_CONCAT_(a, b)
// Times the rest of the enclosing block under `name`.
#define MMGEN_PROFILE(name) \
  const ::mmgen::profile::Scope MMGEN_PROFILE_CONCAT(mmgen_profile_scope_, __LINE__)(name)
