// The GPU half of core/weight_stream.h: page-locked groups, two device slots, a copy stream that
// does not synchronize with the legacy default stream every op runs on, and per slot the events
// "its copy landed" (the compute waits for it) and "the compute is done with it" (the next copy
// into it waits for it).
#include <cuda_runtime.h>

#include <array>
#include <cstring>

#include "core/cuda/cuda_check.h"
#include "core/cuda/device_storage.h"
#include "core/cuda/pinned_storage.h"
#include "core/error.h"
#include "core/low_rank.h"
#include "core/weight_stream.h"

namespace mmgen {
namespace {

// The layout add_group gives a group: each tensor from a 256-byte boundary, as the GPU's
// allocator aligns them.
size_t slot_bytes(const std::vector<Tensor>& tensors) {
  size_t bytes = 0;
  for (const Tensor& t : tensors)
    if (t.defined()) bytes = (bytes + 255) / 256 * 256 + t.nbytes();
  return bytes;
}

}  // namespace

struct WeightStream::Impl {
  struct Entry {
    Shape shape;
    DType dtype = DType::F32;
    size_t offset = 0;
    bool defined = false;
    // A LoRA's update in the runtime mode (core/low_rank.h): small, resident on the GPU, put
    // back on the tensor at each visit.
    std::shared_ptr<const LowRankUpdate> low_rank;
  };
  struct Group {
    std::shared_ptr<cuda::PinnedStorage> host;
    std::vector<Entry> entries;
  };
  std::vector<Group> groups;
  size_t slot_size = 0;
  std::array<std::shared_ptr<Storage>, 2> slots;
  std::array<int64_t, 2> holds{-1, -1};  // the group copied (or being copied) into each slot
  std::array<cudaEvent_t, 2> landed{}, done{};
  int current = 0;  // the slot the next acquire uses
  bool acquired = false;
  cudaStream_t copies = nullptr;

  Impl() {
    MMGEN_CUDA_CHECK(cudaStreamCreateWithFlags(&copies, cudaStreamNonBlocking));
    for (int s = 0; s < 2; ++s) {
      MMGEN_CUDA_CHECK(cudaEventCreateWithFlags(&landed[size_t(s)], cudaEventDisableTiming));
      MMGEN_CUDA_CHECK(cudaEventCreateWithFlags(&done[size_t(s)], cudaEventDisableTiming));
    }
  }
  ~Impl() {
    // A copy in flight reads a page-locked group and writes a slot: it lands before either goes,
    // and so does the compute that reads the slots.
    if (copies) cudaStreamSynchronize(copies);
    cudaDeviceSynchronize();
    for (int s = 0; s < 2; ++s) {
      if (landed[size_t(s)]) cudaEventDestroy(landed[size_t(s)]);
      if (done[size_t(s)]) cudaEventDestroy(done[size_t(s)]);
    }
    if (copies) cudaStreamDestroy(copies);
  }
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  // Copies `group` into `slot` on the copy stream, after the compute is done with what the slot
  // held.
  void fill(int slot, int64_t group) {
    const Group& g = groups[size_t(group)];
    MMGEN_CUDA_CHECK(cudaStreamWaitEvent(copies, done[size_t(slot)], 0));
    MMGEN_CUDA_CHECK(cudaMemcpyAsync(slots[size_t(slot)]->data(), g.host->data(), g.host->size(),
                                     cudaMemcpyHostToDevice, copies));
    MMGEN_CUDA_CHECK(cudaEventRecord(landed[size_t(slot)], copies));
    holds[size_t(slot)] = group;
  }
};

WeightStream::WeightStream() : impl_(std::make_unique<Impl>()) {}
WeightStream::~WeightStream() = default;

void WeightStream::add_group(const std::vector<Tensor>& tensors) {
  check(!impl_->acquired, "WeightStream: groups are added before the first acquire");
  Impl::Group group;
  const size_t bytes = slot_bytes(tensors);
  group.host = std::make_shared<cuda::PinnedStorage>(bytes);
  size_t offset = 0;
  for (const Tensor& t : tensors) {
    Impl::Entry entry;
    entry.defined = t.defined();
    if (entry.defined) {
      check(t.is_contiguous(), "WeightStream: a strided {} tensor", shape_string(t.shape()));
      offset = (offset + 255) / 256 * 256;
      entry.shape = t.shape();
      entry.dtype = t.dtype();
      entry.offset = offset;
      entry.low_rank = low_rank_for(t.low_rank(), Device::CUDA, t.dtype());
      if (t.is_cpu())
        std::memcpy(group.host->data() + offset, t.raw(), t.nbytes());
      else
        cuda::copy_device_to_host(group.host->data() + offset, t.raw(), t.nbytes());
      offset += t.nbytes();
    }
    group.entries.push_back(entry);
  }
  impl_->slot_size = std::max(impl_->slot_size, bytes);
  impl_->groups.push_back(std::move(group));
}

int64_t WeightStream::groups() const {
  return int64_t(impl_->groups.size());
}

std::vector<Tensor> WeightStream::acquire(int64_t group) {
  Impl& s = *impl_;
  check(group >= 0 && group < groups(), "WeightStream: group {} of {}", group, groups());
  if (!s.acquired) {
    for (auto& slot : s.slots) slot = cuda::make_device_storage(std::max<size_t>(s.slot_size, 1));
    s.acquired = true;
  }
  const int slot = s.current, other = 1 - slot;
  if (s.holds[size_t(slot)] != group) s.fill(slot, group);
  MMGEN_CUDA_CHECK(cudaStreamWaitEvent(nullptr, s.landed[size_t(slot)], 0));
  const int64_t next = (group + 1) % groups();
  if (s.holds[size_t(other)] != next) s.fill(other, next);
  std::vector<Tensor> tensors;
  for (const Impl::Entry& e : s.groups[size_t(group)].entries)
    tensors.push_back(e.defined ? Tensor::wrap(s.slots[size_t(slot)], e.offset, e.shape, e.dtype)
                                      .with_low_rank(e.low_rank)
                                : Tensor());
  return tensors;
}

void WeightStream::release(int64_t group) {
  Impl& s = *impl_;
  const int slot = s.current;
  check(s.holds[size_t(slot)] == group, "WeightStream: release({}) of a group not acquired", group);
  MMGEN_CUDA_CHECK(cudaEventRecord(s.done[size_t(slot)], nullptr));
  s.current = 1 - slot;
}

size_t WeightStream::slot_size() const {
  return impl_->slot_size;
}

}  // namespace mmgen
