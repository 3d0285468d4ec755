// --attention-backend-config SPEC strings (a file, a JSON object or key=value pairs), parsed and
// validated against every DiT backend, alone and as two backends sharing one config.
#include <string>

#include "attention/backend_config.h"
#include "attention/catalogue.h"
#include "fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mmgen;
  static const std::vector<std::string> backends = attention::backend_names(attention::Family::Dit);
  const std::string spec(reinterpret_cast<const char*>(data), size);
  return fuzz::expect_only_errors([&] {
    const nlohmann::json settings = attention::parse_backend_config_spec(spec);
    for (size_t i = 0; i < backends.size(); ++i) {
      fuzz::expect_only_errors(
          [&] { (void)attention::validate_backend_config(settings, backends[i]); });
      fuzz::expect_only_errors([&] {
        (void)attention::validate_backend_configs(
            settings, {backends[i], backends[(i + 1) % backends.size()]});
      });
    }
  });
}
