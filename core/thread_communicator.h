// Ranks as threads of one process, host tensors: the communicator the CPU tests run the sharded
// model and pipeline with, so the sequence- and CFG-parallel code is checked in CI against the
// single-device result without a GPU. Every rank calls the collectives in the same order, as
// with NCCL. A rank that fails calls abort(): the others stop waiting and throw too.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <vector>

#include "core/communicator.h"

namespace mmgen::dist {

class ThreadGroup {
 public:
  explicit ThreadGroup(int size);
  // The communicator of rank `rank` (0 <= rank < size); each rank's thread uses its own.
  std::unique_ptr<Communicator> member(int rank);
  // Wakes every rank waiting in a collective, which then throws; later collectives throw too.
  void abort();

 private:
  friend class ThreadMember;
  // Blocks until every rank has arrived (or the group is aborted: throws).
  void arrive_and_wait();

  int size_;
  std::mutex mutex_;
  std::condition_variable changed_;
  int arrived_ = 0;
  int64_t generation_ = 0;
  bool aborted_ = false;
  // What each rank posted for the collective in progress.
  std::vector<const std::vector<Tensor>*> posted_;
};

}  // namespace mmgen::dist
