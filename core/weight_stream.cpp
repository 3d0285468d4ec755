#include "core/weight_stream.h"

#include "core/error.h"

namespace mmgen {

// The layout add_group gives a group: each tensor from a 256-byte boundary, as the GPU's
// allocator aligns them.
size_t WeightStream::slot_bytes(const std::vector<Tensor>& tensors) {
  size_t bytes = 0;
  for (const Tensor& t : tensors)
    if (t.defined()) bytes = (bytes + 255) / 256 * 256 + t.nbytes();
  return bytes;
}

#ifndef MMGEN_HAVE_CUDA
struct WeightStream::Impl {};

WeightStream::WeightStream() {
  fail(
      "streaming weights to the GPU: this build has no CUDA support; rebuild with -DMMGEN_CUDA=ON");
}
WeightStream::~WeightStream() = default;
void WeightStream::add_group(const std::vector<Tensor>&) {}
int64_t WeightStream::groups() const {
  return 0;
}
std::vector<Tensor> WeightStream::acquire(int64_t) {
  return {};
}
void WeightStream::release(int64_t) {}
size_t WeightStream::slot_size() const {
  return 0;
}
size_t WeightStream::host_bytes() const {
  return 0;
}
size_t WeightStream::device_bytes() const {
  return 0;
}
#endif

}  // namespace mmgen
