#include "attention/catalogue.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>

#ifdef MMGEN_HAVE_CUDA
#include <cuda_runtime.h>
#endif

#include "attention/backend.h"
#include "attention/backends/descriptor.h"
#include "attention/paged/paged_backend.h"
#ifdef MMGEN_HAVE_CUDA
#include "attention/paged/cuda/paged_backend_cuda.h"
#endif
#include "core/error.h"

namespace mmgen::attention {

namespace {

using json = nlohmann::json;
using P = Platform;

constexpr std::string_view kNotNative = "1 (larger pages are converted to slots)";
constexpr std::string_view kNative = "native (> 1)";
constexpr std::string_view kUnconfirmed = "unconfirmed";

const std::vector<Platform> kAllPlatforms = {P::Cuda, P::Rocm, P::Xpu, P::Musa,
                                             P::Mps,  P::Npu,  P::Cpu};

// The paged family's rows. (The DiT family's rows are its descriptors' catalogue rows, one per
// folder under attention/backends/.)
const std::vector<BackendInfo>& paged_catalogue() {
  static const std::vector<BackendInfo> catalogue = {
      // ---------------------------------------------------------------- paged family
      {.name = "torch_native",
       .family = Family::Paged,
       .summary = "gathers each request's K/V from the pool and runs dense attention; the "
                  "reference",
       .aliases = {},
       .platforms = kAllPlatforms,
       .build_needs = "nothing (always built)",
       .dtypes = {"fp32", "bf16", "fp16"},
       .head_sizes = "any",
       .page_sizes = kNotNative},
      {.name = "triton",
       .family = Family::Paged,
       .summary = "two-stage extend (cached prefix from the pool, new tokens contiguous); "
                  "split-KV decode merged by log-sum-exp",
       .aliases = {},
       .platforms = {P::Cuda, P::Rocm, P::Xpu, P::Cpu},
       .build_needs = "GPU: the Triton kernels; CPU: mmgen's port of the design",
       .gpu_arch = "sm80+",
       .dtypes = {"bf16", "fp16", "fp32"},
       .head_sizes = "any",
       .page_sizes = kNotNative},
      {.name = "flashinfer",
       .family = Family::Paged,
       .summary = "plan/run: ragged attention over new tokens plus paged attention over the "
                  "prefix, merged by log-sum-exp",
       .aliases = {},
       .platforms = {P::Cuda, P::Cpu},
       .build_needs = "CUDA: FlashInfer; CPU: mmgen's port of the design",
       .gpu_arch = "sm80+",
       .dtypes = {"bf16", "fp16", "fp8 KV", "fp32 (CPU)"},
       .head_sizes = "64, 128, 256 (GPU); any (CPU)",
       .page_sizes = kNotNative},
      {.name = "fa3",
       .family = Family::Paged,
       .summary = "FlashAttention 3 over a native page table",
       .aliases = {},
       .platforms = {P::Cuda, P::Cpu},
       .build_needs = "CUDA: the FA3 kernel; CPU: mmgen's port of the design",
       .gpu_arch = "sm90",
       .dtypes = {"bf16", "fp16", "fp8", "fp32 (CPU)"},
       .head_sizes = "up to 256",
       .page_sizes = kNative},
      {.name = "fa4",
       .family = Family::Paged,
       .summary = "FlashAttention 4 (Blackwell)",
       .aliases = {},
       .platforms = {P::Cuda},
       .build_needs = "the FA4 kernel",
       .gpu_arch = "sm100",
       .min_gpu_sm = 100,
       .dtypes = {"bf16", "fp16"},
       .head_sizes = "up to 256",
       .page_sizes = kNotNative},
      {.name = "flex_attention",
       .family = Family::Paged,
       .summary = "score-mod and mask-mod callbacks (T5 bias, sliding windows, padding)",
       .aliases = {},
       .platforms = {P::Cuda, P::Cpu},
       .build_needs = "CUDA: compiled flex kernels; CPU: mmgen's implementation",
       .gpu_arch = "sm80+",
       .dtypes = {"bf16", "fp16", "fp32"},
       .head_sizes = "any",
       .page_sizes = kNotNative},
      {.name = "trtllm_mha",
       .family = Family::Paged,
       .summary = "TensorRT-LLM multi-head attention kernels",
       .aliases = {},
       .platforms = {P::Cuda},
       .build_needs = "the TensorRT-LLM kernels",
       .gpu_arch = "sm100",
       .min_gpu_sm = 100,
       .dtypes = {"bf16", "fp16", "fp8"},
       .head_sizes = "64, 128, 256",
       .page_sizes = kNative},
      {.name = "dual_chunk_flash_attn",
       .family = Family::Paged,
       .summary = "dual chunk attention for very long contexts (Qwen2.5-1M style): intra-, "
                  "successive- and inter-chunk regions merged by LSE; dual-chunk models only",
       .aliases = {},
       .platforms = {P::Cuda, P::Cpu},
       .build_needs = "CUDA: the FlashAttention kernel; CPU: mmgen's port of the design",
       .gpu_arch = "sm80+",
       .dtypes = {"bf16", "fp16", "fp32 (CPU)"},
       .head_sizes = "up to 256",
       .page_sizes = kNotNative,
       .model_attention = ModelAttention::DualChunk},
      {.name = "aiter",
       .family = Family::Paged,
       .summary = "AMD AITER paged attention kernels",
       .aliases = {},
       .platforms = {P::Rocm},
       .build_needs = "a ROCm build with AITER",
       .gpu_arch = "gfx942 / gfx950 (MI300 / MI355)",
       .dtypes = {"bf16", "fp16", "fp8"},
       .head_sizes = "64, 128",
       .page_sizes = kNative},
      {.name = "wave",
       .family = Family::Paged,
       .summary = "AMD Wave kernels",
       .aliases = {},
       .platforms = {P::Rocm},
       .build_needs = "a ROCm build with Wave",
       .gpu_arch = "gfx942+",
       .dtypes = {"bf16", "fp16"},
       .head_sizes = "64, 128",
       .page_sizes = kNotNative},
      {.name = "ascend",
       .family = Family::Paged,
       .summary = "Huawei Ascend NPU kernels",
       .aliases = {},
       .platforms = {P::Npu},
       .build_needs = "an Ascend (CANN) build",
       .dtypes = {"bf16", "fp16"},
       .head_sizes = "64, 128",
       .page_sizes = kNative},
      {.name = "intel_xpu",
       .family = Family::Paged,
       .summary = "Intel GPU (XPU) kernels",
       .aliases = {},
       .platforms = {P::Xpu},
       .build_needs = "an XPU build",
       .dtypes = {"bf16", "fp16"},
       .head_sizes = "64, 128",
       .page_sizes = kUnconfirmed},
      {.name = "intel_amx",
       .family = Family::Paged,
       .summary = "Intel AMX CPU kernels",
       .aliases = {},
       .platforms = {P::Cpu},
       .build_needs = "an AMX kernel and a CPU with AMX (Sapphire Rapids or newer)",
       .dtypes = {"bf16"},
       .head_sizes = "any",
       .page_sizes = kUnconfirmed},
      {.name = "flashinfer_mla",
       .family = Family::Paged,
       .summary = "multi-head latent attention (compressed KV, DeepSeek-style) in its absorbed "
                  "form, every query over the latent rows through token slots; MLA models only",
       .aliases = {},
       .platforms = {P::Cuda, P::Cpu},
       .build_needs = "CUDA: FlashInfer; CPU: mmgen's port of the design",
       .gpu_arch = "sm80+",
       .dtypes = {"bf16", "fp16", "fp32 (CPU)"},
       .head_sizes = "MLA latent 512 + rope 64 (any latent + rope on the CPU)",
       .page_sizes = kNotNative,
       .model_attention = ModelAttention::LatentMla},
      {.name = "flashmla",
       .family = Family::Paged,
       .summary = "FlashMLA: decode over 64-token pages, long sequences split and merged by "
                  "log-sum-exp; extend as flashinfer_mla; MLA models only",
       .aliases = {},
       .platforms = {P::Cuda, P::Cpu},
       .build_needs = "CUDA: the FlashMLA kernels; CPU: mmgen's port of the design",
       .gpu_arch = "sm90",
       .dtypes = {"bf16", "fp8", "fp32 (CPU)"},
       .head_sizes = "MLA latent 512 + rope 64 (any latent + rope on the CPU)",
       .page_sizes = kNative,
       .model_attention = ModelAttention::LatentMla},
      {.name = "cutlass_mla",
       .family = Family::Paged,
       .summary = "CUTLASS MLA kernels; MLA models only",
       .aliases = {},
       .platforms = {P::Cuda},
       .build_needs = "the CUTLASS MLA kernels",
       .gpu_arch = "sm100",
       .min_gpu_sm = 100,
       .dtypes = {"bf16", "fp8"},
       .head_sizes = "MLA latent 512 + rope 64",
       .page_sizes = kNative,
       .model_attention = ModelAttention::LatentMla},
      {.name = "trtllm_mla",
       .family = Family::Paged,
       .summary = "TensorRT-LLM MLA kernels; MLA models only",
       .aliases = {},
       .platforms = {P::Cuda},
       .build_needs = "the TensorRT-LLM kernels",
       .gpu_arch = "sm100",
       .min_gpu_sm = 100,
       .dtypes = {"bf16", "fp8"},
       .head_sizes = "MLA latent 512 + rope 64",
       .page_sizes = kNative,
       .model_attention = ModelAttention::LatentMla},
  };
  return catalogue;
}

std::string lower(std::string_view text) {
  std::string out;
  for (char c : text) out += char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string trim(std::string_view text) {
  size_t begin = text.find_first_not_of(" \t\r\n");
  if (begin == std::string_view::npos) return {};
  size_t end = text.find_last_not_of(" \t\r\n");
  return std::string(text.substr(begin, end - begin + 1));
}

// Auto choice order per platform: the first backend with a usable kernel wins.
const std::vector<std::string_view>& preference(Platform platform, Family family) {
  static const std::vector<std::string_view> dit_cuda = {"fa", "torch_sdpa"},
                                             dit_rocm = {"aiter", "fa", "torch_sdpa"},
                                             dit_cpu = {"fa", "torch_sdpa"},
                                             dit_other = {"torch_sdpa"},
                                             // CPU: triton first, measured with
                                             // bench/paged_attention_bench (performance-history):
                                             // fastest or within 3% on UMT5- and Qwen3-sized
                                             // attention; flashinfer and flex_attention slower.
      paged_cpu = {"intel_amx", "triton", "flashinfer", "torch_native"},
                                             paged_cuda = {"fa3", "flashinfer", "triton",
                                                           "torch_native"},
                                             paged_rocm = {"aiter", "triton", "torch_native"},
                                             paged_xpu = {"intel_xpu", "triton", "torch_native"},
                                             paged_npu = {"ascend", "torch_native"},
                                             paged_other = {"triton", "torch_native"};
  if (family == Family::Dit) {
    switch (platform) {
      case P::Cuda:
        return dit_cuda;
      case P::Rocm:
        return dit_rocm;
      case P::Cpu:
        return dit_cpu;
      default:
        return dit_other;
    }
  }
  switch (platform) {
    case P::Cuda:
      return paged_cuda;
    case P::Rocm:
      return paged_rocm;
    case P::Xpu:
      return paged_xpu;
    case P::Npu:
      return paged_npu;
    case P::Cpu:
      return paged_cpu;
    default:
      return paged_other;
  }
}

std::string describe_sm(int sm) {
  return fmt::format("sm{}", sm);
}

// Why one kernel does not take this case; empty when it does.
std::string kernel_mismatch(const KernelBuild& kernel, const Machine& machine,
                            std::string_view dtype, int64_t head_size) {
  if (kernel.min_sm > 0 && machine.sm < kernel.min_sm)
    return fmt::format("its kernel needs {} or newer; this GPU is {}", describe_sm(kernel.min_sm),
                       describe_sm(machine.sm));
  if (kernel.max_sm > 0 && machine.sm > kernel.max_sm)
    return fmt::format("its kernel supports up to {}; this GPU is {}", describe_sm(kernel.max_sm),
                       describe_sm(machine.sm));
  if (!dtype.empty() &&
      std::find(kernel.dtypes.begin(), kernel.dtypes.end(), dtype) == kernel.dtypes.end())
    return fmt::format("its kernel takes {}; the model runs in {}", fmt::join(kernel.dtypes, ", "),
                       dtype);
  if (head_size > 0 && !kernel.head_sizes.empty() &&
      std::find(kernel.head_sizes.begin(), kernel.head_sizes.end(), head_size) ==
          kernel.head_sizes.end())
    return fmt::format("its kernel takes head sizes {}; this model's is {}",
                       fmt::join(kernel.head_sizes, ", "), head_size);
  return {};
}

}  // namespace

std::string_view family_name(Family family) {
  return family == Family::Dit ? "dit" : "paged";
}

std::string_view platform_name(Platform platform) {
  switch (platform) {
    case P::Cuda:
      return "cuda";
    case P::Rocm:
      return "rocm";
    case P::Xpu:
      return "xpu";
    case P::Musa:
      return "musa";
    case P::Mps:
      return "mps";
    case P::Npu:
      return "npu";
    case P::Cpu:
      return "cpu";
  }
  return "?";
}

const std::vector<BackendInfo>& backend_catalogue() {
  static const std::vector<BackendInfo> catalogue = [] {
    std::vector<BackendInfo> rows;
    for (const BackendDescriptor* backend : dit_backends()) rows.push_back(backend->info);
    for (const BackendInfo& row : paged_catalogue()) rows.push_back(row);
    return rows;
  }();
  return catalogue;
}

const BackendInfo* find_backend(Family family, std::string_view name) {
  const std::string wanted = lower(trim(name));
  for (const auto& entry : backend_catalogue()) {
    if (entry.family != family) continue;
    if (entry.name == wanted) return &entry;
    for (auto alias : entry.aliases)
      if (alias == wanted) return &entry;
  }
  return nullptr;
}

bool is_known_backend(std::string_view name) {
  return find_backend(Family::Dit, name) || find_backend(Family::Paged, name);
}

std::vector<std::string> backend_names(Family family, bool with_aliases) {
  std::vector<std::string> names;
  for (const auto& entry : backend_catalogue()) {
    if (entry.family != family) continue;
    names.emplace_back(entry.name);
    if (with_aliases)
      for (auto alias : entry.aliases) names.emplace_back(alias);
  }
  return names;
}

std::string normalize_backend_name(Family family, std::string_view name) {
  const BackendInfo* entry = find_backend(family, name);
  return entry ? std::string(entry->name) : lower(trim(name));
}

std::vector<std::string_view> paged_backends_for(const std::vector<std::string_view>& names,
                                                 ModelAttention kind) {
  std::vector<std::string_view> out;
  for (std::string_view name : names)
    if (const BackendInfo* entry = find_backend(Family::Paged, name);
        entry && entry->model_attention == kind)
      out.push_back(name);
  return out;
}

// The kernel table: the paged family's kernels from attention/paged/ and attention/paged/cuda/,
// the DiT family's from their descriptors (attention/backends/<name>/).
//  - the paged family on CPU: the designs in attention/paged/ (paged::cpu_paged_backends()), over
//    a float32 KV pool.
//  - the paged family on CUDA (MMGEN_CUDA builds): the designs in attention/paged/cuda/
//    (cuda::paged::cuda_paged_backends()), bf16 over a bf16 device KV pool.
const std::vector<KernelBuild>& compiled_kernels() {
  static const std::vector<KernelBuild> kernels = [] {
    std::vector<KernelBuild> list;
    // The paged backends with a CPU implementation in attention/paged/.
    for (std::string_view name : paged::cpu_paged_backends())
      list.push_back(
          {.family = Family::Paged, .backend = name, .platform = P::Cpu, .dtypes = {"fp32"}});
#ifdef MMGEN_HAVE_CUDA
    // The paged backends with a CUDA implementation in attention/paged/cuda/ (bf16; built for
    // sm_90a only, as the DiT kernels below are, so sm 90 exactly).
    // The MLA designs take MLA's one head of latent 512 + rope 64 (the latent kernel).
    for (std::string_view name : cuda::paged::cuda_paged_backends()) {
      const bool latent =
          find_backend(Family::Paged, name)->model_attention == ModelAttention::LatentMla;
      list.push_back(
          {.family = Family::Paged,
           .backend = name,
           .platform = P::Cuda,
           .dtypes = {"bf16"},
           .head_sizes = latent ? std::vector<int>{576} : cuda::paged::cuda_paged_head_sizes(),
           .min_sm = 90,
           .max_sm = 90});
    }
#endif
    // The DiT backends' kernels, from their descriptors: every CPU kernel, then every GPU one.
    for (const Platform platform : {P::Cpu, P::Cuda})
      for (const BackendDescriptor* backend : dit_backends())
        for (const KernelBuild& kernel : backend->kernels)
          if (kernel.platform == platform) list.push_back(kernel);
    return list;
  }();
  return kernels;
}

const Machine& this_machine() {
  static const Machine machine = [] {
    Machine m;
    m.platform = P::Cpu;
    m.dtype = "fp32";
    m.description = "cpu";
    for (const auto& kernel : compiled_kernels())
      if (kernel.platform == P::Cpu) m.kernels.push_back(kernel);
    return m;
  }();
  return machine;
}

const Machine& machine_for_device(std::string_view device) {
  if (device != "cuda") return this_machine();
  static const Machine machine = [] {
    Machine m;
    m.platform = P::Cuda;
    m.dtype = "bf16";
#ifdef MMGEN_HAVE_CUDA
    int index = 0, major = 0, minor = 0;
    if (cudaGetDevice(&index) == cudaSuccess &&
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, index) == cudaSuccess &&
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, index) == cudaSuccess)
      m.sm = major * 10 + minor;
    else
      cudaGetLastError();  // no GPU here: clear the error, sm stays 0
#endif
    m.description = m.sm > 0 ? fmt::format("cuda sm{}", m.sm) : std::string("cuda (no GPU found)");
    for (const auto& kernel : compiled_kernels())
      if (kernel.platform == P::Cuda) m.kernels.push_back(kernel);
    return m;
  }();
  return machine;
}

