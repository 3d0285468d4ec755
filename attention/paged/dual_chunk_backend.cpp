// dual_chunk_flash_attn (SGLang dual_chunk_flashattention_backend.py; Qwen2.5-1M's dual chunk
// attention, see DualChunk in paged_layer.h). Decoder layers only: K/V are saved to the pool
// first, then each query attends three regions of its request's keys, read through its
// req_to_token row, each with its own rotation of the query:
//   intra: its own chunk [c·L, q] (causal), the intra rotation;
//   succ:  the chunk before, [(c − 1)·L, c·L), the succ rotation;
//   inter: everything before that, [0, (c − 1)·L), the inter rotation,
// where L is the chunk length and c = q / L. The three partial softmaxes are merged by their
// log-sum-exps, as SGLang merges its three flash_attn calls. Queries are split where chunks
// begin (and on a 64-token grid), so every query of a tile shares its three regions. Not built:
// SGLang's sparse mode (MInference vertical-slash patterns above 32k tokens, from a per-head
// sparse_attention_config), which is an approximation the dense path here does not take.
#include "attention/paged/backends.h"
#include "attention/paged/tile_attention.h"
#include "core/error.h"

namespace mmgen::attention::paged {

namespace {

// Tokens first .. first + count − 1 of a request's new tokens, all in one chunk, one KV head.
std::vector<TileTask> chunk_tile_tasks(const ForwardBatch& batch, const PagedLayer& layer) {
  const int64_t chunk_len = layer.dual_chunk.chunk_len();
  std::vector<TileTask> tasks;
  for (int64_t r = 0; r < batch.batch_size(); ++r) {
    const int64_t n = batch.extend_seq_lens[size_t(r)],
                  prefix = batch.extend_prefix_lens[size_t(r)];
    for (int64_t first = 0, count = 0; first < n; first += count) {
      const int64_t position = prefix + first;
      count = std::min(
          {n - first, kQueryTile - position % kQueryTile, chunk_len - position % chunk_len});
      for (int64_t h = 0; h < layer.num_kv_heads; ++h) tasks.push_back({r, h, first, count});
    }
  }
  return tasks;
}

class DualChunkBackend final : public PagedAttentionBackend {
 public:
  std::string_view name() const override { return "dual_chunk_flash_attn"; }
  ModelAttention layer_kind() const override { return ModelAttention::DualChunk; }

  void init_forward_metadata(const ForwardBatch&) override {}

  Tensor forward_extend(const Tensor& q, const Tensor& k, const Tensor& v, const PagedLayer& layer,
                        const ForwardBatch& batch, bool save_kv_cache) override {
    return run(q, k, v, layer, batch, save_kv_cache);
  }
  Tensor forward_decode(const Tensor& q, const Tensor& k, const Tensor& v, const PagedLayer& layer,
                        const ForwardBatch& batch, bool save_kv_cache) override {
    return run(q, k, v, layer, batch, save_kv_cache);
  }

 private:
  Tensor run(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, const PagedLayer& layer,
             const ForwardBatch& batch, bool save_kv_cache) {
    const Inputs in = check_inputs(q_in, k_in, v_in, layer, batch);
    if (save_kv_cache) save_kv(in.k, in.v, layer, batch);
    const int64_t hq = layer.num_q_heads, d = layer.head_dim, group = layer.group();
    const int64_t q_token = 3 * hq * d, chunk_len = layer.dual_chunk.chunk_len();
    Tensor out = Tensor::empty({batch.num_tokens, hq, d});
    const float* q = in.q.data<float>();
    float* o = out.data<float>();
    const KVPool* pool = batch.kv_pool;
    const float* pool_k = pool->key_buffer(layer.layer_id).data<float>();
    const float* pool_v = pool->value_buffer(layer.layer_id).data<float>();
    const auto tasks = chunk_tile_tasks(batch, layer);
    const int64_t count = int64_t(tasks.size());
#pragma omp parallel
    {
      TileAttention tile;
      std::vector<float> lse_a, lse_b, out_b;
#pragma omp for schedule(dynamic)
      for (int64_t t = 0; t < count; ++t) {
        const TileTask& task = tasks[size_t(t)];
        const size_t r = size_t(task.request);
        const int64_t token = batch.extend_start_loc[r] + task.first;
        const int64_t q_pos0 = batch.extend_prefix_lens[r] + task.first;
        const int64_t chunk_start = q_pos0 / chunk_len * chunk_len;
        const float scale = layer.scaling * layer.dual_chunk.logit_scale(batch.seq_lens[r]);
        lse_a.assign(size_t(task.count * hq), kNegInf);
        lse_b.assign(size_t(task.count * hq), kNegInf);
        out_b.assign(size_t(task.count * hq * d), 0.0f);
        // Region v (0 intra, 1 succ, 2 inter) over key positions [lo, hi).
        auto attend_region = [&](int64_t variant, int64_t lo, int64_t hi, float* dst,
                                 int64_t dst_stride, float* lse) {
          VisibleKeys visible;
          visible.causal = variant == 0;
          visible.valid_len = hi;
          tile.begin(q + token * q_token + variant * hq * d, q_token, task.count,
                     task.kv_head * group, group, d, q_pos0, visible, nullptr, scale);
          KeyRun run;
          run.pos0 = lo;
          run.len = hi - lo;
          run.slots = request_slots(batch, task.request) + lo;
          run.pool_k = pool_k;
          run.pool_v = pool_v;
          run.pool_row = layer.num_kv_heads * d;
          if (run.len > 0) tile.attend_run(run, task.kv_head, kKeyBlock);
          tile.finish(dst, dst_stride, lse, hq);
        };
        attend_region(0, chunk_start, batch.seq_lens[r], o + token * hq * d, hq * d, lse_a.data());
        for (int64_t variant = 1; variant <= 2; ++variant) {
          const int64_t lo = variant == 1 ? std::max<int64_t>(0, chunk_start - chunk_len) : 0;
          const int64_t hi =
              variant == 1 ? chunk_start : std::max<int64_t>(0, chunk_start - chunk_len);
          if (hi <= lo) continue;
          attend_region(variant, lo, hi, out_b.data(), hq * d, lse_b.data());
          const int64_t head0 = task.kv_head * group;
          for (int64_t i = 0; i < task.count; ++i)
            merge_states(o + ((token + i) * hq + head0) * d, lse_a.data() + i * hq + head0,
                         out_b.data() + (i * hq + head0) * d, lse_b.data() + i * hq + head0, 1,
                         group, d);
        }
      }
    }
    return out;
  }
};

}  // namespace

std::unique_ptr<PagedAttentionBackend> make_dual_chunk_backend() {
  return std::make_unique<DualChunkBackend>();
}

}  // namespace mmgen::attention::paged
