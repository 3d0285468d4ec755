#include "pipeline/progress.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdio>

namespace mmgen {

Progress::Progress(std::string label, int total)
    : label_(std::move(label)),
      total_(total),
      terminal_(::isatty(STDERR_FILENO) && spdlog::get_level() <= spdlog::level::info),
      start_(std::chrono::steady_clock::now()) {}

double Progress::elapsed_seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void Progress::update(int done) {
  const double seconds = elapsed_seconds();
  const double per_item = done > 0 ? seconds / done : 0;
  if (!terminal_) {
    spdlog::info("{} {}/{} ({:.2f} s/it)", label_, done, total_, per_item);
    return;
  }
  constexpr int kWidth = 30;
  const int filled = total_ > 0 ? done * kWidth / total_ : kWidth;
  std::string bar(size_t(filled), '#');
  bar.resize(kWidth, ' ');
  const double remaining = per_item * (total_ - done);
  std::fprintf(stderr, "\r%s [%s] %d/%d  %.2f s/it  %.0fs left ", label_.c_str(), bar.c_str(), done,
               total_, per_item, remaining);
  std::fflush(stderr);
}

void Progress::finish() {
  if (finished_) return;
  finished_ = true;
  if (terminal_) std::fprintf(stderr, "\n");
  spdlog::info("{} done in {:.2f} s", label_, elapsed_seconds());
}

}  // namespace mmgen
