// --config files: YAML text to settings, with option validation and type conversion.
#include <string>

#include "fuzz/fuzz_support.h"
#include "generate/settings.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mmgen;
  const std::string text(reinterpret_cast<const char*>(data), size);
  return fuzz::expect_only_errors([&] {
    cli::settings_from_document(cli::yaml_to_json(text, "fuzz.yaml"), "fuzz.yaml");
  });
}
