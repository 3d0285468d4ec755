// vmoba_attn: V-MoBA (mixture of block attention for video). Video tokens are cut into chunks
// whose shape cycles by layer (temporal, spatial, spatio-temporal); every query attends its own
// chunk plus the chunks whose mean key is most similar to it (threshold or top-k selection,
// vmoba_select.h). Computed in two exact passes over the reordered tokens, merged by
// their log-sum-exp:
//   1. own chunks: a block-diagonal block-sparse pass (text tokens, if any, attended by everyone
//      and attending everything);
//   2. experts: per (batch, head) the queries that chose chunk c are gathered into one run that
//      attends chunk c only.
// Unlike upstream, first_full_step is honoured (dense attention before it), grids need not divide
// the chunk sizes, and selecting nothing beyond the own chunks gives own-chunk attention (upstream
// silently switches to full attention then).
#include <fmt/format.h>
#include <omp.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>

#include "attention/backends/descriptor.h"
#include "attention/backends/vmoba_attn/vmoba_layout.h"
#include "attention/backends/vmoba_attn/vmoba_select.h"
#include "attention/backends/vmoba_attn/vmoba_settings.h"
#ifdef MMGEN_HAVE_CUDA
#include "attention/backends/vmoba_attn/vmoba_attn_cuda.h"
#endif
#include "attention/kernels/block_sparse.h"
#include "attention/kernels/dense_attention.h"
#include "core/error.h"
#include "core/limits.h"

namespace mmgen::attention::vmoba_attn {

namespace {

using P = Platform;

using json = nlohmann::json;

using vmoba::ChunkKind;

// Query tokens per query block in both passes: small enough to spread over threads, large enough
// for the GEMM tiles.
constexpr int64_t kQueryBlock = 64;

void warn_once(std::atomic<bool>& flag, const std::string& message) {
  if (!flag.exchange(true)) spdlog::warn("{}", message);
}

class VmobaBackend final : public AttentionBackend {
 public:
  explicit VmobaBackend(const nlohmann::json& config)
      : settings_(VmobaSettings::from_json(config)) {}

  std::string_view name() const override { return "vmoba_attn"; }

  Tensor forward(const Tensor& q, const Tensor& k, const Tensor& v, float scale,
                 const AttentionContext& context, AttentionStats* stats) override {
    check(q.dim() == 4 && k.dim() == 4 && v.shape() == k.shape() && q.size(0) == k.size(0) &&
              q.size(2) == k.size(2) && q.size(3) == k.size(3),
          "vmoba_attn: expects q [B, Sq, H, D] and k, v [B, Sk, H, D]; got q {}, k {}, v {}",
          shape_string(q.shape()), shape_string(k.shape()), shape_string(v.shape()));
    const int64_t batch = q.size(0), seq = q.size(1), heads = q.size(2);
    const auto& grid = context.grid;
    const int64_t video = grid[0] * grid[1] * grid[2];
    // Cross-attention and calls without a video grid have no chunks to choose from.
    if (context.is_cross || seq != k.size(1) || video == 0) {
      if (!context.is_cross && video == 0) {
        static std::atomic<bool> warned{false};
        warn_once(warned, "vmoba_attn: called without a latent grid; using dense attention there");
      }
      return dense(q, k, v, scale, stats, batch * heads * seq, 1);
    }
    // Text tokens inside this sequence follow the video (joint attention); a sequence of video
    // tokens only ignores the context's text length (the text then lives in cross-attention).
    const int64_t text = seq - video;
    check(text == 0 || text == context.text_length,
          "vmoba_attn: {} tokens, but the latent grid {}x{}x{} has {} (plus {} text tokens: {})",
          seq, grid[0], grid[1], grid[2], video, context.text_length, video + context.text_length);

    const ChunkKind kind = settings_.kind_of_layer(context.layer_index);
    const vmoba::ChunkLayout layout = settings_.layout(kind, grid);
    const int64_t chunks = layout.chunks.size();
    if (settings_.dense_at(context.step_index, context.layer_index))
      return dense(q, k, v, scale, stats, batch * heads * video, chunks);

    std::vector<int64_t> index = layout.order;
    for (int64_t t = video; t < seq; ++t) index.push_back(t);
    const Tensor qr = gather_tokens(q.to(DType::F32), index);
    const Tensor kr = gather_tokens(k.to(DType::F32), index);
    const Tensor vr = gather_tokens(v.to(DType::F32), index);

    const std::vector<vmoba::ChunkSelection> selections =
        vmoba::select_chunks(qr, kr, layout.chunks, settings_.select_options(kind));

    Tensor lse;
    Tensor out = block_sparse_attention(qr, kr, vr, scale,
                                        {own_chunk_pattern(layout.chunks, video, seq)}, &lse);
    int64_t chosen = 0;
    for (int64_t bh = 0; bh < batch * heads; ++bh) {
      chosen += selections[size_t(bh)].entries();
      add_experts(qr, kr, vr, scale, layout.chunks, video, bh / heads, bh % heads,
                  selections[size_t(bh)], out, lse);
    }
    if (stats) {
      // Unit: (query token, key chunk) pairs over the video queries.
      stats->visited_blocks += batch * heads * video + chosen;
      stats->total_blocks += batch * heads * video * chunks;
    }
    return scatter_tokens(out, index, seq);
  }

