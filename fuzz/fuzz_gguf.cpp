// GGUF files: open as the weight loader will, then dequantize every small tensor through a float
// pointer (bounds are checked on open, so every read must stay inside the file).
#include "core/gguf.h"
#include "fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mmgen;
  const auto path = fuzz::write_scratch("x.gguf", data, size);
  return fuzz::expect_only_errors([&] {
    const gguf::GgufFile file = gguf::GgufFile::open(path);
    float sum = 0;
    for (const auto& tensor : file.tensors()) {
      if (tensor.nbytes > (size_t(1) << 20)) continue;
      const Tensor values = file.to_f32(tensor.name);
      for (int64_t i = 0; i < values.numel(); ++i) sum += values.data<float>()[i];
    }
    volatile float sink = sum;
    (void)sink;
  });
}
