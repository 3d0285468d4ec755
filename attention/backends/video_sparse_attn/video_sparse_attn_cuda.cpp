// video_sparse_attn on the GPU: the coarse branch (cube means, top-k key cubes) runs on the device
// (vsa_select.h, this folder) and its selection drives the block-sparse attention kernel, which
// on Hopper reads the cubes straight from q, k and v (FlashAttentionArgs::video_grid).
#include "attention/backends/video_sparse_attn/video_sparse_attn_cuda.h"

#include <algorithm>
#include <mutex>
#include <optional>
#include <vector>

#include "attention/backends/video_sparse_attn/vsa_coarse.h"
#include "attention/backends/video_sparse_attn/vsa_gate.h"
#include "attention/backends/video_sparse_attn/vsa_select.h"
#include "attention/backends/video_sparse_attn/vsa_settings.h"
#include "attention/kernels/sta_tiling.h"
#include "attention/sparse_self_attention_cuda.h"
#include "core/cuda/cuda_check.h"
#include "core/error.h"

namespace mmgen::attention::video_sparse_attn {

namespace {

using namespace mmgen::cuda;

class VideoSparseCuda final : public SparseSelfAttentionCuda {
 public:
  explicit VideoSparseCuda(const Settings& settings) : sparsity_(settings.sparsity) {}

  std::string_view name() const override { return "video_sparse_attn"; }
  bool reads_attention_input(const LayerWeights& weights) const override {
    return weights.count(kVsaGateWeightKey) > 0;
  }

  // The gate of a checkpoint with to_gate_compress: the projection of the call's attention input
  // (its weight bf16 on the GPU, as the model's other products), float32 out.
  Tensor prepare(const AttentionContext& context, const Tensor& q,
                 SelfAttentionCall& call) const override {
    if (!context.weights || !context.attention_input) return Tensor();
    const Tensor gate = vsa_gate(*context.weights, *context.attention_input, q.size(2));
    if (!gate.defined()) return gate;
    check(gate.device() == Device::CUDA && gate.dtype() == DType::F32 && gate.is_contiguous() &&
              gate.numel() == q.numel(),
          "video_sparse_attn on the GPU: the gate must be float32 {} on the GPU, got {} {}",
          shape_string(q.shape()), dtype_name(gate.dtype()), shape_string(gate.shape()));
    call.gate = gate.data<float>();
    return gate;
  }

  void run(const SelfAttentionCall& call) override {
    check_call("video_sparse_attn", call);
    std::lock_guard lock(mutex_);
    const Grid3 grid = {call.grid[0], call.grid[1], call.grid[2]};
    if (!layout_ || layout_->grid != grid)
      layout_ = make_layout(tile_video(grid, {4, 4, 4}, 0), kVsaCube);
    const SlotLayout& layout = *layout_;
    const int64_t cubes = layout.boxes, pairs = call.batch * call.heads;
    check(cubes <= vsa_max_cubes(),
          "video_sparse_attn on the GPU: {} cubes exceed the {} its selection kernel holds", cubes,
          vsa_max_cubes());
    const int64_t topk = vsa_topk(sparsity_, cubes);
    const size_t means_bytes = size_t(pairs * cubes * call.head_dim) * sizeof(float);
    DeviceBuffer qc(means_bytes), kc(means_bytes), vc, coarse;
    if (call.gate) vc = DeviceBuffer(means_bytes), coarse = DeviceBuffer(means_bytes);

    // The Hopper kernel reads the cubes in place, so only the means take a pass over q and k (and
    // v, with a gate); the portable kernel needs them regrouped into slots, the means taken in the
    // same pass.
    std::optional<SlotBuffers> slots;
    FlashAttentionArgs args;
    if (hopper_kernel()) {
      const void* operands[3] = {call.q, call.k, call.v};
      float* means[3] = {qc.as<float>(), kc.as<float>(), vc.as<float>()};
      vsa_cube_means(operands, means, call.gate ? 3 : 2, call.batch, call.grid, call.heads,
                     call.head_dim);
      args = dense_args(call);
      for (int a = 0; a < 3; ++a) args.video_grid[a] = call.grid[size_t(a)];
    } else {
      slots.emplace(call, layout, /*gather=*/false);
      const int32_t* lengths = layout.key_lengths.as<int32_t>();  // one key block per cube
      const int32_t* token_of_slot = layout.token_of_slot.as<int32_t>();
      vsa_gather_with_means(call.q, slots->q.data(), qc.as<float>(), call.batch, call.tokens, cubes,
                            call.heads, call.head_dim, token_of_slot, lengths);
      vsa_gather_with_means(call.k, slots->k.data(), kc.as<float>(), call.batch, call.tokens, cubes,
                            call.heads, call.head_dim, token_of_slot, lengths);
      if (call.gate)
        vsa_gather_with_means(call.v, slots->v.data(), vc.as<float>(), call.batch, call.tokens,
                              cubes, call.heads, call.head_dim, token_of_slot, lengths);
      else
        gather_to_slots(call.v, slots->v.data(), call.batch, call.tokens, layout.slots,
                        call.heads * call.head_dim, token_of_slot);
      args = slots->args(call, layout);
      // Without a gate the kernel writes the output in the tokens' order itself.
      if (!call.gate) SlotBuffers::write_in_token_order(args, call, layout);
    }
    DeviceBuffer selected(size_t(pairs * cubes * topk) * sizeof(int32_t));
    vsa_select(qc.as<float>(), kc.as<float>(), call.gate ? vc.as<float>() : nullptr, call.scale,
               call.batch, call.heads, cubes, cubes, call.head_dim, topk, selected.as<int32_t>(),
               call.gate ? coarse.as<float>() : nullptr);
    // Every cube keeps topk key cubes: the lists per 64 query rows are `selected` itself.
    if (offsets_.size() != size_t(pairs * cubes + 1) * sizeof(int32_t) || offsets_topk_ != topk) {
      std::vector<int32_t> offsets(size_t(pairs * cubes + 1));
      for (size_t i = 0; i < offsets.size(); ++i) offsets[i] = int32_t(int64_t(i) * topk);
      offsets_ = upload_vector(offsets);
      offsets_topk_ = topk;
    }
    args.block_offsets = offsets_.as<int32_t>();
    args.block_indices = selected.as<int32_t>();
    args.lists_per_half = true;
    // With a gate the fine output lands in slots (cube order), and the scatter adds the gated
    // coarse branch on its way back to the tokens.
    DeviceBuffer fine;
    if (call.gate && !slots) {
      fine = DeviceBuffer(size_t(call.batch * layout.slots * call.heads * call.head_dim) * 2);
      args.out = fine.data();
      args.out_strides = {layout.slots * call.heads * call.head_dim, call.heads * call.head_dim,
                          call.head_dim};
      args.out_rows = slot_of_cube_row(layout);
    }
    run_kernel(args);
    if (call.gate)
      scatter_from_slots_gated(slots ? slots->out.data() : fine.data(), call.out, call.batch,
                               call.tokens, layout.slots, call.heads, call.head_dim,
                               layout.slot_of_token.as<int32_t>(), coarse.as<float>(), call.gate);
    if (counting_) count(selected, pairs, cubes, topk, call);
  }

