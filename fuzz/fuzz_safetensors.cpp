// safetensors headers and data: open, then read every tensor (bounds are checked on open).
#include "core/safetensors.h"
#include "fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mmgen;
  const auto path = fuzz::write_scratch("x.safetensors", data, size);
  return fuzz::expect_only_errors([&] {
    SafetensorsFile file = SafetensorsFile::open(path);
    double sum = 0;
    for (const auto& name : file.names()) {
      Tensor t = file.tensor(name);
      if (t.numel() <= (1 << 20)) sum += t.to(DType::F64).numel();
    }
    (void)sum;
  });
}
