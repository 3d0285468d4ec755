// The GPU half of core/download_queue.h: two page-locked buffers, each with the event of the copy
// into it and the consumer waiting for it.
#pragma once

#include <cuda_runtime.h>

#include <functional>
#include <memory>

#include "core/cuda/cuda_check.h"
#include "core/cuda/pinned_storage.h"
#include "core/download_queue.h"

namespace mmgen {

struct DownloadQueue::Impl {
  struct Slot {
    std::shared_ptr<cuda::PinnedStorage> host;
    cudaEvent_t done = nullptr;
    Tensor landed;  // the host view of the copy in flight; undefined when the slot is free
    std::function<void(const Tensor&)> consume;
  };
  Slot slots[2];
  int next = 0;

  Impl() = default;
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;
  ~Impl();
  // Waits for the slot's copy and hands it to its consumer.
  void drain(Slot& slot);
};

namespace cuda {

std::unique_ptr<DownloadQueue::Impl> make_download_queue(size_t max_bytes);
void push_download(DownloadQueue::Impl& queue, const Tensor& values,
                   std::function<void(const Tensor& host)> consume);
void finish_downloads(DownloadQueue::Impl& queue);

}  // namespace cuda
}  // namespace mmgen
