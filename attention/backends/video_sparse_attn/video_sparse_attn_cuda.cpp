// video_sparse_attn on the GPU: the coarse branch (cube means, top-k key cubes) runs on the device
// (attention/cuda/vsa_select.h) and its selection drives the block-sparse attention kernel.
#include "attention/backends/video_sparse_attn/video_sparse_attn_cuda.h"

#include <mutex>
#include <vector>

#include "attention/backends/video_sparse_attn/vsa_coarse.h"
#include "attention/backends/video_sparse_attn/vsa_settings.h"
#include "attention/cuda/vsa_select.h"
#include "attention/sparse_self_attention_cuda.h"
#include "attention/sta_tiling.h"
#include "core/cuda/cuda_check.h"
#include "core/error.h"

namespace mmgen::attention::video_sparse_attn {

namespace {

using namespace mmgen::cuda;

class VideoSparseCuda final : public SparseSelfAttentionCuda {
 public:
  explicit VideoSparseCuda(const Settings& settings) : sparsity_(settings.sparsity) {}

  std::string_view name() const override { return "video_sparse_attn"; }
  bool wants_gate() const override { return true; }

  void forward(const SelfAttentionCall& call) override {
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

    SlotBuffers buffers(call, layout, /*gather=*/false);
    const size_t means_bytes = size_t(pairs * cubes * call.head_dim) * sizeof(float);
    DeviceBuffer qc(means_bytes), kc(means_bytes), vc, coarse;
    const int32_t* lengths = layout.key_lengths.as<int32_t>();  // one key block per cube
    const int32_t* token_of_slot = layout.token_of_slot.as<int32_t>();
    // Each operand is gathered into cube order and its cube means taken in the same pass.
    vsa_gather_with_means(call.q, buffers.q.data(), qc.as<float>(), call.batch, call.tokens, cubes,
                          call.heads, call.head_dim, token_of_slot, lengths);
    vsa_gather_with_means(call.k, buffers.k.data(), kc.as<float>(), call.batch, call.tokens, cubes,
                          call.heads, call.head_dim, token_of_slot, lengths);
    if (call.gate) {
      vc = DeviceBuffer(means_bytes), coarse = DeviceBuffer(means_bytes);
      vsa_gather_with_means(call.v, buffers.v.data(), vc.as<float>(), call.batch, call.tokens,
                            cubes, call.heads, call.head_dim, token_of_slot, lengths);
    } else {
      gather_to_slots(call.v, buffers.v.data(), call.batch, call.tokens, layout.slots,
                      call.heads * call.head_dim, token_of_slot);
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
    FlashAttentionArgs args = buffers.args(call, layout);
    args.block_offsets = offsets_.as<int32_t>();
    args.block_indices = selected.as<int32_t>();
    args.lists_per_half = true;
    // Without a gate the kernel writes the output in the tokens' order itself; with one, the
    // scatter adds the gated coarse branch on the way back.
    if (!call.gate) SlotBuffers::write_in_token_order(args, call, layout);
    run_kernel(args);
    if (call.gate)
      scatter_from_slots_gated(buffers.out.data(), call.out, call.batch, call.tokens, layout.slots,
                               call.heads, call.head_dim, layout.slot_of_token.as<int32_t>(),
                               coarse.as<float>(), call.gate);
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

  double sparsity_;
  std::mutex mutex_;
  std::shared_ptr<const SlotLayout> layout_;
  DeviceBuffer offsets_;  // i·topk: the kernel's list offsets for the last shape
  int64_t offsets_topk_ = 0;
};

}  // namespace

std::unique_ptr<cuda::SparseSelfAttentionCuda> make_cuda(const nlohmann::json& settings,
                                                         const BackendResources& resources) {
  return std::make_unique<VideoSparseCuda>(Settings::from(settings));
}

}  // namespace mmgen::attention::video_sparse_attn
