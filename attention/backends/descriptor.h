// One DiT attention backend, described in one place: its catalogue row (name, platforms, needs,
// settings schema, fallback), the kernels this build has for it, how to build it on the CPU and
// on the GPU, and the checkpoint weights it reads. Each backend defines its descriptor in its own
// folder (attention/backends/<name>/<name>.cpp); attention/backends/all.cpp lists them, and the
// catalogue, the kernel table, make_dit_backend, the GPU factory and the pipeline's extra weights
// all read that list, so nothing else has to agree with it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "attention/backend.h"
#include "attention/catalogue.h"

namespace mmgen::cuda {
class SparseSelfAttentionCuda;  // attention/sparse_self_attention_cuda.h (CUDA builds only)
}

namespace mmgen::attention {

// Both factories get the settings validated against info.config (defaults filled in) and the
// resources the attention plan loaded for the run.
using BackendFactory = std::function<std::unique_ptr<AttentionBackend>(
    const nlohmann::json& settings, const BackendResources& resources)>;
using CudaBackendFactory = std::function<std::unique_ptr<cuda::SparseSelfAttentionCuda>(
    const nlohmann::json& settings, const BackendResources& resources)>;

// A model component that runs the backend, for checking what the backend loads against it.
struct ResourceUse {
  std::string where;      // for errors: the model folder
  std::string component;  // model_index.json name ("transformer")
  int64_t layers = 0;     // 0: its config does not say
  int64_t heads = 0;
  bool on_gpu = false;  // --device cuda: the component's attention runs on the GPU
};

// Loads what the backend needs once per run besides its settings (sliding_tile_attn: the
// mask-strategy file) into `resources`, checked against the run's steps and every component that
// uses the backend. The attention plan calls it before any weights are read.
using ResourceLoader =
    std::function<void(const nlohmann::json& settings, int64_t steps,
                       const std::vector<ResourceUse>& uses, BackendResources& resources)>;

// The leading denoising steps a sparse backend runs dense under its settings, and the setting that
// decides it ("skip_time_steps 15"), for a run of `steps` steps.
struct DenseSteps {
  int64_t steps = 0;  // at most the run's steps
  std::string setting;
  // The settings ask for full attention everywhere on purpose (STA_searching measures against
  // it), so an all-dense run is no mistake to warn about.
  bool on_purpose = false;
};
using DenseStepsRule = std::function<DenseSteps(const nlohmann::json& settings, int64_t steps)>;

struct BackendDescriptor {
  BackendInfo info = {};  // the catalogue row, settings schema included
  std::vector<KernelBuild> kernels =
      {};                   // the kernels this build has for it (CPU; CUDA in CUDA builds)
  BackendFactory cpu = {};  // empty: no CPU kernel in this build
  // GPU self-attention (CUDA builds only; empty elsewhere). Dense backends with a CUDA kernel row
  // but no factory run in the GPU model's own dense attention, on FlashAttention, or on the plain
  // reference kernel with `gpu_dense_reference` (torch_sdpa: what the others are checked against).
  CudaBackendFactory cuda = {};
  bool gpu_dense_reference = false;
  // Checkpoint tensors it reads per transformer block, as fragments of the weight name after the
  // block prefix ("proj_l." matches blocks.3.attn1.proj_l.weight); empty: none.
  std::vector<std::string_view> extra_weights = {};
  // Of those, the keys (after the block prefix) its GPU half reads in the compute dtype, bf16, as
  // the model's own products (VSA's to_gate_compress.weight); the rest go to the GPU as stored.
  std::vector<std::string_view> gpu_compute_weights = {};
  ResourceLoader load_resources = {};  // empty: nothing to load
  // Sparse backends with leading dense steps (sliding_tile_attn's skip_time_steps, vmoba_attn's
  // first_full_step): how many of a run's steps run dense. Empty: every step runs as the backend
  // does (all sparse for a sparse backend).
  DenseStepsRule dense_steps = {};
};

// The CPU kernel row every backend with a CPU implementation has (float32, any head size).
KernelBuild cpu_kernel(std::string_view backend);
// A GPU kernel row of this build's CUDA kernels (attention/cuda/, built for sm_90a only, so sm 90
// exactly; bf16). Empty head_sizes: any.
KernelBuild hopper_kernel(std::string_view backend, std::vector<int> head_sizes = {64, 128});

// Every DiT backend, in documentation order (attention/backends/all.cpp).
const std::vector<const BackendDescriptor*>& dit_backends();

// The descriptor of a DiT backend by canonical name; null when there is none.
const BackendDescriptor* find_dit_descriptor(std::string_view name);

// Whether the backend reads a per-layer checkpoint weight named with `fragment` ("proj_l."), and
// every backend that does (for messages).
bool backend_reads_weight(std::string_view backend, std::string_view fragment);
std::vector<std::string> backends_reading_weight(std::string_view fragment);

}  // namespace mmgen::attention