Availability kernel_availability(const Machine& machine, Family family, std::string_view backend,
                                 std::string_view dtype, int64_t head_size) {
  const BackendInfo* entry = find_backend(family, backend);
  if (!entry) return {false, fmt::format("'{}' is not a {} backend", backend, family_name(family))};
  const auto& platforms = entry->platforms;
  if (std::find(platforms.begin(), platforms.end(), machine.platform) == platforms.end()) {
    std::vector<std::string_view> names;
    for (auto p : platforms) names.push_back(platform_name(p));
    return {false, fmt::format("it runs on {} only; this machine is {}", fmt::join(names, ", "),
                               machine.description)};
  }
  if (machine.platform == P::Cuda && entry->min_gpu_sm > 0 && machine.sm > 0 &&
      machine.sm < entry->min_gpu_sm)
    return {false, fmt::format("it needs a {} GPU, which has hardware this one lacks; this "
                               "machine is {}",
                               entry->gpu_arch, machine.description)};
  std::string first_mismatch;
  bool any_kernel = false;
  for (const auto& kernel : machine.kernels) {
    if (kernel.family != family || kernel.backend != entry->name ||
        kernel.platform != machine.platform)
      continue;
    any_kernel = true;
    std::string mismatch = kernel_mismatch(kernel, machine, dtype, head_size);
    if (mismatch.empty()) return {true, {}};
    if (first_mismatch.empty()) first_mismatch = mismatch;
  }
  if (!any_kernel)
    return {false, machine.platform == P::Cpu
                       ? std::string("this build has no cpu kernel for it yet")
                       : fmt::format("this build has no {} kernel for it (needs {})",
                                     platform_name(machine.platform), entry->build_needs)};
  return {false, first_mismatch};
}

std::string auto_backend(const Machine& machine, Family family, std::string_view dtype,
                         int64_t head_size) {
  std::vector<std::string> reasons;
  for (auto name : preference(machine.platform, family)) {
    Availability availability = kernel_availability(machine, family, name, dtype, head_size);
    if (availability.ok) return std::string(name);
    reasons.push_back(fmt::format("{}: {}", name, availability.reason));
  }
  fail("no {} attention backend runs on {} ({}); see `mmgen backends`", family_name(family),
       machine.description, fmt::join(reasons, "; "));
}

}  // namespace mmgen::attention