 private:
  static Tensor dense(const Tensor& q, const Tensor& k, const Tensor& v, float scale,
                      AttentionStats* stats, int64_t queries, int64_t blocks) {
    if (stats) {
      stats->visited_blocks += queries * blocks;
      stats->total_blocks += queries * blocks;
    }
    DenseAttentionArgs args;
    args.q = q.to(DType::F32);
    args.k = k.to(DType::F32);
    args.v = v.to(DType::F32);
    args.scale = scale;
    return dense_attention(args);
  }

  // Each video query block attends its own chunk (and the text block); text queries attend all.
  static BlockSparsePattern own_chunk_pattern(const BlockLayout& chunks, int64_t video,
                                              int64_t seq) {
    BlockSparsePattern pattern;
    pattern.kv_blocks = chunks;
    const bool text = seq > video;
    const int32_t text_block = int32_t(chunks.size());
    if (text) {
      pattern.kv_blocks.start.push_back(video);
      pattern.kv_blocks.length.push_back(seq - video);
    }
    pattern.indptr.push_back(0);
    for (int64_t c = 0; c < chunks.size(); ++c) {
      const int64_t start = chunks.start[size_t(c)], end = start + chunks.length[size_t(c)];
      for (int64_t s = start; s < end; s += kQueryBlock) {
        pattern.q_blocks.start.push_back(s);
        pattern.q_blocks.length.push_back(std::min(kQueryBlock, end - s));
        pattern.indices.push_back(int32_t(c));
        if (text) pattern.indices.push_back(text_block);
        pattern.indptr.push_back(int64_t(pattern.indices.size()));
      }
    }
    for (int64_t s = video; s < seq; s += kQueryBlock) {
      pattern.q_blocks.start.push_back(s);
      pattern.q_blocks.length.push_back(std::min(kQueryBlock, seq - s));
      for (int32_t j = 0; j < int32_t(pattern.kv_blocks.size()); ++j) pattern.indices.push_back(j);
      pattern.indptr.push_back(int64_t(pattern.indices.size()));
    }
    return pattern;
  }

