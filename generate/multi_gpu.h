// `mmgen generate --gpus N`: one process per GPU. The process the user started is rank 0 (the
// leader): it makes an NCCL unique id and starts ranks 1..N-1 as copies of itself (the same
// command line, its resolved seed, MMGEN_RANK / MMGEN_WORLD_SIZE / MMGEN_NCCL_ID in their
// environment). Each rank takes GPU `rank`, joins the NCCL group and splits it into the
// sequence and guidance groups of pipeline/parallel_run.h. A rank that fails ends the run: the
// leader watches the others and stops them all, and the others die with the leader.
//
// Several hosts (not built yet): the same ranks with the id sent over TCP from the leader's
// address instead of the environment (torchrun's rendezvous), GPU = local rank; the
// communicators and the model code do not change (docs/usage.md, "Several GPUs").
#pragma once

#include <sys/types.h>

#include <memory>
#include <vector>

#include "pipeline/parallel_run.h"
#include "pipeline/registry.h"
#include "pipeline/request.h"

namespace mmgen::cli {

// True in a rank the leader started (MMGEN_RANK is set).
bool is_started_rank();
// A started rank: its GPU, before any other CUDA call; and it dies with the leader.
void prepare_started_rank();

// The ranks the leader started; stops those still running when destroyed.
class RankProcesses {
 public:
  explicit RankProcesses(std::vector<pid_t> pids);
  ~RankProcesses();
  RankProcesses(const RankProcesses&) = delete;
  RankProcesses& operator=(const RankProcesses&) = delete;
  // Waits for every rank; true when all finished with exit code 0 (each failure is reported).
  bool wait_all();

 private:
  struct Watch;
  std::vector<pid_t> pids_;
  std::unique_ptr<Watch> watch_;
};

struct JoinedRanks {
  std::shared_ptr<ParallelRun> run;
  std::unique_ptr<RankProcesses> others;  // the leader's; null elsewhere
};

// Every rank, with its resolved request (request.gpus > 1): the leader starts the others, then
// all join the groups. Refuses what cannot run (too few GPUs, no NCCL) in one line first.
JoinedRanks join_ranks(const Request& request, const PipelineSpec& pipeline);

}  // namespace mmgen::cli
