#include "core/weight_stream.h"

#include "core/error.h"

namespace mmgen {

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
#endif

}  // namespace mmgen