  // The expert pass of one (batch, head): the queries that chose chunk c, gathered into one run,
  // attend chunk c; each partial result is merged into `out` / `lse` by log-sum-exp.
  static void add_experts(const Tensor& qr, const Tensor& kr, const Tensor& vr, float scale,
                          const BlockLayout& chunks, int64_t video, int64_t b, int64_t h,
                          const vmoba::ChunkSelection& selection, Tensor& out, Tensor& lse) {
    const int64_t entries = selection.entries();
    if (entries == 0) return;
    const int64_t seq = qr.size(1), heads = qr.size(2), dim = qr.size(3), row = heads * dim;
    Tensor queries = Tensor::empty({1, entries, 1, dim});
    Tensor keys = Tensor::empty({1, video, 1, dim}), values = Tensor::empty({1, video, 1, dim});
    const float* q = qr.data<float>() + b * seq * row + h * dim;
    const float* k = kr.data<float>() + b * seq * row + h * dim;
    const float* v = vr.data<float>() + b * seq * row + h * dim;
    float* qe = queries.data<float>();
    float* ke = keys.data<float>();
    float* ve = values.data<float>();
#pragma omp parallel for schedule(static)
    for (int64_t e = 0; e < entries; ++e)
      std::copy_n(q + int64_t(selection.queries[size_t(e)]) * row, dim, qe + e * dim);
#pragma omp parallel for schedule(static)
    for (int64_t s = 0; s < video; ++s) {
      std::copy_n(k + s * row, dim, ke + s * dim);
      std::copy_n(v + s * row, dim, ve + s * dim);
    }
    BlockSparsePattern pattern;
    pattern.kv_blocks = chunks;
    pattern.indptr.push_back(0);
    for (int64_t c = 0; c < chunks.size(); ++c) {
      const int64_t begin = selection.indptr[size_t(c)], end = selection.indptr[size_t(c) + 1];
      for (int64_t s = begin; s < end; s += kQueryBlock) {
        pattern.q_blocks.start.push_back(s);
        pattern.q_blocks.length.push_back(std::min(kQueryBlock, end - s));
        pattern.indices.push_back(int32_t(c));
        pattern.indptr.push_back(int64_t(pattern.indices.size()));
      }
    }
    Tensor expert_lse;
    const Tensor expert_out =
        block_sparse_attention(queries, keys, values, scale, {pattern}, &expert_lse);

    // Merge. A query may have chosen several chunks, and its partial results must be merged in
    // entry order; each thread owns a contiguous range of query positions and scans all entries
    // for those, so every query sees the same sequence of merges as a serial pass.
    const float* oe = expert_out.data<float>();
    const float* le = expert_lse.data<float>();
    float* o = out.data<float>() + b * seq * row + h * dim;
    float* l = lse.data<float>() + (b * heads + h) * seq;
#pragma omp parallel
    {
      const int64_t threads = omp_get_num_threads(), thread = omp_get_thread_num();
      const int64_t first = seq * thread / threads, last = seq * (thread + 1) / threads;
      for (int64_t e = 0; e < entries; ++e) {
        const int64_t s = selection.queries[size_t(e)];
        if (s < first || s >= last) continue;
        const float la = l[s], lb = le[e];
        const float m = std::max(la, lb);
        if (m == -std::numeric_limits<float>::infinity()) continue;
        const float wa = std::exp(la - m), wb = std::exp(lb - m), inverse = 1.0f / (wa + wb);
        float* target = o + s * row;
        const float* part = oe + e * dim;
        for (int64_t d = 0; d < dim; ++d) target[d] = (wa * target[d] + wb * part[d]) * inverse;
        l[s] = m + std::log(wa + wb);
      }
    }
  }

