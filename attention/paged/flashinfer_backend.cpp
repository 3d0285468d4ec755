// flashinfer (SGLang flashinfer_backend.py over FlashInfer's wrappers): plan once, run per layer.
//  - plan (init_forward_metadata): qo_indptr over the new tokens; a paged KV in FlashInfer's CSR
//    form with page size 1 (kv_indptr, kv_indices = token slots, kv_last_page_len = 1) over the
//    prefix lengths when the ragged path is on, over the whole sequences otherwise (and always
//    for a decode);
//  - extend, ragged path: the ragged wrapper attends the new tokens to the new tokens (causal per
//    layer) from the packed k/v; only when a request has a cached prefix does the paged wrapper
//    attend the new tokens to the prefix (no causal mask: the prefix lies before every query),
//    and the two partial results merge by LSE (merge_state). K/V are saved afterwards;
//    encoder-only layers take the ragged path and save nothing;
//  - extend, paged-only path: save K/V first, then one paged attention over everything;
//  - decode: save K/V, then the paged wrapper over the whole sequences.
#include "attention/paged/backends.h"
#include "attention/paged/tile_attention.h"
#include "core/error.h"

namespace mmgen::attention::paged {

namespace {

class FlashInferBackend final : public PagedAttentionBackend {
 public:
  explicit FlashInferBackend(bool use_ragged) : use_ragged_(use_ragged) {}
  std::string_view name() const override { return "flashinfer"; }

  void init_forward_metadata(const ForwardBatch& batch) override {
    const int64_t bs = batch.batch_size();
    const bool decode = batch.mode == ForwardMode::Decode;
    ragged_ = !decode && (use_ragged_ || !batch.kv_pool);
    extend_no_prefix_ = !batch.has_prefix();
    qo_indptr_.assign(size_t(bs + 1), 0);
    kv_indptr_.assign(size_t(bs + 1), 0);
    for (int64_t r = 0; r < bs; ++r) {
      const size_t i = size_t(r);
      qo_indptr_[i + 1] = qo_indptr_[i] + batch.extend_seq_lens[i];
      const int64_t paged_kernel_len = ragged_ ? batch.extend_prefix_lens[i] : batch.seq_lens[i];
      kv_indptr_[i + 1] = kv_indptr_[i] + paged_kernel_len;
    }
    kv_indices_.assign(size_t(kv_indptr_.back()), 0);
    kv_last_page_len_.assign(size_t(bs), 1);
    if (kv_indptr_.back() > 0) {
      check(batch.req_to_token != nullptr,
            "flashinfer paged attention: the batch reads the pool but has no request table");
      for (int64_t r = 0; r < bs; ++r) {
        const int64_t* row = request_slots(batch, r);
        std::copy(row, row + (kv_indptr_[size_t(r) + 1] - kv_indptr_[size_t(r)]),
                  kv_indices_.begin() + kv_indptr_[size_t(r)]);
      }
    }
  }

  Tensor forward_extend(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
                        const PagedLayer& layer, const ForwardBatch& batch,
                        bool save_kv_cache) override {
    const Inputs in = check_inputs(q_in, k_in, v_in, layer, batch);
    const bool decoder = layer.type == AttentionType::Decoder;
    const auto tasks = make_tile_tasks(batch, layer, kQueryTile);
    Tensor out = Tensor::empty(in.q.shape());
    if (!ragged_) {  // paged only
      if (decoder && save_kv_cache) save_kv(in.k, in.v, layer, batch);
      run_tiles(tasks, in.q.data<float>(), layer, batch, layer.causal(), paged_runs(layer, batch),
                kKeyBlock, out.data<float>(), nullptr);
      return out;
    }
    const int64_t row = layer.num_kv_heads * layer.head_dim;
    const float* k = in.k.data<float>();
    const float* v = in.v.data<float>();
    auto ragged_runs = [&](const TileTask& task, std::vector<KeyRun>& runs) {
      const size_t r = size_t(task.request);
      KeyRun run;
      run.pos0 = batch.extend_prefix_lens[r];
      run.len = batch.extend_seq_lens[r];
      run.k = k + qo_indptr_[r] * row;
      run.v = v + qo_indptr_[r] * row;
      run.stride = row;
      runs.push_back(run);
    };
    if (extend_no_prefix_) {  // ragged only
      run_tiles(tasks, in.q.data<float>(), layer, batch, layer.causal(), ragged_runs, kKeyBlock,
                out.data<float>(), nullptr);
    } else {  // ragged + paged prefix, merged by LSE
      const int64_t heads = layer.num_q_heads;
      Tensor lse = Tensor::empty({batch.num_tokens, heads});
      Tensor prefix_out = Tensor::empty(in.q.shape());
      Tensor prefix_lse = Tensor::empty({batch.num_tokens, heads});
      run_tiles(tasks, in.q.data<float>(), layer, batch, layer.causal(), ragged_runs, kKeyBlock,
                out.data<float>(), lse.data<float>());
      run_tiles(tasks, in.q.data<float>(), layer, batch, false, paged_runs(layer, batch), kKeyBlock,
                prefix_out.data<float>(), prefix_lse.data<float>());
      merge_states(out.data<float>(), lse.data<float>(), prefix_out.data<float>(),
                   prefix_lse.data<float>(), batch.num_tokens, heads, layer.head_dim);
    }
    if (decoder && save_kv_cache) save_kv(in.k, in.v, layer, batch);
    return out;
  }

  Tensor forward_decode(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
                        const PagedLayer& layer, const ForwardBatch& batch,
                        bool save_kv_cache) override {
    const Inputs in = check_inputs(q_in, k_in, v_in, layer, batch);
    check(layer.type == AttentionType::Decoder,
          "flashinfer paged attention: layer {} is encoder-only and cannot decode", layer.layer_id);
    if (save_kv_cache) save_kv(in.k, in.v, layer, batch);
    Tensor out = Tensor::empty(in.q.shape());
    run_tiles(make_tile_tasks(batch, layer, 1), in.q.data<float>(), layer, batch, false,
              paged_runs(layer, batch), kKeyBlock, out.data<float>(), nullptr);
    return out;
  }

 private:
  // The paged wrapper's keys: request r's kv_indices (page size 1), positions from 0.
  RunsOf paged_runs(const PagedLayer& layer, const ForwardBatch& batch) const {
    const KVPool* pool = batch.kv_pool;
    const int64_t row = layer.num_kv_heads * layer.head_dim, id = layer.layer_id;
    return [this, pool, row, id](const TileTask& task, std::vector<KeyRun>& runs) {
      const size_t r = size_t(task.request);
      const int64_t len = kv_indptr_[r + 1] - kv_indptr_[r];
      if (len == 0) return;
      KeyRun run;
      run.pos0 = 0;
      run.len = len;  // page size 1: every page is full (kv_last_page_len = 1)
      run.slots = kv_indices_.data() + kv_indptr_[r];
      run.pool_k = pool->key_buffer(id).data<float>();
      run.pool_v = pool->value_buffer(id).data<float>();
      run.pool_row = row;
      runs.push_back(run);
    };
  }

  bool use_ragged_;
  bool ragged_ = true, extend_no_prefix_ = true;
  std::vector<int64_t> qo_indptr_, kv_indptr_, kv_indices_, kv_last_page_len_;
};

}  // namespace

std::unique_ptr<PagedAttentionBackend> make_flashinfer_backend(bool use_ragged) {
  return std::make_unique<FlashInferBackend>(use_ragged);
}

}  // namespace mmgen::attention::paged
