// STA mask-strategy files ("step_layer_head": [wt, wh, ww]).
#include "attention/backend_config.h"
#include "attention/backends/sliding_tile_attn/sta_mask.h"
#include "fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mmgen;
  const auto path = fuzz::write_scratch("mask.json", data, size);
  return fuzz::expect_only_errors([&] {
    auto mask = attention::StaMaskStrategy::load(path);
    mask.check(4, 2, 2, 1);
    (void)mask.window(1, 1, 1);
  });
}
