// flashinfer_mla and flashmla (SGLang flashinfer_mla_backend.py, flashmla_backend.py): multi-head
// latent attention in its absorbed form (LatentAttention, paged_layer.h). Both save the new tokens'
// latent rows to the pool first (one row per token; V is its first kv_lora_rank columns), then
// every query reads its request's whole sequence from the pool, as both kernels do in the absorbed
// form:
//  - flashinfer_mla: FlashInfer's MLA kernel as SGLang plans it, with page size 1: the keys are
//    read through CSR token slots (the request-table rows), for extend and decode alike;
//  - flashmla: extend is flashinfer_mla's (SGLang's FlashMLABackend inherits it); decode reads the
//    keys through a native page table of 64-token pages, FlashMLA's only page size, and cuts each
//    request's keys into splits merged by their LSEs, as FlashMLA's scheduler spreads a long
//    sequence over SMs.
// DeepSeek's softmax scale (with YaRN's mscale) is the layer's `scaling`. SGLang's non-absorbed
// prefill (per-head K/V decompressed for a ragged MHA pass) is a model-side choice not ported.
#include "attention/paged/backends.h"
#include "attention/paged/tile_attention.h"
#include "core/error.h"

namespace mmgen::attention::paged {

namespace {

constexpr int64_t kFlashMlaPage = 64;
constexpr int64_t kFlashMlaSplitKeys = 512;  // keys per decode split

class MlaBackend final : public PagedAttentionBackend {
 public:
  explicit MlaBackend(bool flashmla) : flashmla_(flashmla) {}
  std::string_view name() const override { return flashmla_ ? "flashmla" : "flashinfer_mla"; }
  ModelAttention layer_kind() const override { return ModelAttention::LatentMla; }

  void init_forward_metadata(const ForwardBatch& batch) override {
    page_table_.clear();
    if (!flashmla_ || batch.mode != ForwardMode::Decode) return;
    check(batch.kv_pool && batch.req_to_token,
          "flashmla paged attention: a decode batch needs a KV pool and a request table");
    check(batch.kv_pool->page_size() == kFlashMlaPage,
          "flashmla paged attention: FlashMLA reads pages of {} tokens, this pool's hold {}; use "
          "a page size of {} or flashinfer_mla",
          kFlashMlaPage, batch.kv_pool->page_size(), kFlashMlaPage);
    const int64_t bs = batch.batch_size();
    max_pages_ = (batch.max_seq_len() + kFlashMlaPage - 1) / kFlashMlaPage;
    page_table_.assign(size_t(bs * max_pages_), 0);
    for (int64_t r = 0; r < bs; ++r) {
      const int64_t* slots = request_slots(batch, r);
      for (int64_t j = 0; j < batch.seq_lens[size_t(r)]; j += kFlashMlaPage)
        page_table_[size_t(r * max_pages_ + j / kFlashMlaPage)] = slots[j] / kFlashMlaPage;
    }
  }

  Tensor forward_extend(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
                        const PagedLayer& layer, const ForwardBatch& batch,
                        bool save_kv_cache) override {
    const Inputs in = prepare(q_in, k_in, v_in, layer, batch, save_kv_cache);
    Tensor out = Tensor::empty({batch.num_tokens, layer.num_q_heads, layer.value_dim()});
    run_tiles(make_tile_tasks(batch, layer, kQueryTile), in.q.data<float>(), layer, batch, true,
              slot_runs(layer, batch), kKeyBlock, out.data<float>(), nullptr);
    return out;
  }

  Tensor forward_decode(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
                        const PagedLayer& layer, const ForwardBatch& batch,
                        bool save_kv_cache) override {
    const Inputs in = prepare(q_in, k_in, v_in, layer, batch, save_kv_cache);
    Tensor out = Tensor::empty({batch.num_tokens, layer.num_q_heads, layer.value_dim()});
    if (!flashmla_) {
      run_tiles(make_tile_tasks(batch, layer, 1), in.q.data<float>(), layer, batch, true,
                slot_runs(layer, batch), kKeyBlock, out.data<float>(), nullptr);
      return out;
    }
    split_decode(in.q.data<float>(), layer, batch, out.data<float>());
    return out;
  }

