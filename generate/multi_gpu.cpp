#include "generate/multi_gpu.h"

#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <mutex>
#include <string>
#include <thread>

#include "core/error.h"
#include "core/thread_placement.h"
#ifdef MMGEN_HAVE_CUDA
#include "core/cuda/nccl_communicator.h"
#endif

extern char** environ;

namespace mmgen::cli {
namespace {

#ifdef MMGEN_HAVE_CUDA
int env_int(const char* name) {
  const char* text = std::getenv(name);
  check(text != nullptr, "started rank: {} is not set", name);
  return std::atoi(text);
}

// This process's command line as it was started (/proc/self/cmdline).
std::vector<std::string> own_command_line() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  const std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> args;
  size_t start = 0;
  for (size_t i = 0; i < all.size(); ++i)
    if (all[i] == '\0') {
      args.push_back(all.substr(start, i - start));
      start = i + 1;
    }
  check(!args.empty(), "--gpus: cannot read this process's command line to start the other ranks");
  return args;
}

// Rank `rank`'s environment: this one's, with the rank's variables and its share of the CPUs
// (MMGEN_CPUS, taken in prepare_started_rank), its OpenMP threads left unplaced within it; how
// many threads each rank runs is run_resolved's, as for the leader.
std::vector<std::string> rank_environment(int rank, int world, const std::string& id,
                                          const std::vector<int>& cpus) {
  const auto ours = [](const std::string& entry) {
    for (const char* name : {"MMGEN_RANK=", "MMGEN_WORLD_SIZE=", "MMGEN_NCCL_ID=", "MMGEN_CPUS=",
                             "OMP_PROC_BIND=", "OMP_PLACES="})
      if (entry.rfind(name, 0) == 0) return true;
    return false;
  };
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e)
    if (!ours(*e)) env.emplace_back(*e);
  env.push_back("MMGEN_RANK=" + std::to_string(rank));
  env.push_back("MMGEN_WORLD_SIZE=" + std::to_string(world));
  env.push_back("MMGEN_NCCL_ID=" + id);
  env.push_back("MMGEN_CPUS=" + cpu_list(cpus));
  env.push_back("OMP_PROC_BIND=false");
  return env;
}

pid_t start_rank(const std::vector<std::string>& args, const std::vector<std::string>& env) {
  std::vector<char*> argv, envp;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const std::string& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  pid_t pid = 0;
  const int status =
      posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv.data(), envp.data());
  check(status == 0, "--gpus: could not start another rank of mmgen (error {})", status);
  return pid;
}
#endif

std::string exit_description(int status) {
  if (WIFEXITED(status)) return "exit code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "signal " + std::to_string(WTERMSIG(status));
  return "status " + std::to_string(status);
}

}  // namespace

bool is_started_rank() {
  return std::getenv("MMGEN_RANK") != nullptr;
}

void prepare_started_rank() {
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() == 1) std::_Exit(1);  // the leader is gone already
  // Its share of the CPUs, before any thread starts (OpenMP's, NCCL's, CUDA's inherit it).
  if (const char* cpus = std::getenv("MMGEN_CPUS")) run_on(parse_cpu_list(cpus));
#ifdef MMGEN_HAVE_CUDA
  cuda::use_cuda_device(env_int("MMGEN_RANK"));
#endif
}

// Watches the started ranks from a thread of the leader: the first that ends badly ends the run
// (a rank left alone would wait in its next collective for ever).
struct RankProcesses::Watch {
  std::atomic<bool> stop{false};
  std::mutex mutex;
  std::vector<bool> done;
  std::thread thread;
};

