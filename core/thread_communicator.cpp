#include "core/thread_communicator.h"

#include <fmt/format.h>

#include <cstring>
#include <string>

#include "core/error.h"

namespace mmgen::dist {

class ThreadMember final : public Communicator {
 public:
  ThreadMember(ThreadGroup& group, int rank) : group_(group), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return group_.size_; }

  void all_to_all(const std::vector<Tensor>& send, const std::vector<Tensor>& recv) override {
    check_collective(send, size(), "all_to_all (send)");
    check_collective(recv, size(), "all_to_all (recv)");
    for (const auto* list : {&send, &recv})
      for (const Tensor& t : *list)
        check(t.is_cpu(), "thread communicator: host tensors only (a GPU run uses NCCL)");
    group_.posted_[size_t(rank_)] = &send;
    group_.arrive_and_wait();  // every rank's send list is posted
    // A size mismatch is reported after the second barrier: the other ranks' tensors must stay
    // alive until every rank has finished reading them.
    std::string problem;
    for (int i = 0; i < size() && problem.empty(); ++i) {
      const Tensor& from = (*group_.posted_[size_t(i)])[size_t(rank_)];
      const Tensor& to = recv[size_t(i)];
      if (from.nbytes() != to.nbytes())
        problem = fmt::format("all_to_all: rank {} sends {} bytes to rank {}, which expects {}", i,
                              from.nbytes(), rank_, to.nbytes());
      else if (to.nbytes())
        std::memcpy(to.raw(), from.raw(), to.nbytes());
    }
    group_.arrive_and_wait();  // every rank has read: the senders may reuse their tensors
    check(problem.empty(), "{}", problem);
  }

  void broadcast(const Tensor& data, int root) override {
    check(root >= 0 && root < size(), "broadcast: root {} of {} ranks", root, size());
    check(data.is_cpu(), "thread communicator: host tensors only (a GPU run uses NCCL)");
    const std::vector<Tensor> mine{data};
    group_.posted_[size_t(rank_)] = &mine;
    group_.arrive_and_wait();
    const Tensor& from = (*group_.posted_[size_t(root)])[0];
    const bool fits = from.nbytes() == data.nbytes();
    if (fits && rank_ != root && data.nbytes()) std::memcpy(data.raw(), from.raw(), data.nbytes());
    const size_t root_bytes = from.nbytes();
    group_.arrive_and_wait();
    check(fits, "broadcast: rank {} has {} bytes, the root {}", rank_, data.nbytes(), root_bytes);
  }

 private:
  ThreadGroup& group_;
  int rank_;
};

ThreadGroup::ThreadGroup(int size) : size_(size), posted_(size_t(size), nullptr) {
  check(size >= 1, "thread group of {} ranks", size);
}

std::unique_ptr<Communicator> ThreadGroup::member(int rank) {
  check(rank >= 0 && rank < size_, "rank {} of a group of {}", rank, size_);
  return std::make_unique<ThreadMember>(*this, rank);
}

void ThreadGroup::abort() {
  std::lock_guard lock(mutex_);
  aborted_ = true;
  changed_.notify_all();
}

void ThreadGroup::arrive_and_wait() {
  std::unique_lock lock(mutex_);
  check(!aborted_, "collective: another rank failed");
  const int64_t generation = generation_;
  if (++arrived_ == size_) {
    arrived_ = 0;
    ++generation_;
    changed_.notify_all();
    return;
  }
  changed_.wait(lock, [&] { return generation_ != generation || aborted_; });
  check(generation_ != generation, "collective: another rank failed");
}

}  // namespace mmgen::dist
