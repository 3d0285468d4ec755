// The block-sparse DiT self-attention backends on the GPU: sliding_tile_attn (STA) and
// video_sparse_attn (VSA), with the same settings and the same results as their CPU oracles in
// attention/backends/ (to bf16 rounding). Each regroups the video tokens into its boxes on the
// device (attention/cuda/box_layout.h, edge boxes padded and masked exactly), drives the
// block-sparse attention kernel with per-query-block key-block lists, and undoes the regrouping:
// STA's lists come from the host (static per window), VSA's from its coarse branch on the device
// (attention/cuda/vsa_select.h). V-MoBA, SLA and SVG2 have no GPU version yet.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "attention/cuda/flash_attention.h"

namespace mmgen::cuda {

// One self-attention call of the GPU transformer: bf16 [batch, tokens, heads·head_dim] buffers on
// the device (q and k normed and rotated), video tokens only (Wan's self-attention sequence).
struct SelfAttentionCall {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* out = nullptr;
  int64_t batch = 0, tokens = 0, heads = 0, head_dim = 0;
  std::array<int64_t, 3> grid{};  // the latent patch grid (t, h, w): tokens = t·h·w
  int64_t step = 0, layer = 0;
  float scale = 1.0f;
  // VSA only: to_gate_compress(attention input) as [batch, tokens, heads·head_dim] float32, or
  // null (a checkpoint without the gate: the output is the fine branch alone, as on the CPU).
  const float* gate = nullptr;
};

// What the backend's calls visited, in query-key token pairs (padding excluded), so density and
// the FLOPs of the kept blocks (4·head_dim per pair) can be reported. Filled only when asked
// (VSA's lists live on the device; counting them costs a download).
struct SparseAttentionStats {
  double kept_pairs = 0, total_pairs = 0;
  double density() const { return total_pairs > 0 ? kept_pairs / total_pairs : 1.0; }
};

class SparseSelfAttentionCuda {
 public:
  virtual ~SparseSelfAttentionCuda() = default;
  virtual std::string_view name() const = 0;
  // On the default stream; throws mmgen::Error for shapes it cannot take.
  virtual void forward(const SelfAttentionCall& call) = 0;
  // Whether `layer`'s calls should carry the VSA gate (the backend uses it).
  virtual bool wants_gate() const { return false; }

  void count_pairs(bool enabled) { counting_ = enabled; }
  const SparseAttentionStats& stats() const { return stats_; }
  // Benchmarks: accumulate the attention kernel's own time (CUDA events around each launch,
  // synchronising), apart from the regrouping and list building around it.
  void time_kernel(bool enabled) { timing_ = enabled; }
  double kernel_seconds() const { return kernel_seconds_; }

 protected:
  void run_kernel(const FlashAttentionArgs& args);

  bool counting_ = false, timing_ = false;
  SparseAttentionStats stats_;
  double kernel_seconds_ = 0;
};

// The DiT self-attention backends that have a GPU version in this build.
bool has_cuda_self_attention(std::string_view backend);

// The GPU backend for `backend` (canonical name) with its validated --attention-backend-config;
// throws Error for a backend without a GPU version.
std::unique_ptr<SparseSelfAttentionCuda> make_sparse_self_attention_cuda(
    std::string_view backend, const nlohmann::json& config);

}  // namespace mmgen::cuda
