#include "core/interrupt.h"

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstring>
#include <mutex>

namespace mmgen {
namespace {

std::atomic<int> requested_signal{0};

// The partial output's path, readable from a signal handler: a fixed buffer and a flag that says
// whether it holds a complete path.
constexpr size_t kPathCapacity = 4096;
char partial_path[kPathCapacity];
std::atomic<bool> partial_path_valid{false};

void write_stderr(const char* text) {
  ssize_t ignored = ::write(STDERR_FILENO, text, std::strlen(text));
  (void)ignored;
}

// Only async-signal-safe calls here: write, unlink, _exit.
void on_stop_signal(int signal_number) {
  int expected = 0;
  if (requested_signal.compare_exchange_strong(expected, signal_number)) {
    write_stderr(
        "\nmmgen: stopping after the current block (press Ctrl-C again to stop at once)\n");
    return;
  }
  if (partial_path_valid.load()) ::unlink(partial_path);
  write_stderr("\nmmgen: stopped at once; the output being written was deleted\n");
  ::_exit(128 + signal_number);
}

}  // namespace

void install_stop_handlers() {
  static const bool installed = [] {
    struct sigaction action {};
    action.sa_handler = on_stop_signal;
    sigemptyset(&action.sa_mask);
    // SA_RESTART: a read or write that the signal interrupts goes on, so the output being written
    // when the first signal comes is finished and kept.
    action.sa_flags = SA_RESTART;
    sigaction(SIGINT, &action, nullptr);
    sigaction(SIGTERM, &action, nullptr);
    return true;
  }();
  (void)installed;
}

int stop_signal() {
  return requested_signal.load();
}

namespace {
std::atomic<bool> between_blocks{true};
// Read only when a stop is thrown, written as stages advance (never from the signal handler).
std::mutex stage_mutex;
std::string current_stage;

std::string stage() {
  std::lock_guard<std::mutex> lock(stage_mutex);
  return current_stage;
}
}  // namespace

void set_stop_stage(std::string stage) {
  std::lock_guard<std::mutex> lock(stage_mutex);
  current_stage = std::move(stage);
}

void stop_if_requested() {
  if (const int signal_number = requested_signal.load()) {
    const std::string now = stage();
    throw Interrupted{signal_number, now.empty() ? "" : "before " + now};
  }
}

void stop_between_blocks(const char* blocks) {
  if (!between_blocks.load(std::memory_order_relaxed)) return;
  if (const int signal_number = requested_signal.load()) {
    const std::string now = stage();
    throw Interrupted{signal_number, (now.empty() ? "" : "in " + now + ", ") + "between " + blocks};
  }
}

void set_stop_between_blocks(bool on) {
  between_blocks.store(on);
}

std::string signal_description(int signal_number) {
  if (signal_number == SIGINT) return "SIGINT (Ctrl-C)";
  if (signal_number == SIGTERM) return "SIGTERM";
  return "signal " + std::to_string(signal_number);
}

void set_partial_output(const std::string& path) {
  partial_path_valid.store(false);
  if (path.empty() || path.size() >= kPathCapacity) return;
  std::memcpy(partial_path, path.c_str(), path.size() + 1);
  partial_path_valid.store(true);
}

void reset_stop_request() {
  requested_signal.store(0);
}

}  // namespace mmgen
