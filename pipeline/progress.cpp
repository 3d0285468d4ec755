#include "pipeline/progress.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdio>

#include "core/interrupt.h"

namespace mmgen {

Progress::Progress(std::string label, int total, std::string unit)
    : label_(std::move(label)),
      total_(total),
      unit_(std::move(unit)),
      terminal_(::isatty(STDERR_FILENO) && spdlog::get_level() <= spdlog::level::info),
      start_(std::chrono::steady_clock::now()) {
  set_stop_stage(stage(0));
}

Progress::~Progress() {
  if (!finished_) set_stop_stage("");
}

std::string Progress::stage(int done) const {
  if (unit_ == "item" || done >= total_) return label_;
  return label_ + " " + unit_ + " " + std::to_string(done + 1) + " of " + std::to_string(total_);
}

double Progress::elapsed_seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void Progress::update(int done, int total) {
  total_ = total;
  update(done);
}

void Progress::update(int done) {
  set_stop_stage(stage(done));
  const double seconds = elapsed_seconds();
  const double per_item = done > 0 ? seconds / done : 0;
  if (!terminal_) {
    spdlog::debug("{} {}/{} ({:.3f} s/{})", label_, done, total_, per_item, unit_);
    return;
  }
  constexpr int kWidth = 30;
  const int filled = total_ > 0 ? done * kWidth / total_ : kWidth;
  std::string bar(size_t(filled), '#');
  bar.resize(kWidth, ' ');
  const double remaining = per_item * (total_ - done);
  std::fprintf(stderr, "\r%s [%s] %d/%d  %.2f s/%s  %.0fs left ", label_.c_str(), bar.c_str(), done,
               total_, per_item, unit_.c_str(), remaining);
  std::fflush(stderr);
}

void Progress::finish() {
  if (finished_) return;
  finished_ = true;
  set_stop_stage("");
  if (terminal_) std::fprintf(stderr, "\r\033[K");  // the bar gives way to the summary line
  const double seconds = elapsed_seconds();
  if (total_ > 1)
    spdlog::info("{}: {} {}s in {:.3f} s, {:.3f} s/{}", label_, total_, unit_, seconds,
                 seconds / total_, unit_);
  else
    spdlog::info("{}: {:.3f} s", label_, seconds);
}

}  // namespace mmgen
