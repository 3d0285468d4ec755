#include "core/communicator.h"

#include "core/error.h"

namespace mmgen::dist {

SequenceShards SequenceShards::balanced(int64_t total, int parts) {
  check(parts >= 1, "sequence shards: {} parts", parts);
  check(total >= parts, "sequence parallel: {} tokens cannot be split over {} ranks", total, parts);
  SequenceShards shards;
  int64_t offset = 0;
  for (int i = 0; i < parts; ++i) {
    const int64_t size = total / parts + (i < total % parts ? 1 : 0);
    shards.sizes.push_back(size);
    shards.offsets.push_back(offset);
    offset += size;
  }
  return shards;
}

void check_collective(const std::vector<Tensor>& tensors, int count, const char* what) {
  check(int(tensors.size()) == count, "{}: {} tensors for {} ranks", what, tensors.size(), count);
  for (const Tensor& t : tensors)
    check(t.defined() && t.is_contiguous(), "{}: every tensor must be defined and contiguous",
          what);
}

}  // namespace mmgen::dist
