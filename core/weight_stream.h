// Weights that live in page-locked host memory and visit the GPU a group at a time (a
// transformer's block): while the GPU computes with one group, the next is copied in on a second
// stream, into the other of two device slots, so the copy hides behind the compute. The GPU
// then holds two groups instead of all of them: how a model larger than the GPU's memory runs
// there (diffusers' sequential offload and SGLang's DiT offload do the same with one group).
//
// The groups are visited in any order, each acquire() followed by its release() once the work
// that reads it has been queued; acquire(g) also starts copying group g + 1 (the order a forward
// goes), so a forward's groups arrive ahead of their use, and the first group of the next
// forward after its last.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/tensor.h"

namespace mmgen {

class WeightStream {
 public:
  WeightStream();  // needs a CUDA build; refused in one line otherwise
  ~WeightStream();
  WeightStream(const WeightStream&) = delete;
  WeightStream& operator=(const WeightStream&) = delete;

  // Copies `tensors` (contiguous, on the host or the GPU, any dtype; undefined ones stay
  // undefined) into page-locked host memory as the next group. Every group before the first
  // acquire(); the slots are sized to the largest.
  void add_group(const std::vector<Tensor>& tensors);
  int64_t groups() const;

  // The tensors of `group`, as added, on the GPU: the GPU's stream waits for their copy (the host
  // does not). They stay valid until release(group).
  std::vector<Tensor> acquire(int64_t group);
  // The work that reads `group` has been queued: its slot may be refilled after that work.
  void release(int64_t group);

  // The largest group as laid out (each tensor from a 256-byte boundary): a slot's bytes.
  size_t slot_size() const;

  struct Impl;  // streams, events, buffers (core/cuda/weight_stream_cuda.cpp)

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace mmgen
