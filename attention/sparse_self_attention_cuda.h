// The interface of the block-sparse DiT self-attention backends on the GPU (CUDA builds only), and
// what their GPU halves share. Each backend's GPU half lives in its folder
// (attention/backends/sliding_tile_attn/sliding_tile_attn_cuda.cpp,
// attention/backends/video_sparse_attn/video_sparse_attn_cuda.cpp), with the same settings and the
// same results as its CPU implementation (to bf16 rounding): it regroups the video tokens into its
// boxes on the device (attention/cuda/box_layout.h, edge boxes padded and masked exactly), drives
// the block-sparse attention kernel with per-query-block key-block lists, and undoes the
// regrouping. V-MoBA (attention/backends/vmoba_attn/vmoba_attn_cuda.cpp) adds an expert pass over
// gathered query runs; SLA (attention/backends/sla_attn/sla_attn_cuda.cpp) runs in the token
// order with a linear branch beside; sage_attn and sage_sla_attn compute their scores from INT8
// q and k (quantize_operands); SVG2
// (attention/backends/sparse_video_gen_2_attn/svg2_cuda.cpp) clusters on the device and attends
// each head's tokens permuted into padded cluster order.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "attention/backend.h"
#include "attention/cuda/box_layout.h"
#include "attention/cuda/flash_attention.h"
#include "attention/cuda/int8_quantize.h"
#include "attention/kernels/sta_tiling.h"
#include "core/cuda/device_memory.h"
#include "core/tensor.h"

namespace mmgen::cuda {

// What one self-attention call hands a GPU backend's kernels: bf16 [batch, tokens, heads·head_dim]
// buffers on the device (q and k normed and rotated), video tokens only (Wan's self-attention
// sequence). The backend's forward() builds it from the layer's tensors and context; kernel tests
// and benchmarks call run() with their own buffers.
struct SelfAttentionCall {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* out = nullptr;
  int64_t batch = 0, tokens = 0, heads = 0, head_dim = 0;
  std::array<int64_t, 3> grid{};  // the latent patch grid (t, h, w): tokens = t·h·w
  int64_t step = 0, layer = 0;
  // The run's step and layer counts (leading dense steps and layers given as fractions: SVG2) and
  // the guidance branch (0 conditional, 1 unconditional: SVG2 keeps its centroids per branch, as
  // the CPU's per-branch layer states do).
  int64_t num_steps = 1, num_layers = 1;
  int branch = 0;
  float scale = 1.0f;
  // VSA only: to_gate_compress(attention input) as [batch, tokens, heads·head_dim] float32, or
  // null (a checkpoint without the gate: the output is the fine branch alone, as on the CPU).
  const float* gate = nullptr;
  // The layer's extra checkpoint weights on the GPU (the descriptor's extra_weights: SLA's
  // proj_l); may be null.
  const attention::LayerWeights* weights = nullptr;
};

// What the backend's calls visited, in query-key token pairs (padding excluded), so density and
// the FLOPs of the kept blocks (4·head_dim per pair) can be reported. Filled only when asked
// (VSA's lists live on the device; counting them costs a download).
struct SparseAttentionStats {
  double kept_pairs = 0, total_pairs = 0;
  double density() const { return total_pairs > 0 ? kept_pairs / total_pairs : 1.0; }
};

// The GPU half of a DiT self-attention backend: an attention::AttentionBackend (the one contract
// every layer calls) whose forward() takes the layer's bf16 GPU tensors, and whose kernels run in
// run(). One instance serves every layer of a stack; what it keeps per layer it keys by the
// call's layer index (and guidance branch).
class SparseSelfAttentionCuda : public attention::AttentionBackend {
 public:
  // q, k, v contiguous bf16 [B, t·h·w, H, D] on the GPU, the context's grid the video tokens;
  // returns the output there. Throws mmgen::Error for what the GPU kernels cannot take.
  Tensor forward(const Tensor& q, const Tensor& k, const Tensor& v, float scale,
                 const attention::AttentionContext& context,
                 attention::AttentionStats* stats) final;
  // On the default stream; throws mmgen::Error for shapes it cannot take.
  virtual void run(const SelfAttentionCall& call) = 0;

  void count_pairs(bool enabled) { counting_ = enabled; }
  const SparseAttentionStats& stats() const { return stats_; }
  // Benchmarks: accumulate the attention kernel's own time (CUDA events around each launch,
  // synchronising), apart from the regrouping and list building around it.
  void time_kernel(bool enabled) { timing_ = enabled; }
  double kernel_seconds() const { return kernel_seconds_; }
  // Tests and benchmarks: run the portable attention kernel even on a Hopper GPU (what every
  // other GPU runs), and the steps around it that kernel needs (VSA then regroups its cubes).
  void use_portable_kernel(bool enabled) { portable_ = enabled; }
  // Whether the Hopper kernel runs (an sm_90 GPU, the portable kernel not asked for).
  bool hopper_kernel() const { return !portable_ && flash_attention_has_hopper(); }
  // With time_kernel on, the time of the backend's other steps, by name, as far as it reports
  // them (synchronising around each).
  const std::vector<std::pair<std::string, double>>& step_seconds() const { return steps_; }

