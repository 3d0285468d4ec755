// model_index.json and component config JSON.
#include "fuzz/fuzz_support.h"
#include "pipeline/model_index.h"
#include "pipeline/registry.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mmgen;
  fuzz::write_scratch("model_index.json", data, size);
  return fuzz::expect_only_errors([&] {
    ModelIndex index = load_model_index(fuzz::scratch_file("model_index.json").parent_path());
    for (const auto& name : index.component_names()) (void)index.component(name);
    (void)find_pipeline(index.class_name, index.root);
  });
}
