// Progress of a stage (load, encode, denoising steps, VAE decode, write). On a terminal at info
// level a bar is redrawn in place on stderr; otherwise each update is a debug line. Either way
// finish() logs one info line per stage with its time and, for stages of several items, the mean
// per item ("denoise: 50 steps in 12.31 s, 0.246 s/step"), so logs and CI output stay short.
#pragma once

#include <chrono>
#include <string>

namespace mmgen {

class Progress {
 public:
  // `unit` names one item in the finish line ("step"); stages of one item print only the time.
  Progress(std::string label, int total, std::string unit = "item");
  // A stage left by an exception no longer names where a later stop happens.
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;
  // `done` items of `total` are complete.
  void update(int done);
  // The same, when the total is only known once the stage runs (tiles x frames).
  void update(int done, int total);
  // Ends the bar's line; logs the stage's time.
  void finish();
  double elapsed_seconds() const;

 private:
  // The item under way once `done` are complete, for a stop's message ("denoise step 3 of 20").
  std::string stage(int done) const;

  std::string label_;
  int total_;
  std::string unit_;
  bool terminal_;
  bool finished_ = false;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace mmgen
