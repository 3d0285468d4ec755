#include "core/cuda/download_queue_cuda.h"

#include "core/error.h"

namespace mmgen {

DownloadQueue::Impl::~Impl() {
  for (Slot& slot : slots) {
    if (slot.done) {
      cudaEventSynchronize(slot.done);  // a copy must land before its buffer is freed
      cudaEventDestroy(slot.done);
    }
  }
}

void DownloadQueue::Impl::drain(Slot& slot) {
  if (!slot.landed.defined()) return;
  MMGEN_CUDA_CHECK(cudaEventSynchronize(slot.done));
  const Tensor landed = std::move(slot.landed);
  auto consume = std::move(slot.consume);
  slot.landed = Tensor();
  consume(landed);
}

namespace cuda {

std::unique_ptr<DownloadQueue::Impl> make_download_queue(size_t max_bytes) {
  auto queue = std::make_unique<DownloadQueue::Impl>();
  for (auto& slot : queue->slots) {
    slot.host = std::make_shared<PinnedStorage>(max_bytes);
    MMGEN_CUDA_CHECK(cudaEventCreateWithFlags(&slot.done, cudaEventDisableTiming));
  }
  return queue;
}

void push_download(DownloadQueue::Impl& queue, const Tensor& values,
                   std::function<void(const Tensor& host)> consume) {
  auto& slot = queue.slots[queue.next];
  queue.drain(slot);  // the push before last: its buffer is needed again
  check(values.nbytes() <= slot.host->size(),
        "DownloadQueue: a tensor of {} bytes for buffers of {}", values.nbytes(),
        slot.host->size());
  MMGEN_CUDA_CHECK(cudaMemcpyAsync(slot.host->data(), values.raw(), values.nbytes(),
                                   cudaMemcpyDeviceToHost, nullptr));
  MMGEN_CUDA_CHECK(cudaEventRecord(slot.done, nullptr));
  slot.landed = Tensor::wrap(slot.host, 0, values.shape(), values.dtype());
  slot.consume = std::move(consume);
  queue.next = 1 - queue.next;
  queue.drain(queue.slots[queue.next]);  // the previous push: done by now or soon
}

void finish_downloads(DownloadQueue::Impl& queue) {
  queue.drain(queue.slots[queue.next]);
  queue.drain(queue.slots[1 - queue.next]);
}

}  // namespace cuda
}  // namespace mmgen
