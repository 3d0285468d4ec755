// Ctrl-C and SIGTERM end a generate run after the current block: exit 128 + signal, one line saying
// what was kept, finished outputs of a batch kept, nothing partial left behind.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "tests/test_support.h"

namespace mmgen {
namespace {

namespace fs = std::filesystem;

// A running mmgen whose stderr is read line by line.
class RunningMmgen {
 public:
  // `preload`: a library for LD_PRELOAD in mmgen's environment (none when empty).
  explicit RunningMmgen(const std::vector<std::string>& arguments,
                        const std::string& preload = "") {
    int pipe_fds[2];
    if (::pipe(pipe_fds) != 0) throw std::runtime_error("pipe failed");
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(pipe_fds[1], STDERR_FILENO);
      ::close(pipe_fds[0]);
      ::close(pipe_fds[1]);
      if (!preload.empty()) {
        ::setenv("LD_PRELOAD", preload.c_str(), 1);
        // Under the sanitizers' run (GCC's dynamic ASan runtime) a preloaded library comes first;
        // the run's other options (its report files) stay.
        const char* options = std::getenv("ASAN_OPTIONS");
        const std::string asan = std::string(options ? options : "") +
                                 (options && *options ? ":" : "") + "verify_asan_link_order=0";
        ::setenv("ASAN_OPTIONS", asan.c_str(), 1);
      }
      const std::string binary = testing::mmgen_binary().string();
      std::vector<char*> argv = {const_cast<char*>(binary.c_str())};
      for (const auto& argument : arguments) argv.push_back(const_cast<char*>(argument.c_str()));
      argv.push_back(nullptr);
      ::execv(binary.c_str(), argv.data());
      ::_exit(127);
    }
    ::close(pipe_fds[1]);
    err_ = ::fdopen(pipe_fds[0], "r");
  }
  ~RunningMmgen() {
    if (pid_ > 0 && !waited_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (err_) std::fclose(err_);
  }

  // Reads stderr until a line contains `text`; false at end of output.
  bool wait_for_line(const std::string& text) {
    char buffer[4096];
    while (std::fgets(buffer, sizeof buffer, err_)) {
      all_ += buffer;
      if (std::string(buffer).find(text) != std::string::npos) return true;
    }
    return false;
  }
  void send(int signal_number) { ::kill(pid_, signal_number); }

  // Reads the rest of stderr and returns the exit code (-1 when killed by a signal).
  int wait() {
    char buffer[4096];
    while (std::fgets(buffer, sizeof buffer, err_)) all_ += buffer;
    int status = 0;
    ::waitpid(pid_, &status, 0);
    waited_ = true;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  const std::string& err() const { return all_; }
  std::string last_line() const {
    const size_t end = all_.find_last_not_of('\n');
    const size_t start = all_.rfind('\n', end);
    return all_.substr(start == std::string::npos ? 0 : start + 1, end - start);
  }

 private:
  pid_t pid_ = -1;
  bool waited_ = false;
  FILE* err_ = nullptr;
  std::string all_;
};

std::vector<std::string> files_in(const fs::path& folder) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(folder))
    names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

std::string file_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// wan-tiny with many steps, so that a run lasts long enough to be interrupted.
std::vector<std::string> long_run(const fs::path& out, const std::string& steps) {
  return {"generate",
          "--model-path",
          (testing::source_dir() / "examples/models/wan-tiny").string(),
          "--height",
          "32",
          "--width",
          "48",
          "--num-frames",
          "1",
          "--num-inference-steps",
          steps,
          "--output-format",
          "npy",
          "--output-path",
          out.string(),
          "--log-level",
          "debug"};
}

TEST(Interrupt, CtrlCStopsAtAStepBoundaryAndLeavesNothing) {
  const fs::path out = testing::scratch_dir("interrupt-single");
  std::vector<std::string> arguments = long_run(out, "5000");
  arguments.insert(arguments.end(), {"--prompt", "a red fox"});
  RunningMmgen run(arguments);
  ASSERT_TRUE(run.wait_for_line("denoise 2/")) << run.err();
  run.send(SIGINT);
  EXPECT_EQ(run.wait(), 130) << run.err();
  EXPECT_NE(run.err().find("stopping after the current block"), std::string::npos) << run.err();
  EXPECT_NE(run.last_line().find("stopped by SIGINT (Ctrl-C) "), std::string::npos)
      << run.last_line();
  EXPECT_NE(run.last_line().find("denoise step"), std::string::npos) << run.last_line();
  EXPECT_NE(run.last_line().find("; nothing was written"), std::string::npos) << run.last_line();
  EXPECT_TRUE(files_in(out).empty()) << ::testing::PrintToString(files_in(out));
}

// A stop waits for one transformer block, not for the step: SIGINT while step 2 of 2 runs (a
// step of several seconds: wan-shapes at 1024x1024) stops inside it, and the last line says where.
// Were the stop taken only at step boundaries, step 2 would finish and the run would stop before
// the decode instead.
TEST(Interrupt, CtrlCStopsBetweenTransformerBlocksNotAtTheEndOfTheStep) {
  const fs::path out = testing::scratch_dir("interrupt-between-blocks");
  RunningMmgen run({"generate", "--model-path",
                    (testing::source_dir() / "examples/models/wan-shapes").string(), "--prompt",
                    "a red circle on a blue background", "--height", "1024", "--width", "1024",
                    "--num-inference-steps", "2", "--output-format", "npy", "--output-path",
                    out.string(), "--log-level", "debug"});
  ASSERT_TRUE(run.wait_for_line("denoise 1/2")) << run.err();
  // Past the scheduler's step and into the next forward (which takes seconds).
  ::usleep(300'000);
  run.send(SIGINT);
  EXPECT_EQ(run.wait(), 130) << run.err();
  EXPECT_NE(run.last_line().find("stopped by SIGINT (Ctrl-C) in denoise step 2 of 2, between "
                                 "transformer blocks; nothing was written"),
            std::string::npos)
      << run.last_line();
  EXPECT_TRUE(files_in(out).empty()) << ::testing::PrintToString(files_in(out));
}

TEST(Interrupt, SigtermKeepsTheFinishedOutputsOfABatch) {
  const fs::path out = testing::scratch_dir("interrupt-batch");
  const fs::path prompts = out.parent_path() / "interrupt-batch-prompts.txt";
  std::ofstream(prompts) << "first prompt\nsecond prompt\nthird prompt\n";
  std::vector<std::string> arguments = long_run(out, "150");
  arguments.insert(arguments.end(),
                   {"--prompt-file-path", prompts.string(), "--output-file-name", "batch.npy"});
  RunningMmgen run(arguments);
  ASSERT_TRUE(run.wait_for_line("wrote ")) << run.err();
  run.send(SIGTERM);
  EXPECT_EQ(run.wait(), 143) << run.err();
  // Where it stopped depends on when the signal came (a step, or between prompts).
  EXPECT_NE(run.last_line().find("stopped by SIGTERM"), std::string::npos) << run.last_line();
  EXPECT_NE(run.last_line().find("; kept "), std::string::npos) << run.last_line();
  EXPECT_NE(run.last_line().find((out / "batch_0.npy").string()), std::string::npos)
      << run.last_line();
  // The first prompt's output, whole (its settings sidecar too, where the format has one), and
  // nothing of the second.
  const std::vector<std::string> files = files_in(out);
  ASSERT_FALSE(files.empty());
  for (const auto& name : files) EXPECT_EQ(name.rfind("batch_0", 0), 0u) << name;
}

// A SIGTERM at the last moment of the only output's write (after its bytes, before its name):
// the file is finished, so it is kept, and the run still says it was stopped (exit 143), not 0.
TEST(Interrupt, SigtermDuringTheLastWriteKeepsTheFileAndSaysSo) {
  const fs::path out = testing::scratch_dir("interrupt-last-write");
  std::vector<std::string> arguments = long_run(out, "2");
  arguments.insert(arguments.end(), {"--prompt", "a red fox", "--output-file-name", "last.npy"});
  RunningMmgen run(arguments, MMGEN_SIGTERM_AT_RENAME);
  EXPECT_EQ(run.wait(), 143) << run.err();
  // No stage is under way while the output is written: the line names none.
  EXPECT_NE(run.last_line().find("stopped by SIGTERM; kept "), std::string::npos)
      << run.last_line();
  EXPECT_NE(run.last_line().find((out / "last.npy").string()), std::string::npos)
      << run.last_line();
  EXPECT_EQ(run.err().find("done: "), std::string::npos) << run.err();
  const std::vector<std::string> files = files_in(out);
  EXPECT_EQ(std::count(files.begin(), files.end(), "last.npy"), 1)
      << ::testing::PrintToString(files);
  for (const auto& name : files) EXPECT_EQ(name.find(".partial-"), std::string::npos) << name;
  // The kept file is whole: byte for byte what the same run writes when nothing stops it.
  const fs::path again = testing::scratch_dir("interrupt-last-write-unstopped");
  arguments = long_run(again, "2");
  arguments.insert(arguments.end(), {"--prompt", "a red fox", "--output-file-name", "last.npy"});
  RunningMmgen unstopped(arguments);
  ASSERT_EQ(unstopped.wait(), 0) << unstopped.err();
  EXPECT_EQ(file_bytes(out / "last.npy"), file_bytes(again / "last.npy"));
}

}  // namespace
}  // namespace mmgen