RankProcesses::RankProcesses(std::vector<pid_t> pids)
    : pids_(std::move(pids)), watch_(std::make_unique<Watch>()) {
  watch_->done.assign(pids_.size(), false);
  watch_->thread = std::thread([this] {
    while (!watch_->stop) {
      {
        std::lock_guard lock(watch_->mutex);
        for (size_t i = 0; i < pids_.size(); ++i) {
          if (watch_->done[i]) continue;
          int status = 0;
          if (waitpid(pids_[i], &status, WNOHANG) != pids_[i]) continue;
          watch_->done[i] = true;
          if (WIFEXITED(status) && WEXITSTATUS(status) == 0) continue;
          std::fprintf(stderr,
                       "mmgen: error: rank %zu of the run stopped (%s); stopping the others\n",
                       i + 1, exit_description(status).c_str());
          for (size_t j = 0; j < pids_.size(); ++j)
            if (!watch_->done[j]) kill(pids_[j], SIGTERM);
          std::_Exit(1);
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
}

RankProcesses::~RankProcesses() {
  watch_->stop = true;
  if (watch_->thread.joinable()) watch_->thread.join();
  for (size_t i = 0; i < pids_.size(); ++i)
    if (!watch_->done[i]) {
      kill(pids_[i], SIGTERM);
      waitpid(pids_[i], nullptr, 0);
    }
}

bool RankProcesses::wait_all() {
  watch_->stop = true;
  if (watch_->thread.joinable()) watch_->thread.join();
  bool ok = true;
  for (size_t i = 0; i < pids_.size(); ++i) {
    if (watch_->done[i]) continue;
    int status = 0;
    waitpid(pids_[i], &status, 0);
    watch_->done[i] = true;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) continue;
    std::fprintf(stderr, "mmgen: error: rank %zu of the run ended with %s\n", i + 1,
                 exit_description(status).c_str());
    ok = false;
  }
  return ok;
}

JoinedRanks join_ranks(const Request& request, const PipelineSpec& pipeline) {
  const int world = int(request.gpus);
  check(pipeline.parallel.sequence,
        "--gpus {}: {} runs on one GPU so far (sequence parallel is built for {}); drop --gpus",
        world, pipeline.class_name,
        pipelines_where([](const PipelineSpec& spec) { return spec.parallel.sequence; }));
  check(!request.cfg_parallel || pipeline.parallel.cfg,
        "--cfg-parallel: built for {} so far ({} runs its guidance items on every GPU with --gpus "
        "alone); drop --cfg-parallel",
        pipelines_where([](const PipelineSpec& spec) { return spec.parallel.cfg; }),
        pipeline.class_name);
  ParallelLayout layout{world, request.cfg_parallel ? 2 : 1};
  layout.validate();
#ifndef MMGEN_HAVE_CUDA
  fail("--gpus {}: this build has no CUDA support; rebuild with -DMMGEN_CUDA=ON", world);
#else
  check(cuda::nccl_available(),
        "--gpus {}: this build has no NCCL; install it (libnccl-dev, or set NCCL_HOME) and rebuild "
        "with -DMMGEN_CUDA=ON",
        world);
  JoinedRanks joined;
  int rank = 0;
  std::string id;
  if (is_started_rank()) {
    rank = env_int("MMGEN_RANK");
    check(env_int("MMGEN_WORLD_SIZE") == world && rank > 0 && rank < world,
          "started rank {}: MMGEN_WORLD_SIZE {} but --gpus {}", rank, env_int("MMGEN_WORLD_SIZE"),
          world);
    const char* text = std::getenv("MMGEN_NCCL_ID");
    check(text != nullptr, "started rank {}: MMGEN_NCCL_ID is not set", rank);
    id = text;
  } else {
    const int visible = cuda::cuda_device_count();
    check(visible >= world,
          "--gpus {}: this machine shows {} GPU(s) (CUDA_VISIBLE_DEVICES may hide some); pass "
          "--gpus {} or fewer",
          world, visible, visible);
    cuda::use_cuda_device(0);
    // Every rank gets its own share of the CPUs: the leader takes the first before it starts
    // anything (the ranks, NCCL's threads), which would otherwise inherit the one core OpenMP's
    // placement pinned its main thread to.
    const std::vector<std::vector<int> > shares = share_cpus(permitted_cpus(), world);
    run_on(shares[0]);
    id = cuda::new_nccl_unique_id();
    // The others run this command line with the leader's seed (a --seed -1 draw must not
    // differ between ranks); a flag given twice takes its last value.
    std::vector<std::string> args = own_command_line();
    args.push_back("--seed");
    args.push_back(std::to_string(request.seed));
    std::vector<pid_t> pids;
    for (int r = 1; r < world; ++r)
      pids.push_back(start_rank(args, rank_environment(r, world, id, shares[size_t(r)])));
    joined.others = std::make_unique<RankProcesses>(std::move(pids));
  }
  auto run = std::make_shared<ParallelRun>();
  run->layout = layout;
  run->world = cuda::nccl_communicator(id, rank, world);
  if (layout.sequence_degree() > 1)
    run->sequence = cuda::split_nccl_communicator(*run->world, layout.branch_of(rank), rank);
  if (layout.cfg_degree == 2)
    run->guidance = cuda::split_nccl_communicator(*run->world, layout.sequence_rank_of(rank), rank);
  joined.run = run;
  return joined;
#endif
}

}  // namespace mmgen::cli
