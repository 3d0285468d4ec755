// fa3 on the GPU (SGLang flashattention_backend.py over flash_attn_with_kvcache):
//  - metadata: cache_seqlens, cu_seqlens_q and a native page table [bs, max_pages] =
//    req_to_token[row, ::P] / P (a page's first slot divided by P is the page id: a request's
//    tokens are contiguous within each page), any page size;
//  - extend and decode: save K/V, then every query reads its keys through the page table, the new
//    ones included (one run of keys per request, causal by absolute position);
//  - encoder-only: the varlen path over the packed k/v (no pool, no page table).
// flex_attention on the GPU is the same page-table design (torch's flex_attention reads its paged
// KV through a page table too) with the layer's own mods compiled in: mask_mod = causal /
// sliding window / padding, score_mod = the additive bias (T5's relative position bias), and
// key blocks outside a query tile's visible span skipped as flex's BlockMask skips empty
// blocks. Custom C++ mods (set_flex_mods) are host callbacks and stay a CPU feature.
#include "attention/paged/cuda/paged_backend_base.h"
#include "core/error.h"

namespace mmgen::cuda::paged {

namespace {

class PageTableBackendCuda final : public PagedBackendCudaBase {
 public:
  PageTableBackendCuda(DeviceKVPool* pool, const PagedBackendCudaOptions& options,
                       std::string_view name,
                       attention::ModelAttention kind = attention::ModelAttention::Plain)
      : PagedBackendCudaBase(pool, options), name_(name), kind_(kind) {}
  std::string_view name() const override { return name_; }

  void forward_extend(const DeviceAttentionIo& io, const PagedLayer& layer,
                      const ForwardBatch& batch, bool save_kv_cache) override {
    PagedAttentionParams p = query_params(io, layer, batch, true);
    p.kv_len = at(sections_.seq_len);
    if (layer.type == attention::paged::AttentionType::EncoderOnly) {  // flash_attn_varlen_func
      p.source = KeySource::Packed;
      p.kv_start = at(sections_.q_start);
      run_extend(p);
      return;
    }
    read_keys_from_pool(p, io, layer, batch, save_kv_cache);
    run_extend(p);
  }

 protected:
  attention::ModelAttention layer_kind() const override { return kind_; }
  void add_key_indices(const ForwardBatch& batch, MetadataBuilder& builder, Sections& s,
                       const GraphCapacity* graph) override {
    s.kv_len = s.seq_len;
    // Encoder-only: varlen, no cache. Graph buffers always hold the table (padding rows: page 0).
    if (!batch.req_to_token && !graph) return;
    check(pool_ != nullptr,
          "GPU {} paged attention: the batch has a request table but the backend has no device KV "
          "pool",
          name_);
    const int64_t page = pool_->page_size(), bs = batch.batch_size();
    check(kind_ != attention::ModelAttention::LatentMla || page == kFlashMlaPage,
          "GPU {} paged attention: FlashMLA reads pages of {} tokens, this pool's hold {}; use a "
          "page size of {} or flashinfer_mla",
          name_, kFlashMlaPage, page, kFlashMlaPage);
    const int64_t longest = batch.max_seq_len();
    s.max_pages = graph ? graph->max_pages : (longest + page - 1) / page;
    check(longest <= s.max_pages * page,
          "GPU {} paged attention: a sequence of {} tokens exceeds the page table's {} pages of {}",
          name_, longest, s.max_pages, page);
    const int64_t rows = graph ? graph->batch_size : bs;
    std::vector<int32_t> table(size_t(rows * s.max_pages), 0);  // padding rows: page 0
    for (int64_t r = 0; r < bs; ++r) {
      const int64_t* slots = request_slots(batch, r);
      if (!slots) continue;
      const int64_t seq = batch.seq_lens[size_t(r)];
      for (int64_t j = 0; j < seq; j += page) {
        check(slots[j] % page == 0,
              "GPU {} paged attention: request {} token {} starts a page at slot {}, which is "
              "not page-aligned (page size {})",
              name_, r, j, slots[j], page);
        table[size_t(r * s.max_pages + j / page)] = int32_t(slots[j] / page);
      }
    }
    s.indices = builder.add(table);
  }

  int64_t graph_indices_capacity(int64_t max_batch_size) const override {
    const int64_t page = pool_->page_size();
    return max_batch_size * ((options_.max_context_len + page - 1) / page);
  }

  void set_decode_keys(PagedAttentionParams& p, const PagedLayer&) const override {
    p.source = KeySource::Pages;
    p.kv_pos0 = nullptr;
    p.kv_len = at(sections_.seq_len);
    p.indices = at(sections_.indices);
    p.max_pages = sections_.max_pages;
  }

 private:
  static constexpr int64_t kFlashMlaPage = 64;
  std::string_view name_;
  attention::ModelAttention kind_;
};

}  // namespace

std::unique_ptr<PagedBackendCuda> make_fa3_backend_cuda(DeviceKVPool* pool,
                                                        const PagedBackendCudaOptions& options) {
  return std::make_unique<PageTableBackendCuda>(pool, options, "fa3");
}

std::unique_ptr<PagedBackendCuda> make_flex_attention_backend_cuda(
    DeviceKVPool* pool, const PagedBackendCudaOptions& options) {
  return std::make_unique<PageTableBackendCuda>(pool, options, "flex_attention");
}

// FlashMLA: absorbed multi-head latent attention through a native page table of 64-token pages
// (a keys-only pool of latent rows), the latent kernel for extend and split-KV decode.
std::unique_ptr<PagedBackendCuda> make_flashmla_backend_cuda(
    DeviceKVPool* pool, const PagedBackendCudaOptions& options) {
  return std::make_unique<PageTableBackendCuda>(pool, options, "flashmla",
                                                attention::ModelAttention::LatentMla);
}

}  // namespace mmgen::cuda::paged
