// The DiT attention backends are listed once (attention/backends/all.cpp): the catalogue, the
// kernel table, make_dit_backend and the extra-weight names must all come from that list, so a
// backend added there (and only there) shows up everywhere and nothing else does. And the STA
// mask the plan loads is handed to the backends, not read again.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "attention/backend.h"
#include "attention/backend_config.h"
#include "attention/backends/descriptor.h"
#include "attention/backends/sliding_tile_attn/sta_mask.h"
#include "attention/catalogue.h"
#include "attention/selector.h"
#include "core/tensor.h"
#include "test_support.h"

namespace mmgen::attention {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

// `action` throws an mmgen::Error whose message contains `part`.
#define EXPECT_ERROR_HAS(action, part)                                   \
  do {                                                                   \
    const std::string message = testing::error_message([&] { action; }); \
    EXPECT_NE(message.find(part), std::string::npos)                     \
        << "'" << part << "' not in: '" << message << "'";               \
  } while (0)

std::vector<std::string> descriptor_names() {
  std::vector<std::string> names;
  for (const BackendDescriptor* backend : dit_backends()) names.emplace_back(backend->info.name);
  return names;
}

TEST(BackendDescriptors, NamesAreUniqueAndFindable) {
  const auto names = descriptor_names();
  EXPECT_EQ(std::set<std::string>(names.begin(), names.end()).size(), names.size());
  for (const BackendDescriptor* backend : dit_backends()) {
    EXPECT_EQ(backend->info.family, Family::Dit) << backend->info.name;
    EXPECT_EQ(find_dit_descriptor(backend->info.name), backend);
  }
  EXPECT_EQ(find_dit_descriptor("torch_native"), nullptr);  // paged family
}

TEST(BackendDescriptors, CatalogueDitRowsAreTheDescriptorsInOrder) {
  std::vector<std::string> rows;
  for (const BackendInfo& row : backend_catalogue())
    if (row.family == Family::Dit) rows.emplace_back(row.name);
  EXPECT_EQ(rows, descriptor_names());
  EXPECT_EQ(backend_names(Family::Dit), descriptor_names());
}

TEST(BackendDescriptors, KernelTableDitRowsAreTheDescriptorsKernels) {
  size_t from_descriptors = 0;
  for (const BackendDescriptor* backend : dit_backends()) {
    bool cpu_row = false;
    for (const KernelBuild& kernel : backend->kernels) {
      EXPECT_EQ(kernel.backend, backend->info.name);
      EXPECT_EQ(kernel.family, Family::Dit);
      cpu_row |= kernel.platform == Platform::Cpu;
      // Each row is in the table, and it names a platform the catalogue row allows.
      const auto& platforms = backend->info.platforms;
      EXPECT_NE(std::find(platforms.begin(), platforms.end(), kernel.platform), platforms.end())
          << backend->info.name;
    }
    // A CPU kernel row exactly when there is a CPU factory.
    EXPECT_EQ(cpu_row, bool(backend->cpu)) << backend->info.name;
    // A GPU factory only with a GPU kernel row (dense backends have the row without a factory:
    // the GPU model runs them itself).
    if (backend->cuda) {
      bool cuda_row = false;
      for (const KernelBuild& kernel : backend->kernels)
        cuda_row |= kernel.platform == Platform::Cuda;
      EXPECT_TRUE(cuda_row) << backend->info.name;
    }
    from_descriptors += backend->kernels.size();
  }
  size_t dit_rows = 0;
  const auto names = descriptor_names();
  for (const KernelBuild& kernel : compiled_kernels()) {
    if (kernel.family != Family::Dit) continue;
    ++dit_rows;
    EXPECT_NE(std::find(names.begin(), names.end(), kernel.backend), names.end()) << kernel.backend;
  }
  EXPECT_EQ(dit_rows, from_descriptors);
}

TEST(BackendDescriptors, MakeDitBackendBuildsEveryCpuDescriptorAndNothingElse) {
  const fs::path mask = testing::scratch_dir("descriptors-mask") / "mask.json";
  std::ofstream(mask) << R"({"0_0_0": [1, 1, 1]})";
  for (const BackendDescriptor* backend : dit_backends()) {
    const std::string name(backend->info.name);
    const json settings = name == "sliding_tile_attn"
                              ? json{{"mask_strategy_file_path", mask.string()}}
                              : json::object();
    if (backend->cpu) {
      // Unvalidated settings: make_dit_backend fills the defaults from the catalogue row.
      const auto instance = make_dit_backend(name, settings);
      ASSERT_NE(instance, nullptr);
      EXPECT_EQ(instance->name(), name);
    } else {
      EXPECT_ERROR_HAS(make_dit_backend(name, settings), "no CPU kernel");
    }
  }
  EXPECT_ERROR_HAS(make_dit_backend("torch_native", json::object()), "not a DiT attention backend");
}

TEST(BackendDescriptors, ExtraWeightsAreDocumentedWhereTheyAreRead) {
  for (const BackendDescriptor* backend : dit_backends()) {
    // The catalogue's words and the names the pipeline looks up go together.
    EXPECT_EQ(backend->extra_weights.empty(), backend->info.extra_weights.empty())
        << backend->info.name;
    for (std::string_view fragment : backend->extra_weights) {
      EXPECT_FALSE(fragment.empty());
      EXPECT_EQ(fragment.back(), '.') << "a module-name fragment: " << fragment;
    }
  }
  EXPECT_EQ(find_dit_descriptor("video_sparse_attn")->extra_weights,
            std::vector<std::string_view>{"to_gate_compress."});
  EXPECT_EQ(find_dit_descriptor("sla_attn")->extra_weights,
            std::vector<std::string_view>{"proj_l."});
}

// The plan loads the mask once (pipeline/attention_plan.cpp) and hands it over: a backend built
// with those resources never reads the file again, so a file changed (or broken) after planning
// does not matter, while one built without them reads it.
TEST(BackendDescriptors, StaMaskIsHandedOverNotReread) {
  const fs::path path = testing::scratch_dir("descriptors-sta-once") / "mask.json";
  std::ofstream(path) << R"({"0_0_0": [1, 1, 1], "0_0_1": [2, 2, 2]})";
  BackendResources resources;
  resources.sta_mask = std::make_shared<const StaMaskStrategy>(StaMaskStrategy::load(path));
  const json settings = validate_backend_config(
      {{"mask_strategy_file_path", path.string()}, {"skip_time_steps", 0}}, "sliding_tile_attn");
  std::ofstream(path) << "not json";  // a re-read now fails
  for (int layer = 0; layer < 3; ++layer)
    EXPECT_NE(make_dit_backend("sliding_tile_attn", settings, resources), nullptr);
  EXPECT_FALSE(
      testing::error_message([&] { make_dit_backend("sliding_tile_attn", settings); }).empty());
}

// One rule for a backend without a kernel on the run's device (docs/attention-backends.md): its
// catalogue fallback runs and the choice says so; without a fallback the explicit choice is
// refused. On a Hopper GPU with dense kernels (fa, torch_sdpa), sage_attn (no GPU kernel, fallback
// fa) runs fa while a sparse backend without a GPU kernel there (no fallback) is refused.
TEST(BackendDescriptors, OneFallbackRuleOnTheGpu) {
  Machine gpu;
  gpu.platform = Platform::Cuda;
  gpu.sm = 90;
  gpu.dtype = "bf16";
  gpu.description = "cuda sm90";
  for (const BackendDescriptor* backend : dit_backends())
    if (backend->info.name == "fa" || backend->info.name == "torch_sdpa")
      gpu.kernels.push_back(hopper_kernel(backend->info.name, {}));
  const ComponentAttention transformer{
      .name = "transformer", .role = ComponentRole::Dit, .head_size = 128};
  const auto choose = [&](const std::string& backend) {
    return select_component(transformer, selection_levels({}, backend, std::nullopt), gpu);
  };
  const ComponentChoice sage = choose("sage_attn");
  EXPECT_EQ(sage.primary().backend, "fa");
  EXPECT_NE(sage.primary().fallback.find("its fallback fa is used"), std::string::npos)
      << sage.primary().fallback;
  EXPECT_ERROR_HAS(choose("sla_attn"), "sla_attn cannot run here");
}

// Backends whose hardware an older GPU lacks (Blackwell's FP4 for sage_attn_3, the sm100 paged
// kernels) say so on a Hopper GPU, whatever the build has; on a Blackwell GPU the question is
// the build's kernels again.
TEST(BackendDescriptors, HardwareAnOlderGpuLacksIsNamed) {
  Machine hopper;
  hopper.platform = Platform::Cuda;
  hopper.sm = 90;
  hopper.dtype = "bf16";
  hopper.description = "cuda sm90";
  const Availability fp4 = kernel_availability(hopper, Family::Dit, "sage_attn_3", "bf16", 128);
  EXPECT_FALSE(fp4.ok);
  EXPECT_NE(fp4.reason.find("needs a sm100 or sm120 (Blackwell) GPU"), std::string::npos)
      << fp4.reason;
  EXPECT_NE(fp4.reason.find("cuda sm90"), std::string::npos) << fp4.reason;
  const Availability fa4 = kernel_availability(hopper, Family::Paged, "fa4", "bf16", 128);
  EXPECT_NE(fa4.reason.find("needs a sm100 GPU"), std::string::npos) << fa4.reason;
  Machine blackwell = hopper;
  blackwell.sm = 100;
  blackwell.description = "cuda sm100";
  const Availability built =
      kernel_availability(blackwell, Family::Dit, "sage_attn_3", "bf16", 128);
  EXPECT_FALSE(built.ok);
  EXPECT_NE(built.reason.find("this build has no cuda kernel"), std::string::npos) << built.reason;
}

}  // namespace
}  // namespace mmgen::attention
