// --config files: YAML text read as `generate --config FILE` reads it (option validation and type
// conversion), merged over the built-in and Wan defaults into a request, and its
// attention-backend-config parsed and validated against every DiT backend.
#include <string>

#include "attention/backend_config.h"
#include "attention/catalogue.h"
#include "fuzz/fuzz_support.h"
#include "generate/pipeline_defaults.h"
#include "generate/settings.h"
#include "pipeline/registry.h"
#include "pipeline/request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mmgen;
  static const cli::SettingsLayer wan_defaults =
      cli::pipeline_defaults_from_yaml(embedded_config("wan.yaml"), "configs/wan.yaml",
                                       1'300'000'000)
          .layer;
  const auto path = fuzz::write_scratch("config.yaml", data, size);
  cli::SettingsLayer merged;
  fuzz::expect_only_errors([&] {
    const cli::SettingsLayer file = cli::load_config_file(path);
    merged = cli::merge_layers({cli::builtin_defaults(), wan_defaults, file});
  });
  if (!merged.is_object()) return 0;
  fuzz::expect_only_errors([&] { (void)request_from_settings(merged); });
  if (merged.contains("attention-backend-config")) {
    fuzz::expect_only_errors([&] {
      const nlohmann::json settings =
          attention::parse_backend_config_spec(merged["attention-backend-config"]);
      for (const auto& name : attention::backend_names(attention::Family::Dit))
        fuzz::expect_only_errors([&] { (void)attention::validate_backend_config(settings, name); });
    });
  }
  return 0;
}