 private:
  Inputs prepare(const Tensor& q, const Tensor& k, const Tensor& v, const PagedLayer& layer,
                 const ForwardBatch& batch, bool save_kv_cache) {
    Inputs in = check_inputs(q, k, v, layer, batch);
    check(batch.kv_pool && batch.kv_pool->keys_only(),
          "{} paged attention layer {}: MLA keeps one latent row per token; the batch needs a "
          "keys-only KV pool",
          name(), layer.layer_id);
    if (save_kv_cache) save_kv(in.k, in.v, layer, batch);
    return in;
  }

  // Every request's whole sequence through its request-table row (page size 1).
  RunsOf slot_runs(const PagedLayer& layer, const ForwardBatch& batch) const {
    const KVPool* pool = batch.kv_pool;
    const float* latent = pool->key_buffer(layer.layer_id).data<float>();
    const int64_t row = pool->row_floats();
    return [&batch, latent, row](const TileTask& task, std::vector<KeyRun>& runs) {
      KeyRun run;
      run.len = batch.seq_lens[size_t(task.request)];
      run.slots = request_slots(batch, task.request);
      run.pool_k = run.pool_v = latent;
      run.pool_row = row;
      runs.push_back(run);
    };
  }

  // FlashMLA's decode: each request's keys through the page table in splits of
  // kFlashMlaSplitKeys, every split a partial softmax, merged by LSE in split order.
  void split_decode(const float* q, const PagedLayer& layer, const ForwardBatch& batch,
                    float* out) const {
    const int64_t hq = layer.num_q_heads, d = layer.head_dim, dv = layer.value_dim();
    const float* latent = batch.kv_pool->key_buffer(layer.layer_id).data<float>();
    const int64_t bs = batch.batch_size();
#pragma omp parallel
    {
      TileAttention tile;
      std::vector<float> lse(static_cast<size_t>(hq)), part(static_cast<size_t>(hq * dv)),
          part_lse(static_cast<size_t>(hq));
#pragma omp for schedule(dynamic)
      for (int64_t r = 0; r < bs; ++r) {
        const int64_t seq = batch.seq_lens[size_t(r)];
        float* o = out + r * hq * dv;
        for (int64_t start = 0; start < seq; start += kFlashMlaSplitKeys) {
          VisibleKeys visible;
          visible.causal = false;  // one query after every key
          visible.valid_len = seq;
          tile.begin(q + r * hq * d, hq * d, 1, 0, hq, d, seq - 1, visible, nullptr, layer.scaling,
                     dv);
          KeyRun run;
          run.pos0 = start;
          run.len = std::min(kFlashMlaSplitKeys, seq - start);
          run.pages = page_table_.data() + r * max_pages_;
          run.page_size = kFlashMlaPage;
          run.pool_k = run.pool_v = latent;
          run.pool_row = batch.kv_pool->row_floats();
          tile.attend_run(run, 0, kKeyBlock);
          if (start == 0) {
            tile.finish(o, hq * dv, lse.data(), hq);
            continue;
          }
          tile.finish(part.data(), hq * dv, part_lse.data(), hq);
          merge_states(o, lse.data(), part.data(), part_lse.data(), 1, hq, dv);
        }
      }
    }
  }

  bool flashmla_;
  std::vector<int64_t> page_table_;
  int64_t max_pages_ = 0;
};

}  // namespace

std::unique_ptr<PagedAttentionBackend> make_flashinfer_mla_backend() {
  return std::make_unique<MlaBackend>(false);
}

std::unique_ptr<PagedAttentionBackend> make_flashmla_backend() {
  return std::make_unique<MlaBackend>(true);
}

}  // namespace mmgen::attention::paged
