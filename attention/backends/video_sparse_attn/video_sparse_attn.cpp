// video_sparse_attn: Video Sparse Attention (Zhang et al., arXiv 2505.13389) on the CPU. Tokens are
// regrouped into 4x4x4 cubes (edge cubes may be partial); a coarse branch attends over cube means
// and, per query cube, picks the top-k key cubes by coarse score; a fine branch runs exact
// attention over the tokens of those cubes (the shared block-sparse core); the output is
// coarse · gate + fine, the coarse output of a cube broadcast to its tokens.
//
// The gate is to_gate_compress applied to the attention input (see vsa_gate.h): the
// caller passes it, computed, as LayerWeights["gate"]. Without it the gate is zero (the output is
// the fine branch alone, as for a checkpoint without trained gates; logged once). Note that
// sparsity 0 with a gate is not dense attention: the gated coarse output is still added.
//
// Text tokens (an mmgen extension; upstream VSA is video-only): text keys are visible to every
// query, text queries attend to every key, and the coarse branch and top-k cover video cubes only.
#include <spdlog/spdlog.h>

#include <atomic>
#include <memory>
#include <mutex>

#include "attention/backends/descriptor.h"
#include "attention/backends/video_sparse_attn/vsa_coarse.h"
#include "attention/backends/video_sparse_attn/vsa_gate.h"
#include "attention/backends/video_sparse_attn/vsa_settings.h"
#include "attention/kernels/sta_tiling.h"
#include "core/error.h"
#ifdef MMGEN_HAVE_CUDA
#include "attention/backends/video_sparse_attn/video_sparse_attn_cuda.h"
#endif

namespace mmgen::attention::video_sparse_attn {

namespace {

using json = nlohmann::json;
using P = Platform;

constexpr int64_t kCube = 4;
constexpr int64_t kCubeVolume = kCube * kCube * kCube;

void log_missing_gate_once() {
  static std::atomic<bool> logged{false};
  if (!logged.exchange(true))
    spdlog::info(
        "video_sparse_attn: no to_gate_compress gate in this checkpoint; the gate is zero, so the "
        "output is the fine (block-sparse) branch alone");
}

// The gate as [B, S, H, D], or undefined when the call has none: the one the call carries
// (LayerWeights["gate"]), else to_gate_compress applied to the call's attention input. A layer
// with the projection weights but neither is a wiring error (the gate needs the attention input,
// not q, k or v).
Tensor gate_of(const AttentionContext& context, const Tensor& q) {
  if (!context.weights) return Tensor();
  const auto gate = context.weights->find(kVsaGateKey);
  if (gate == context.weights->end()) {
    if (!context.weights->count(kVsaGateWeightKey)) return Tensor();
    check(context.attention_input != nullptr,
          "video_sparse_attn: layer {} has to_gate_compress weights but the call carries neither "
          "its attention input (AttentionContext::attention_input) nor a computed gate "
          "(vsa_gate(weights, attention_input, heads) as LayerWeights[\"gate\"])",
          context.layer_index);
    return vsa_gate(*context.weights, *context.attention_input, q.size(2))
        .to(DType::F32)
        .contiguous()
        .view(q.shape());
  }
  const Tensor& g = gate->second;
  const int64_t batch = q.size(0), length = q.size(1), heads = q.size(2), dim = q.size(3);
  const bool per_head = g.dim() == 4 && g.shape() == q.shape();
  const bool flat =
      g.dim() == 3 && g.size(0) == batch && g.size(1) == length && g.size(2) == heads * dim;
  check(per_head || flat,
        "video_sparse_attn: gate is {}, expected [{}, {}, {}, {}] or [{}, {}, {}]",
        shape_string(g.shape()), batch, length, heads, dim, batch, length, heads * dim);
  return g.to(DType::F32).contiguous().view({batch, length, heads, dim});
}

class VideoSparseBackend final : public AttentionBackend {
 public:
  explicit VideoSparseBackend(const Settings& settings) : sparsity_(settings.sparsity) {}

  std::string_view name() const override { return "video_sparse_attn"; }
  bool reads_attention_input(const LayerWeights& weights) const override {
    return weights.count(kVsaGateWeightKey) > 0;
  }

