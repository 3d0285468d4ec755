// Collective communication between the ranks of one generation spread over several devices
// (sequence parallel and classifier-free-guidance parallel, pipeline/parallel_run.h). The model
// and the pipeline speak this interface only; two implementations stand behind it: ranks that are
// threads of one process (core/thread_communicator.h: the CPU tests hold the sharding to the
// single-device result with it) and NCCL, one process per GPU (core/cuda/nccl_communicator.h).
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace mmgen::dist {

// How a sequence of `total` rows splits over `parts` ranks, in rank order: balanced, the first
// total % parts ranks one row longer (a latent grid need not divide by the rank count).
struct SequenceShards {
  std::vector<int64_t> sizes, offsets;

  static SequenceShards balanced(int64_t total, int parts);
  int parts() const { return int(sizes.size()); }
  int64_t total() const { return offsets.empty() ? 0 : offsets.back() + sizes.back(); }
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Every rank sends send[j] to rank j and receives rank i's send[rank()] into recv[i]: contiguous
  // tensors, each recv[i] as many bytes as rank i sends this rank. send[rank()] is copied here.
  // Tensors live on the communicator's device (NCCL also takes host tensors and stages them).
  virtual void all_to_all(const std::vector<Tensor>& send, const std::vector<Tensor>& recv) = 0;
  // `data` of rank `root` into `data` of every rank (same byte count everywhere), in place.
  virtual void broadcast(const Tensor& data, int root) = 0;

  // Every rank's `mine` into out[i] of every rank (ranks may send different sizes).
  void all_gather(const Tensor& mine, const std::vector<Tensor>& out) {
    all_to_all(std::vector<Tensor>(size_t(size()), mine), out);
  }
};

// Checks a collective's tensors: `count` of them, contiguous, and names the call when not.
void check_collective(const std::vector<Tensor>& tensors, int count, const char* what);

}  // namespace mmgen::dist
