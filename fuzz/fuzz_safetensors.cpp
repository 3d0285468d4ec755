// safetensors headers and data: open as the weight loader does, then read every tensor converted
// to float32 through a float pointer, as the models' kernels use it (bounds are checked on open,
// so every read must stay inside the file and be properly aligned).
#include "core/safetensors.h"
#include "fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mmgen;
  const auto path = fuzz::write_scratch("x.safetensors", data, size);
  return fuzz::expect_only_errors([&] {
    const WeightStore store = WeightStore::open_file(path);
    (void)store.stored_bytes();
    float sum = 0;
    for (const auto& name : store.names()) {
      const TensorInfo& info = store.info(name);
      if (info.end - info.begin > (size_t(1) << 20)) continue;
      const Tensor tensor = store.get_f32(name);
      const float* values = tensor.data<float>();
      for (int64_t i = 0; i < tensor.numel(); ++i) sum += values[i];
    }
    volatile float sink = sum;
    (void)sink;
  });
}
