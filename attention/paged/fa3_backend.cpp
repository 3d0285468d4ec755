// fa3 (SGLang flashattention_backend.py over flash_attn_with_kvcache): a native page table.
//  - init_forward_metadata: page_table [bs, max_pages] = req_to_token[row, ::P] / P (a page's
//    first slot divided by P is the page id: a request's tokens are contiguous within each page),
//    cache_seqlens, cu_seqlens_q, cu_seqlens_k, max_seq_len_q, max_seq_len_k;
//  - extend and decode: save K/V, then every query reads its keys through the page table (the new
//    ones included); pages of 64 tokens or more are attended in place, shorter ones gathered into
//    blocks first; window_size = (w, 0) for a causal window;
//  - encoder-only: the varlen path over the packed k/v (cu_seqlens; no pool, no page table),
//    window (w, w).
#include "attention/paged/backends.h"
#include "attention/paged/tile_attention.h"
#include "core/error.h"

namespace mmgen::attention::paged {

namespace {

class Fa3Backend final : public PagedAttentionBackend {
 public:
  std::string_view name() const override { return "fa3"; }

  void init_forward_metadata(const ForwardBatch& batch) override {
    const int64_t bs = batch.batch_size();
    cu_seqlens_q_.assign(size_t(bs + 1), 0);
    cu_seqlens_k_.assign(size_t(bs + 1), 0);
    cache_seqlens_ = batch.seq_lens;
    for (int64_t r = 0; r < bs; ++r) {
      cu_seqlens_q_[size_t(r) + 1] = cu_seqlens_q_[size_t(r)] + batch.extend_seq_lens[size_t(r)];
      cu_seqlens_k_[size_t(r) + 1] = cu_seqlens_k_[size_t(r)] + batch.seq_lens[size_t(r)];
    }
    max_seq_len_q_ = batch.max_extend_len();
    max_seq_len_k_ = batch.max_seq_len();
    page_table_.clear();
    if (!batch.kv_pool) return;  // encoder-only: varlen, no cache
    check(batch.req_to_token != nullptr,
          "fa3 paged attention: the batch has a pool but no request table");
    page_size_ = batch.kv_pool->page_size();
    max_pages_ = (max_seq_len_k_ + page_size_ - 1) / page_size_;
    page_table_.assign(size_t(bs * max_pages_), 0);
    for (int64_t r = 0; r < bs; ++r) {
      const int64_t* slots = request_slots(batch, r);
      const int64_t seq = batch.seq_lens[size_t(r)];
      for (int64_t j = 0; j < seq; j += page_size_) {
        check(slots[j] % page_size_ == 0,
              "fa3 paged attention: request {} token {} starts a page at slot {}, which is not "
              "page-aligned (page size {})",
              r, j, slots[j], page_size_);
        page_table_[size_t(r * max_pages_ + j / page_size_)] = slots[j] / page_size_;
      }
    }
  }

  Tensor forward_extend(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
                        const PagedLayer& layer, const ForwardBatch& batch,
                        bool save_kv_cache) override {
    const Inputs in = check_inputs(q_in, k_in, v_in, layer, batch);
    Tensor out = Tensor::empty(in.q.shape());
    const auto tasks = make_tile_tasks(batch, layer, kQueryTile);
    if (layer.type == AttentionType::EncoderOnly) {  // flash_attn_varlen_func
      const int64_t row = layer.num_kv_heads * layer.head_dim;
      const float* k = in.k.data<float>();
      const float* v = in.v.data<float>();
      auto varlen = [&](const TileTask& task, std::vector<KeyRun>& runs) {
        const size_t r = size_t(task.request);
        KeyRun run;
        run.pos0 = 0;
        run.len = cu_seqlens_k_[r + 1] - cu_seqlens_k_[r];
        run.k = k + cu_seqlens_q_[r] * row;
        run.v = v + cu_seqlens_q_[r] * row;
        run.stride = row;
        runs.push_back(run);
      };
      run_tiles(tasks, in.q.data<float>(), layer, batch, false, varlen, kKeyBlock,
                out.data<float>(), nullptr);
      return out;
    }
    if (save_kv_cache) save_kv(in.k, in.v, layer, batch);
    run_tiles(tasks, in.q.data<float>(), layer, batch, true, paged_runs(layer, batch), block(),
              out.data<float>(), nullptr);
    return out;
  }

  Tensor forward_decode(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
                        const PagedLayer& layer, const ForwardBatch& batch,
                        bool save_kv_cache) override {
    const Inputs in = check_inputs(q_in, k_in, v_in, layer, batch);
    check(layer.type == AttentionType::Decoder,
          "fa3 paged attention: layer {} is encoder-only and cannot decode", layer.layer_id);
    if (save_kv_cache) save_kv(in.k, in.v, layer, batch);
    Tensor out = Tensor::empty(in.q.shape());
    run_tiles(make_tile_tasks(batch, layer, 1), in.q.data<float>(), layer, batch, true,
              paged_runs(layer, batch), block(), out.data<float>(), nullptr);
    return out;
  }

 private:
  // Whole pages per gathered block (in-place pages ignore it).
  int64_t block() const { return std::max<int64_t>(1, kKeyBlock / page_size_) * page_size_; }

  RunsOf paged_runs(const PagedLayer& layer, const ForwardBatch& batch) const {
    const KVPool* pool = batch.kv_pool;
    const int64_t row = layer.num_kv_heads * layer.head_dim, id = layer.layer_id;
    return [this, pool, row, id](const TileTask& task, std::vector<KeyRun>& runs) {
      KeyRun run;
      run.pos0 = 0;
      run.len = cache_seqlens_[size_t(task.request)];
      run.pages = page_table_.data() + task.request * max_pages_;
      run.page_size = page_size_;
      run.pool_k = pool->key_buffer(id).data<float>();
      run.pool_v = pool->value_buffer(id).data<float>();
      run.pool_row = row;
      runs.push_back(run);
    };
  }

  std::vector<int64_t> cu_seqlens_q_, cu_seqlens_k_, cache_seqlens_, page_table_;
  int64_t max_seq_len_q_ = 0, max_seq_len_k_ = 0, page_size_ = 1, max_pages_ = 0;
};

}  // namespace

std::unique_ptr<PagedAttentionBackend> make_fa3_backend() {
  return std::make_unique<Fa3Backend>();
}

}  // namespace mmgen::attention::paged
