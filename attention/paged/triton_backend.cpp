// triton (SGLang triton_backend.py + triton_ops/extend_attention.py, decode_attention.py):
//  - init_forward_metadata builds CSR indices: kv_indptr / kv_indices over the *prefix* lengths
//    for an extend, over the whole sequences for a decode, plus qo_indptr and, for a decode, the
//    split-KV count of each request and the partial-result buffers;
//  - extend, per query block: stage 1 walks the cached prefix through kv_indices (gathered from
//    the pool, BLOCK_N keys at a time), stage 2 the new tokens straight from the packed k/v
//    (causal: only up to the block's last query), one online softmax across both;
//  - decode, stage 1: each (request, KV head, split) attends its slice of the sequence and stores
//    a partial output and its LSE; stage 2 merges the splits by LSE.
#include <cmath>

#include "attention/paged/backends.h"
#include "attention/paged/tile_attention.h"
#include "core/error.h"

namespace mmgen::attention::paged {

namespace {

constexpr int64_t kBlockM = 64;  // query tokens per program
// Keys per inner step: the GPU kernel uses 64; CPU GEMMs like more.
constexpr int64_t kBlockN = 256;
constexpr int64_t kMinBlockKv = 32;
constexpr int64_t kTokensPerSplit = 64;  // CPU stand-in for the SM-count heuristic

class TritonBackend final : public PagedAttentionBackend {
 public:
  explicit TritonBackend(int64_t max_kv_splits)
      : max_kv_splits_(std::max<int64_t>(1, max_kv_splits)) {}
  std::string_view name() const override { return "triton"; }

  void init_forward_metadata(const ForwardBatch& batch) override {
    const int64_t bs = batch.batch_size();
    const bool decode = batch.mode == ForwardMode::Decode;
    kv_indptr_.assign(size_t(bs + 1), 0);
    qo_indptr_.assign(size_t(bs + 1), 0);
    for (int64_t r = 0; r < bs; ++r) {
      const size_t i = size_t(r);
      kv_indptr_[i + 1] =
          kv_indptr_[i] + (decode ? batch.seq_lens[i] : batch.extend_prefix_lens[i]);
      qo_indptr_[i + 1] = qo_indptr_[i] + batch.extend_seq_lens[i];
    }
    kv_indices_.assign(size_t(kv_indptr_.back()), 0);
    if (kv_indptr_.back() > 0) {
      check(batch.req_to_token != nullptr,
            "triton paged attention: the batch has cached tokens but no request table");
      for (int64_t r = 0; r < bs; ++r) {
        const int64_t* row = request_slots(batch, r);
        std::copy(row, row + (kv_indptr_[size_t(r) + 1] - kv_indptr_[size_t(r)]),
                  kv_indices_.begin() + kv_indptr_[size_t(r)]);
      }
    }
    max_extend_len_ = batch.max_extend_len();
    num_kv_splits_.assign(size_t(bs), 1);
    if (decode)
      for (int64_t r = 0; r < bs; ++r)
        num_kv_splits_[size_t(r)] = std::clamp<int64_t>(
            (batch.seq_lens[size_t(r)] + kTokensPerSplit - 1) / kTokensPerSplit, 1, max_kv_splits_);
  }

  Tensor forward_extend(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
                        const PagedLayer& layer, const ForwardBatch& batch,
                        bool save_kv_cache) override {
    const Inputs in = check_inputs(q_in, k_in, v_in, layer, batch);
    if (layer.type == AttentionType::Decoder && save_kv_cache) save_kv(in.k, in.v, layer, batch);
    Tensor out = Tensor::empty(in.q.shape());
    const int64_t row = layer.num_kv_heads * layer.head_dim;
    const float* k = in.k.data<float>();
    const float* v = in.v.data<float>();
    auto runs_of = [&](const TileTask& task, std::vector<KeyRun>& runs) {
      const size_t r = size_t(task.request);
      const int64_t prefix = batch.extend_prefix_lens[r];
      if (prefix > 0) {  // stage 1: the cached prefix, through kv_indices
        KeyRun stage1;
        stage1.pos0 = 0;
        stage1.len = prefix;
        stage1.slots = kv_indices_.data() + kv_indptr_[r];
        stage1.pool_k = batch.kv_pool->key_buffer(layer.layer_id).data<float>();
        stage1.pool_v = batch.kv_pool->value_buffer(layer.layer_id).data<float>();
        stage1.pool_row = row;
        runs.push_back(stage1);
      }
      KeyRun stage2;  // stage 2: the new tokens, contiguous
      stage2.pos0 = prefix;
      stage2.len = batch.extend_seq_lens[r];
      stage2.k = k + qo_indptr_[r] * row;
      stage2.v = v + qo_indptr_[r] * row;
      stage2.stride = row;
      runs.push_back(stage2);
    };
    run_tiles(make_tile_tasks(batch, layer, kBlockM), in.q.data<float>(), layer, batch,
              layer.causal(), runs_of, kBlockN, out.data<float>(), nullptr);
    return out;
  }

