// THE list of DiT attention backends: one line per backend, in documentation order. The
// catalogue, the kernel table, make_dit_backend, the GPU factory and the pipeline's extra weights
// all read it; a backend's descriptor is in attention/backends/<name>/.
#include <string_view>
#include <vector>

#include "attention/backend_config.h"
#include "attention/backends/descriptor.h"
#include "core/error.h"

// Each name is a folder under attention/backends/ whose namespace
// mmgen::attention::<name> defines `const BackendDescriptor& descriptor()`.
#define MMGEN_DIT_BACKENDS(X) \
  X(fa)                       \
  X(torch_sdpa)               \
  X(sliding_tile_attn)        \
  X(sage_attn)                \
  X(sage_attn_3)              \
  X(video_sparse_attn)        \
  X(vmoba_attn)               \
  X(sla_attn)                 \
  X(sage_sla_attn)            \
  X(sparse_video_gen_2_attn)  \
  X(aiter)                    \
  X(aiter_sage)

namespace mmgen::attention {

#define MMGEN_DECLARE_DESCRIPTOR(name)   \
  namespace name {                       \
  const BackendDescriptor& descriptor(); \
  }
MMGEN_DIT_BACKENDS(MMGEN_DECLARE_DESCRIPTOR)
#undef MMGEN_DECLARE_DESCRIPTOR

const std::vector<const BackendDescriptor*>& dit_backends() {
#define MMGEN_DESCRIPTOR_ENTRY(name) &name::descriptor(),
  static const std::vector<const BackendDescriptor*> list = {
      MMGEN_DIT_BACKENDS(MMGEN_DESCRIPTOR_ENTRY)};
#undef MMGEN_DESCRIPTOR_ENTRY
  return list;
}

const BackendDescriptor* find_dit_descriptor(std::string_view name) {
  for (const BackendDescriptor* backend : dit_backends())
    if (backend->info.name == name) return backend;
  return nullptr;
}

bool backend_reads_weight(std::string_view backend, std::string_view fragment) {
  const BackendDescriptor* descriptor = find_dit_descriptor(backend);
  if (!descriptor) return false;
  for (std::string_view weight : descriptor->extra_weights)
    if (weight == fragment) return true;
  return false;
}

std::vector<std::string> backends_reading_weight(std::string_view fragment) {
  std::vector<std::string> names;
  for (const BackendDescriptor* backend : dit_backends())
    if (backend_reads_weight(backend->info.name, fragment)) names.emplace_back(backend->info.name);
  return names;
}

KernelBuild cpu_kernel(std::string_view backend) {
  return {.family = Family::Dit, .backend = backend, .platform = Platform::Cpu, .dtypes = {"fp32"}};
}

KernelBuild hopper_kernel(std::string_view backend, std::vector<int> head_sizes) {
  return {.family = Family::Dit,
          .backend = backend,
          .platform = Platform::Cuda,
          .dtypes = {"bf16"},
          .head_sizes = std::move(head_sizes),
          .min_sm = 90,
          .max_sm = 90};
}

std::unique_ptr<AttentionBackend> make_dit_backend(std::string_view name,
                                                   const nlohmann::json& config,
                                                   const BackendResources& resources) {
  const BackendDescriptor* backend = find_dit_descriptor(name);
  check(backend != nullptr, "'{}' is not a DiT attention backend (see `mmgen backends`)", name);
  check(bool(backend->cpu), "attention backend {}: this build has no CPU kernel for it", name);
  return backend->cpu(validate_backend_config(config, name), resources);
}

}  // namespace mmgen::attention
