// .npy files (--latents and exact outputs), read as --latents reads them.
#include "core/npy.h"
#include "fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mmgen;
  const auto path = fuzz::write_scratch("x.npy", data, size);
  return fuzz::expect_only_errors([&] { (void)read_tensor_file(path).to(DType::F32); });
}