  VmobaSettings settings_;
};

}  // namespace

const BackendDescriptor& descriptor() {
  static const BackendDescriptor d = {
      .info = {.name = "vmoba_attn",
               .family = Family::Dit,
               .summary =
                   "V-MoBA: mixture of block attention; temporal, spatial and spatio-temporal "
                   "chunks cycle by layer and each query keeps its most similar chunks",
               .aliases = {"vmoba"},
               .platforms = {P::Cuda, P::Cpu},
               .build_needs = "CUDA: mmgen's chunk selection and block-sparse kernel; CPU: mmgen's "
                              "block-sparse kernel",
               .gpu_arch = "sm90",
               .dtypes = {"bf16", "fp32 (CPU)"},
               .head_sizes = "64, 128 (GPU); any (CPU)",
               .sparse = true,
               .per_step_state = "step index, layer index, latent grid",
               // Chunk sizes default to FastVideo's wan_1.3B_77_480_832.json so the backend runs
               // without a config; the cycle is temporal, spatial, spatio-temporal layers.
               .config =
                   {
                       {.name = "temporal_chunk_size",
                        .type = ConfigType::Int,
                        .default_value = 2,
                        .help = "frames per temporal chunk",
                        .min = 1,
                        .max = 1 << 20},
                       {.name = "temporal_topk",
                        .type = ConfigType::Int,
                        .default_value = 3,
                        .help = "chunks kept per query in topk mode (temporal layers)",
                        .min = 1,
                        .max = 1 << 20},
                       {.name = "spatial_chunk_size",
                        .type = ConfigType::IntList,
                        .default_value = {3, 4},
                        .help = "spatial chunk [h, w] in latent tokens",
                        .min = 1,
                        .max = 1 << 20,
                        .list_length = 2},
                       {.name = "spatial_topk",
                        .type = ConfigType::Int,
                        .default_value = 20,
                        .help = "chunks kept per query in topk mode (spatial layers)",
                        .min = 1,
                        .max = 1 << 20},
                       {.name = "st_chunk_size",
                        .type = ConfigType::IntList,
                        .default_value = {4, 6, 4},
                        .help = "spatio-temporal chunk [t, h, w] in latent tokens",
                        .min = 1,
                        .max = 4096,
                        .list_length = 3},
                       {.name = "st_topk",
                        .type = ConfigType::Int,
                        .default_value = 15,
                        .help = "chunks kept per query in topk mode (spatio-temporal layers)",
                        .min = 1,
                        .max = 1 << 20},
                       {.name = "moba_select_mode",
                        .type = ConfigType::Choice,
                        .default_value = "threshold",
                        .help = "keep chunks up to a similarity mass, or a fixed number",
                        .choices = {"threshold", "topk"}},
                       {.name = "moba_threshold",
                        .type = ConfigType::Float,
                        .default_value = 0.25,
                        .help = "cumulative normalised similarity kept in threshold mode",
                        .min = 0.0,
                        .max = 1.0,
                        .min_inclusive = false},
                       {.name = "moba_threshold_type",
                        .type = ConfigType::Choice,
                        .default_value = "query_head",
                        .help = "over what the threshold is applied",
                        .choices = {"query_head", "head_global", "overall"}},
                       {.name = "first_full_step",
                        .type = ConfigType::Int,
                        .default_value = 12,
                        .help = "leading denoising steps that use full attention",
                        .min = 0,
                        .max = Limits::kMaxInferenceSteps},
                       {.name = "first_full_layer",
                        .type = ConfigType::Int,
                        .default_value = 0,
                        .help = "leading layers that use full attention",
                        .min = 0,
                        .max = 10000},
                       {.name = "temporal_layer",
                        .type = ConfigType::Int,
                        .default_value = 1,
                        .help = "temporal layers per cycle",
                        .min = 0,
                        .max = 10000},
                       {.name = "spatial_layer",
                        .type = ConfigType::Int,
                        .default_value = 1,
                        .help = "spatial layers per cycle",
                        .min = 0,
                        .max = 10000},
                       {.name = "st_layer",
                        .type = ConfigType::Int,
                        .default_value = 1,
                        .help = "spatio-temporal layers per cycle",
                        .min = 0,
                        .max = 10000},
                   },
               .config_group = "moba_config",
               .config_group_label = "V-MoBA"},
      .kernels = {cpu_kernel("vmoba_attn")
#ifdef MMGEN_HAVE_CUDA
                      ,
                  hopper_kernel("vmoba_attn")
#endif
      },
      .cpu = [](const json& settings, const BackendResources&)
          -> std::unique_ptr<AttentionBackend> { return std::make_unique<VmobaBackend>(settings); },
#ifdef MMGEN_HAVE_CUDA
      .cuda = make_cuda,
#endif
      .dense_steps = [](const json& settings, int64_t steps) -> DenseSteps {
        const int64_t first = settings.at("first_full_step").get<int64_t>();
        return {std::clamp<int64_t>(first, 0, steps), fmt::format("first_full_step {}", first)};
      },
  };
  return d;
}

}  // namespace mmgen::attention::vmoba_attn