 protected:
  // What a backend derives from the context before run() besides q, k and v (VSA: its gate from
  // the attention input), set in `call`; the tensor returned keeps it alive through the run.
  virtual Tensor prepare(const attention::AttentionContext& /*context*/, const Tensor& /*q*/,
                         SelfAttentionCall& /*call*/) const {
    return Tensor();
  }
  void run_kernel(const FlashAttentionArgs& args);
  // Adds the time from the last mark (or the call's start) to `name`'s step when timing.
  void mark_step(const char* name);
  void start_steps();

  bool counting_ = false, timing_ = false, portable_ = false;
  SparseAttentionStats stats_;
  double kernel_seconds_ = 0;
  std::vector<std::pair<std::string, double>> steps_;
  double last_mark_ = 0;
};

// The DiT self-attention backends that have a GPU version in this build (their descriptors have a
// CUDA factory).
bool has_cuda_self_attention(std::string_view backend);

// The GPU backend for `backend` (canonical name) with its --attention-backend-config (validated
// here, as make_dit_backend does) and the plan's resources; throws Error for a backend without a
// GPU version.
std::unique_ptr<SparseSelfAttentionCuda> make_sparse_self_attention_cuda(
    std::string_view backend, const nlohmann::json& config,
    const attention::BackendResources& resources = {});

// ---- shared by the backends' GPU halves

template <typename T>
DeviceBuffer upload_vector(const std::vector<T>& values) {
  DeviceBuffer buffer(std::max<size_t>(values.size(), 1) * sizeof(T));
  if (!values.empty()) buffer.upload(values.data(), values.size() * sizeof(T));
  return buffer;
}

// Attention args over bf16 [batch, seq, heads·head_dim] buffers.
FlashAttentionArgs packed_args(const void* q, const void* k, const void* v, void* out,
                               int64_t batch, int64_t seq, int64_t heads, int64_t head_dim,
                               float scale);
// Dense attention over the call's own buffers.
FlashAttentionArgs dense_args(const SelfAttentionCall& call);
// Throws Error, naming `backend`, for a call the GPU backends cannot take.
void check_call(const char* backend, const SelfAttentionCall& call);

// SageAttention's INT8 operands for a call (the INT8 score kernel reads them; v and out stay the
// call's): quantised copies of q and k and their scales.
struct Int8Operands {
  DeviceBuffer q, k, q_scales, k_scales;
};
// Quantises the call's q and k as `query` and `key` say (their grouping, arithmetic, smoothing and
// multiplier; the pointers, strides and sizes are the call's) and points `args` at the result.
Int8Operands quantize_operands(const SelfAttentionCall& call, Int8QuantizeArgs query,
                               Int8QuantizeArgs key, FlashAttentionArgs& args);

// The video tokens of a tiling in padded box order: box b is slots [b·stride, (b + 1)·stride),
// its valid tokens first (the CPU tiling's order inside the box), padding after.
struct SlotLayout {
  attention::Grid3 grid{};
  int64_t boxes = 0, stride = 0, slots = 0;
  std::vector<int64_t> lengths;  // valid tokens per box
  DeviceBuffer token_of_slot, slot_of_token;
  DeviceBuffer key_lengths;  // valid tokens per key block of kFlashBlockN slots
};

std::shared_ptr<const SlotLayout> make_layout(const attention::BoxTiling& tiling, int64_t stride);

// q, k and v regrouped into a layout's slots, attention through `args` (lists set by the caller),
// and the result written back in token order: by the kernel itself (write_in_token_order), or
// from `out`, the result in slots, by the caller (V-MoBA's merge, VSA's gated scatter).
struct SlotBuffers {
  DeviceBuffer q, k, v, out;
  // gather = false: q, k and v are left for the caller to fill (VSA gathers with its means).
  SlotBuffers(const SelfAttentionCall& call, const SlotLayout& layout, bool gather = true) {
    const int64_t width = call.heads * call.head_dim;
    const size_t bytes = size_t(call.batch * layout.slots * width) * 2;
    q = DeviceBuffer(bytes), k = DeviceBuffer(bytes), v = DeviceBuffer(bytes),
    out = DeviceBuffer(bytes);
    if (!gather) return;
    gather_to_slots(call.q, q.data(), call.batch, call.tokens, layout.slots, width,
                    layout.token_of_slot.as<int32_t>());
    gather_to_slots(call.k, k.data(), call.batch, call.tokens, layout.slots, width,
                    layout.token_of_slot.as<int32_t>());
    gather_to_slots(call.v, v.data(), call.batch, call.tokens, layout.slots, width,
                    layout.token_of_slot.as<int32_t>());
  }
  // Points the kernel's output at call.out in the tokens' order (through token_of_slot): no
  // scatter pass afterwards.
  static void write_in_token_order(FlashAttentionArgs& a, const SelfAttentionCall& call,
                                   const SlotLayout& layout) {
    const int64_t width = call.heads * call.head_dim;
    a.out = call.out;
    a.out_strides = {call.tokens * width, width, call.head_dim};
    a.out_rows = layout.token_of_slot.as<int32_t>();
  }
  FlashAttentionArgs args(const SelfAttentionCall& call, const SlotLayout& layout) {
    FlashAttentionArgs a = packed_args(q.data(), k.data(), v.data(), out.data(), call.batch,
                                       layout.slots, call.heads, call.head_dim, call.scale);
    a.key_block_lengths = layout.key_lengths.as<int32_t>();
    return a;
  }
};

}  // namespace mmgen::cuda