  Tensor forward_decode(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
                        const PagedLayer& layer, const ForwardBatch& batch,
                        bool save_kv_cache) override {
    const Inputs in = check_inputs(q_in, k_in, v_in, layer, batch);
    check(layer.type == AttentionType::Decoder,
          "triton paged attention: layer {} is encoder-only and cannot decode", layer.layer_id);
    if (save_kv_cache) save_kv(in.k, in.v, layer, batch);
    const int64_t bs = batch.batch_size(), hq = layer.num_q_heads, d = layer.head_dim;
    const int64_t group = layer.group(), row = layer.num_kv_heads * d, splits = max_kv_splits_;
    // attn_logits [bs, splits, Hq, D] and attn_lse [bs, splits, Hq].
    std::vector<float> logits(size_t(bs * splits * hq * d), 0.0f);
    std::vector<float> lse(size_t(bs * splits * hq), kNegInf);
    struct Split {
      int64_t request, kv_head, split;
    };
    std::vector<Split> work;
    for (int64_t r = 0; r < bs; ++r)
      for (int64_t h = 0; h < layer.num_kv_heads; ++h)
        for (int64_t s = 0; s < num_kv_splits_[size_t(r)]; ++s) work.push_back({r, h, s});
    const float* q = in.q.data<float>();
    const float* pool_k = batch.kv_pool->key_buffer(layer.layer_id).data<float>();
    const float* pool_v = batch.kv_pool->value_buffer(layer.layer_id).data<float>();
    const int64_t count = int64_t(work.size());
#pragma omp parallel  // even for one task: no Eigen threading inside (see run_tiles)
    {
      TileAttention tile;
#pragma omp for schedule(dynamic)
      for (int64_t w = 0; w < count; ++w) {  // stage 1
        const Split& job = work[size_t(w)];
        const size_t r = size_t(job.request);
        const int64_t seq = batch.seq_lens[r], n_splits = num_kv_splits_[r];
        const int64_t split_len =
            ((seq + n_splits - 1) / n_splits + kMinBlockKv - 1) / kMinBlockKv * kMinBlockKv;
        const int64_t first = job.split * split_len, last = std::min(seq, first + split_len);
        tile.begin(q + int64_t(r) * hq * d, hq * d, 1, job.kv_head * group, group, d, seq - 1,
                   visible_keys(layer, batch, job.request, false), layer.bias, layer.scaling);
        if (first < last) {
          KeyRun run;
          run.pos0 = first;
          run.len = last - first;
          run.slots = kv_indices_.data() + kv_indptr_[r] + first;
          run.pool_k = pool_k;
          run.pool_v = pool_v;
          run.pool_row = row;
          tile.attend_run(run, job.kv_head, kBlockN);
        }
        const int64_t at = int64_t(r) * splits + job.split;
        tile.finish(logits.data() + at * hq * d, hq * d, lse.data() + at * hq, hq);
      }
    }
    Tensor out = Tensor::zeros(in.q.shape());
    float* o = out.data<float>();
#pragma omp parallel for schedule(static) if (bs * hq * d * splits >= (1 << 16))
    for (int64_t r = 0; r < bs; ++r)  // stage 2: merge the splits
      for (int64_t h = 0; h < hq; ++h) {
        float max_lse = kNegInf;
        for (int64_t s = 0; s < splits; ++s)
          max_lse = std::max(max_lse, lse[size_t((r * splits + s) * hq + h)]);
        if (max_lse == kNegInf) continue;
        float* dst = o + (r * hq + h) * d;
        double total = 0;
        for (int64_t s = 0; s < splits; ++s) {
          const float l = lse[size_t((r * splits + s) * hq + h)];
          if (l == kNegInf) continue;
          const float weight = std::exp(l - max_lse);
          total += weight;
          const float* part = logits.data() + ((r * splits + s) * hq + h) * d;
          for (int64_t x = 0; x < d; ++x) dst[x] += weight * part[x];
        }
        const float inverse = float(1.0 / total);
        for (int64_t x = 0; x < d; ++x) dst[x] *= inverse;
      }
    return out;
  }

 private:
  int64_t max_kv_splits_;
  std::vector<int64_t> kv_indptr_, kv_indices_, qo_indptr_, num_kv_splits_;
  int64_t max_extend_len_ = 0;
};

}  // namespace

std::unique_ptr<PagedAttentionBackend> make_triton_backend(int64_t max_kv_splits) {
  return std::make_unique<TritonBackend>(max_kv_splits);
}

}  // namespace mmgen::attention::paged
