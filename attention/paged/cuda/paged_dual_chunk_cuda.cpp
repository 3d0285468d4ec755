// dual_chunk_flash_attn on the GPU (SGLang dual_chunk_flashattention_backend.py; the design and
// its regions are in attention/paged/dual_chunk_backend.cpp). The new K/V are saved to the pool
// first; then three passes read each request's whole sequence through its request-table row (CSR
// slots), each cut to one region by the kernels' chunk rule (PagedAttentionParams::chunk_len) and
// fed its own rotation of the queries (q rows of 3·Hq heads): intra (causal; the tile kernel for
// an extend), succ and inter. The second and third write a scratch result that is merged into the
// first by LSE, as SGLang merges its three flash_attn calls. Decode runs the row kernel per region
// without splitting the keys. Like SGLang's, layers must be causal, without window or bias.
#include "attention/paged/cuda/paged_backend_base.h"
#include "core/cuda/cuda_check.h"
#include "core/error.h"

namespace mmgen::cuda::paged {

namespace {

class DualChunkBackendCuda final : public SlotBackendCuda {
 public:
  using SlotBackendCuda::SlotBackendCuda;
  std::string_view name() const override { return "dual_chunk_flash_attn"; }

  void forward_extend(const DeviceAttentionIo& io, const PagedLayer& layer,
                      const ForwardBatch& batch, bool save_kv_cache) override {
    run(io, layer, batch, save_kv_cache, true);
  }
  void forward_decode(const DeviceAttentionIo& io, const PagedLayer& layer,
                      const ForwardBatch& batch, bool save_kv_cache) override {
    run(io, layer, batch, save_kv_cache, false);
  }
  void init_cuda_graph_state(int64_t max_batch_size, int64_t max_num_tokens) override {
    SlotBackendCuda::init_cuda_graph_state(max_batch_size, max_num_tokens);
    // Captured steps read a scratch of their own, allocated once: the eager one may be
    // reallocated by a longer eager call after a capture, which the graph would not see.
    graph_scratch_ =
        DeviceBuffer(scratch_bytes(max_num_tokens * options_.max_q_heads, pool_->head_dim()));
  }

 protected:
  attention::ModelAttention layer_kind() const override {
    return attention::ModelAttention::DualChunk;
  }
  void add_key_indices(const ForwardBatch& batch, MetadataBuilder& builder, Sections& s,
                       const GraphCapacity* graph) override {
    add_slot_indices(batch, batch.seq_lens, builder, s, graph);  // every region reads the pool
  }

 private:
  // Per query row: three LSEs and one bf16 output row.
  static size_t scratch_bytes(int64_t rows, int64_t head_dim) {
    return size_t(rows) * size_t(3 * 4 + head_dim * 2);
  }
  // The graph scratch while a graph is being captured on the stream, else the eager one (grown
  // as needed).
  DeviceBuffer& scratch_for(int64_t rows, int64_t head_dim) {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    MMGEN_CUDA_CHECK(cudaStreamIsCapturing(stream_, &status));
    const size_t bytes = scratch_bytes(rows, head_dim);
    if (status != cudaStreamCaptureStatusNone) {
      check(graph_scratch_.size() >= bytes,
            "GPU dual_chunk_flash_attn: a captured step of {} query rows exceeds the CUDA-graph "
            "scratch (init_cuda_graph_state's tokens x max_q_heads)",
            rows);
      return graph_scratch_;
    }
    if (eager_scratch_.size() < bytes) eager_scratch_ = DeviceBuffer(bytes);
    return eager_scratch_;
  }

  void run(const DeviceAttentionIo& io, const PagedLayer& layer, const ForwardBatch& batch,
           bool save_kv_cache, bool extend) {
    check(!io.fp32, "GPU dual_chunk_flash_attn layer {}: the KV pool is bf16; q, k, v must be too",
          layer.layer_id);
    const int64_t hq = layer.num_q_heads, d = layer.head_dim, tokens = batch.num_tokens;
    PagedAttentionParams p = query_params(io, layer, batch, extend);
    if (!io.q_stride) p.q_stride = 3 * hq * d;  // packed: the three rotations of a token
    read_keys_from_pool(p, io, layer, batch, save_kv_cache);
    p.chunk_len = layer.dual_chunk.chunk_len();
    p.length_scale_base = float(layer.dual_chunk.original_max_position_embeddings);
    p.seq_len = at(sections_.seq_len);

    const int64_t rows = tokens * hq;
    float* lse_a = scratch_for(rows, d).as<float>();
    float* lse_b = lse_a + rows;
    float* lse_c = lse_b + rows;
    void* out_b = lse_c + rows;
    auto pass = [&](int region, void* out, int64_t out_stride, float* lse) {
      PagedAttentionParams r = p;
      r.chunk_region = region;
      r.q = static_cast<const uint16_t*>(io.q) + region * hq * d;  // bf16 elements
      r.out = out;
      r.out_stride = out_stride;
      r.lse = lse;
      if (extend)
        run_extend(r);
      else
        paged_attention_rows(r, 1, nullptr, nullptr, stream_);
    };
    pass(0, p.out, p.out_stride, lse_a);
    pass(1, out_b, hq * d, lse_b);
    merge_attention_states(p.out, p.out_stride, lse_a, out_b, hq * d, lse_b, tokens, hq, d, stream_,
                           lse_c);
    pass(2, out_b, hq * d, lse_b);
    merge_attention_states(p.out, p.out_stride, lse_c, out_b, hq * d, lse_b, tokens, hq, d,
                           stream_);
  }

  // Each: the LSEs of intra, of the region being merged and of intra + succ, then out_b.
  DeviceBuffer eager_scratch_, graph_scratch_;
};

}  // namespace

std::unique_ptr<PagedBackendCuda> make_dual_chunk_backend_cuda(
    DeviceKVPool* pool, const PagedBackendCudaOptions& options) {
  return std::make_unique<DualChunkBackendCuda>(pool, options);
}

}  // namespace mmgen::cuda::paged
