// --device auto on the GPU machine: a CUDA build with a supported GPU (Hopper) runs there without
// being told, and says why; --device cpu still keeps it on the CPU. The CPU side (a build without
// CUDA chooses the CPU) is tests/cli_test.cpp's.
#include <nlohmann/json.hpp>

#include "attention/catalogue.h"
#include "attention/device_choice.h"
#include "cuda_test_support.h"
#include "pipeline/request.h"

using namespace mmgen;
using namespace mmgen::cuda_testing;

int main() try {
  const attention::DeviceChoice automatic = attention::choose_device("auto");
  expect(automatic.device == "cuda",
         "auto chooses the GPU: " + automatic.device + " (" + automatic.reason + ")");
  expect(automatic.reason.rfind("auto: this CUDA build found a supported GPU (cuda sm", 0) == 0,
         "the reason names the GPU: " + automatic.reason);
  expect(attention::choose_device("cpu").device == "cpu", "--device cpu stays on the CPU");

  // A request without --device resolves the same way, before any work.
  const nlohmann::json settings = {{"model-path", "m"},
                                   {"prompt", "x"},
                                   {"height", 32},
                                   {"width", 32},
                                   {"num-inference-steps", 1},
                                   {"max-sequence-length", 8},
                                   {"output-path", "out"},
                                   {"output-format", "npy"}};
  const Request request = request_from_settings(settings);
  expect(request.device == "cuda", "a request with no --device runs on " + request.device);
  expect(request.settings["device"] == "cuda", "the sidecar records the device that ran");
  return failures() == 0 ? 0 : 1;
} catch (const std::exception& error) {
  std::printf("  FAIL %s\n", error.what());
  return 1;
}