  Tensor forward(const Tensor& q, const Tensor& k, const Tensor& v, float scale,
                 const AttentionContext& context, AttentionStats* stats) override {
    check(q.dim() == 4 && k.dim() == 4 && v.shape() == k.shape(),
          "video_sparse_attn: expects q, k, v as [batch, seq, heads, head_dim]");
    const int64_t batch = q.size(0), q_len = q.size(1), heads = q.size(2), dim = q.size(3);
    const Grid3 grid = context.grid;
    // VSA is for video self-attention; cross-attention and non-video calls stay dense.
    if (context.is_cross || grid[0] <= 0 || grid[1] <= 0 || grid[2] <= 0)
      return full_attention(q, k, v, scale, stats);
    const int64_t text_length =
        text_tokens_in_sequence("video_sparse_attn", q_len, k.size(1), grid, context.text_length);
    const Tensor gate = gate_of(context, q);
    if (!gate.defined()) log_missing_gate_once();

    std::shared_ptr<const BoxTiling> tiling = tiling_for(grid, text_length);
    const std::vector<int64_t>& order = tiling->order;
    const Tensor qt = gather_tokens(q, order), kt = gather_tokens(k, order),
                 vt = gather_tokens(v, order);
    const int64_t cubes = tiling->box_count();
    const VsaCoarse coarse =
        vsa_coarse(qt.to(DType::F32), kt.to(DType::F32), vt.to(DType::F32), scale, *tiling,
                   vsa_topk(sparsity_, cubes), kCubeVolume, gate.defined());
    if (stats)
      for (const auto& pattern : coarse.patterns) {
        stats->visited_blocks += pattern.visited();
        stats->total_blocks += pattern.total();
      }
    Tensor out = block_sparse_attention(qt, kt, vt, scale, coarse.patterns);

    if (gate.defined()) {
      // out += coarse[cube of the token] · gate, video tokens only.
      const Tensor gate_tiled = gather_tokens(gate, order);
      const float* g = gate_tiled.data<float>();
      const float* c = coarse.output.data<float>();
      float* o = out.data<float>();
      const BlockLayout& blocks = tiling->video_blocks;
#pragma omp parallel for collapse(2) schedule(static)
      for (int64_t b = 0; b < batch; ++b)
        for (int64_t cube = 0; cube < cubes; ++cube)
          for (int64_t t = blocks.start[size_t(cube)];
               t < blocks.start[size_t(cube)] + blocks.length[size_t(cube)]; ++t)
            for (int64_t h = 0; h < heads; ++h) {
              const int64_t at = ((b * q_len + t) * heads + h) * dim;
              const float* coarse_row = c + ((b * heads + h) * cubes + cube) * dim;
              for (int64_t d = 0; d < dim; ++d) o[at + d] += coarse_row[d] * g[at + d];
            }
    }
    return scatter_tokens(out, order, q_len);
  }

 private:
  std::shared_ptr<const BoxTiling> tiling_for(const Grid3& grid, int64_t text_length) {
    std::lock_guard lock(mutex_);
    if (!tiling_ || tiling_->grid != grid || tiling_->text_length != text_length)
      tiling_ =
          std::make_shared<const BoxTiling>(tile_video(grid, {kCube, kCube, kCube}, text_length));
    return tiling_;
  }

  Tensor full_attention(const Tensor& q, const Tensor& k, const Tensor& v, float scale,
                        AttentionStats* stats) const {
    const BlockSparsePattern pattern = BlockSparsePattern::dense(
        BlockLayout::uniform(q.size(1), kCubeVolume), BlockLayout::uniform(k.size(1), kCubeVolume));
    if (stats) {
      const int64_t blocks = q.size(0) * q.size(2) * pattern.total();
      stats->visited_blocks += blocks;
      stats->total_blocks += blocks;
    }
    return block_sparse_attention(q, k, v, scale, {pattern});
  }

  double sparsity_;
  std::mutex mutex_;
  std::shared_ptr<const BoxTiling> tiling_;
};

}  // namespace

const BackendDescriptor& descriptor() {
  static const BackendDescriptor d = {
      .info = {.name = "video_sparse_attn",
               .family = Family::Dit,
               .summary = "Video Sparse Attention: coarse attention over 4x4x4 cube means picks "
                          "the top-k key cubes; fine attention inside them; gated sum of both",
               .aliases = {"vsa"},
               .platforms = {P::Cuda, P::Cpu},
               .build_needs = "CUDA: the VSA kernel; CPU: mmgen's block-sparse kernel",
               .gpu_arch = "sm90",
               .dtypes = {"bf16", "fp32 (CPU)"},
               .head_sizes = "64, 128",
               .sparse = true,
               .extra_weights = "to_gate_compress projection (VSA-trained checkpoints); zero gate "
                                "without it",
               .per_step_state = "latent grid",
               .config =
                   {
                       {.name = "sparsity",
                        .type = ConfigType::Float,
                        .default_value = 0.0,
                        .help = "fraction of key cubes dropped",
                        .min = 0.0,
                        .max = 1.0,
                        .max_inclusive = false,
                        .aliases = {"VSA_sparsity"}},
                   }},
      .kernels = {cpu_kernel("video_sparse_attn")
#ifdef MMGEN_HAVE_CUDA
                      ,
                  hopper_kernel("video_sparse_attn")
#endif
      },
      .cpu = [](const json& settings,
                const BackendResources&) -> std::unique_ptr<AttentionBackend> {
        return std::make_unique<VideoSparseBackend>(Settings::from(settings));
      },
#ifdef MMGEN_HAVE_CUDA
      .cuda = make_cuda,
#endif
      .extra_weights = {"to_gate_compress."},
      .gpu_compute_weights = {kVsaGateWeightKey},
  };
  return d;
}

}  // namespace mmgen::attention::video_sparse_attn
