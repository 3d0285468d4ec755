#include "core/download_queue.h"

#include "core/error.h"
#ifdef MMGEN_HAVE_CUDA
#include "core/cuda/download_queue_cuda.h"
#endif

namespace mmgen {

#ifndef MMGEN_HAVE_CUDA
struct DownloadQueue::Impl {};
#endif

DownloadQueue::DownloadQueue(Device device, size_t max_bytes) : device_(device) {
  if (device == Device::CPU) return;
#ifdef MMGEN_HAVE_CUDA
  impl_ = cuda::make_download_queue(max_bytes);
#else
  fail("DownloadQueue: this build has no CUDA, so no tensor can live on the GPU");
#endif
}

DownloadQueue::~DownloadQueue() = default;

void DownloadQueue::push(const Tensor& values, std::function<void(const Tensor& host)> consume) {
  check(values.device() == device_ && values.is_contiguous(),
        "DownloadQueue: expects contiguous tensors on the {}, got one on the {}",
        device_name(device_), device_name(values.device()));
  if (device_ == Device::CPU) return consume(values);
#ifdef MMGEN_HAVE_CUDA
  cuda::push_download(*impl_, values, std::move(consume));
#endif
}

void DownloadQueue::finish() {
#ifdef MMGEN_HAVE_CUDA
  if (impl_) cuda::finish_downloads(*impl_);
#endif
}

}  // namespace mmgen
