// --attention-backend-config SPEC strings, parsed and validated against every DiT backend.
#include <string>

#include "attention/backend_config.h"
#include "attention/catalogue.h"
#include "fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mmgen;
  const std::string spec(reinterpret_cast<const char*>(data), size);
  return fuzz::expect_only_errors([&] {
    const nlohmann::json settings = attention::parse_backend_config_spec(spec);
    for (const auto& name : attention::backend_names(attention::Family::Dit)) {
      try {
        attention::validate_backend_config(settings, name);
      } catch (const Error&) {
      }
    }
  });
}
