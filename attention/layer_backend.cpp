#include "attention/layer_backend.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <string>
#include <vector>

#include "attention/backends/descriptor.h"
#include "attention/device_attention.h"
#include "core/error.h"
#ifdef MMGEN_HAVE_CUDA
#include "attention/sparse_self_attention_cuda.h"
#endif

namespace mmgen::attention {

namespace {

#ifdef MMGEN_HAVE_CUDA
bool has_cuda_row(const BackendDescriptor& descriptor) {
  return std::any_of(descriptor.kernels.begin(), descriptor.kernels.end(),
                     [](const KernelBuild& kernel) { return kernel.platform == Platform::Cuda; });
}

// The GPU's backend for a stack: a GPU half, or a dense kernel (see make_layer_backend).
std::shared_ptr<AttentionBackend> gpu_backend(std::string_view name, const nlohmann::json& settings,
                                              const BackendResources& resources,
                                              const StackTraits& stack) {
  const BackendDescriptor* descriptor = find_dit_descriptor(name);
  if (!descriptor) return make_dense_gpu_backend(name, DenseKernel::Flash);
  const bool video_self = stack.video_tokens_only && stack.kind == LayerKind::SelfAttention;
  if (descriptor->cuda && video_self) return descriptor->cuda(settings, resources);
  if (descriptor->cuda && !descriptor->info.sparse) {
    spdlog::info("--device cuda: {} runs video self-attention; the {} layers run fa", name,
                 stack.name);
    return make_dense_gpu_backend("fa", DenseKernel::Flash);
  }
  if (!descriptor->cuda && has_cuda_row(*descriptor) && !descriptor->info.sparse)
    return make_dense_gpu_backend(name, dense_kernel_for(name));
  // What the GPU runs, for the message: dense backends with a CUDA kernel row anywhere; backends
  // with a GPU half on video self-attention.
  std::vector<std::string> dense, self_only;
  for (const BackendDescriptor* backend : dit_backends()) {
    if (backend->cuda)
      self_only.emplace_back(backend->info.name);
    else if (has_cuda_row(*backend) && !backend->info.sparse)
      dense.emplace_back(backend->info.name);
  }
  fail(
      "--device cuda: the transformer's {} attention backend runs on the CPU only so far; use {} "
      "or {} (self-attention) with --device cuda, or --device cpu",
      name, fmt::join(dense, ", "), fmt::join(self_only, ", "));
}
#endif

}  // namespace

std::shared_ptr<AttentionBackend> make_layer_backend(std::string_view name,
                                                     const nlohmann::json& settings,
                                                     const BackendResources& resources,
                                                     const StackTraits& stack, Device device) {
  if (device == Device::CPU) return make_dit_backend(name, settings, resources);
#ifdef MMGEN_HAVE_CUDA
  return gpu_backend(name, settings, resources, stack);
#else
  (void)stack;
  (void)resources;
  fail("GPU attention: this build has no CUDA support; use --device cpu");
#endif
}

std::vector<std::string> extra_weight_fragments(std::string_view name) {
  const BackendDescriptor* descriptor = find_dit_descriptor(name);
  if (!descriptor) return {};
  return {descriptor->extra_weights.begin(), descriptor->extra_weights.end()};
}

bool extra_weight_in_compute_dtype(std::string_view name, std::string_view key) {
  const BackendDescriptor* descriptor = find_dit_descriptor(name);
  return descriptor &&
         std::find(descriptor->gpu_compute_weights.begin(), descriptor->gpu_compute_weights.end(),
                   key) != descriptor->gpu_compute_weights.end();
}

}  // namespace mmgen::attention
