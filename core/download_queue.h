// Brings results back to the host while the device goes on working: how a decoder streams its
// chunks into a video in host memory. On the GPU each pushed tensor is copied asynchronously into
// one of two page-locked buffers, and `consume` runs once its copy has landed (at the next push but
// one, or at finish()), so the host's work on one chunk overlaps the device's on the next. On the
// CPU `consume` runs at once on the tensor itself.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>

#include "core/tensor.h"

namespace mmgen {

class DownloadQueue {
 public:
  // `max_bytes`: the largest tensor that will be pushed (the pinned buffers' size).
  DownloadQueue(Device device, size_t max_bytes);
  ~DownloadQueue();
  DownloadQueue(const DownloadQueue&) = delete;
  DownloadQueue& operator=(const DownloadQueue&) = delete;

  // `values`: contiguous, on the queue's device. `consume` gets a host tensor of the same shape
  // and dtype, valid during the call.
  void push(const Tensor& values, std::function<void(const Tensor& host)> consume);
  // Runs every pending `consume`.
  void finish();

  struct Impl;  // the GPU's buffers and events (core/cuda/download_queue_cuda.cpp)

 private:
  Device device_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mmgen