 private:
  void count(const DeviceBuffer& selected, int64_t pairs, int64_t cubes, int64_t topk,
             const SelfAttentionCall& call) {
    std::vector<int32_t> host(size_t(pairs * cubes * topk));
    MMGEN_CUDA_CHECK(cudaDeviceSynchronize());
    selected.download(host.data(), host.size() * sizeof(int32_t));
    const std::vector<int64_t>& lengths = layout_->lengths;
    for (int64_t row = 0; row < pairs * cubes; ++row) {
      double keys = 0;
      for (int64_t e = 0; e < topk; ++e)
        keys += double(lengths[size_t(host[size_t(row * topk + e)])]);
      stats_.kept_pairs += double(lengths[size_t(row % cubes)]) * keys;
    }
    stats_.total_pairs += double(pairs) * double(call.tokens) * double(call.tokens);
  }

  // Row r of cube c as the kernel reads it in place (t·16 + h·4 + w, past-the-edge rows
  // included) -> the cube's slot for the same token in the layout (its tokens first, in the same
  // order), so a gated call's fine output lands in the slots the scatter reads.
  const int32_t* slot_of_cube_row(const SlotLayout& layout) {
    if (slot_rows_grid_ != layout.grid) {
      const Grid3& grid = layout.grid;
      const int64_t along_h = (grid[1] + 3) / 4, along_w = (grid[2] + 3) / 4;
      std::vector<int32_t> slots(static_cast<size_t>(layout.slots), -1);
      for (int64_t c = 0; c < layout.boxes; ++c) {
        const int64_t t0 = 4 * (c / (along_h * along_w)), h0 = 4 * (c / along_w % along_h),
                      w0 = 4 * (c % along_w);
        const int64_t in_t = std::min<int64_t>(4, grid[0] - t0),
                      in_h = std::min<int64_t>(4, grid[1] - h0),
                      in_w = std::min<int64_t>(4, grid[2] - w0);
        for (int64_t r = 0; r < kVsaCube; ++r) {
          const int64_t t = r / 16, h = r / 4 % 4, w = r % 4;
          if (t < in_t && h < in_h && w < in_w)
            slots[size_t(c * kVsaCube + r)] = int32_t(c * kVsaCube + (t * in_h + h) * in_w + w);
        }
      }
      slot_rows_ = upload_vector(slots);
      slot_rows_grid_ = grid;
    }
    return slot_rows_.as<int32_t>();
  }

  double sparsity_;
  std::mutex mutex_;
  std::shared_ptr<const SlotLayout> layout_;
  DeviceBuffer offsets_;    // i·topk: the kernel's list offsets for the last shape
  DeviceBuffer slot_rows_;  // slot_of_cube_row's map for slot_rows_grid_
  Grid3 slot_rows_grid_{};
  int64_t offsets_topk_ = 0;
};

}  // namespace

std::unique_ptr<cuda::SparseSelfAttentionCuda> make_cuda(const nlohmann::json& settings,
                                                         const BackendResources& resources) {
  return std::make_unique<VideoSparseCuda>(Settings::from(settings));
}

}  // namespace mmgen::attention::video_sparse_attn
