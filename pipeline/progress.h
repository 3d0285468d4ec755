// Progress of a long stage (denoising steps, VAE decode): a bar redrawn in place on stderr when
// stderr is a terminal, plain log lines otherwise (so logs and CI output stay readable).
#pragma once

#include <chrono>
#include <string>

namespace mmgen {

class Progress {
 public:
  Progress(std::string label, int total);
  // `done` items of `total` are complete.
  void update(int done);
  // Ends the bar's line; logs the stage's total time.
  void finish();
  double elapsed_seconds() const;

 private:
  std::string label_;
  int total_;
  bool terminal_;
  bool finished_ = false;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace mmgen
