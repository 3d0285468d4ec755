// flex_attention (torch.nn.attention.flex_attention with its paged KV): the attention is plain
// softmax(score_mod(q·k · scale)) · v under a mask_mod, and everything model-specific is a
// callback:
//  - score_mod(score, b, h, q_idx, kv_idx): T5's relative position bias is
//    score + table[bucket(kv_idx − q_idx), h];
//  - mask_mod(b, h, q_idx, kv_idx): causal (kv_idx ≤ q_idx), sliding windows, padding
//    (kv_idx < valid_len).
// Like flex's BlockMask, each KV block of a query tile is classified first — empty (skipped, no
// GEMM), full (no mask calls) or partial (mask_mod per element). Without mods of its own the
// backend derives them from the layer and evaluates them row-wise (what flex's compiler fuses).
// Keys come through a page table (page_size from the pool, like FA3's); encoder-only layers use
// the packed k/v.
#include "attention/paged/backends.h"
#include "attention/paged/tile_attention.h"
#include "core/error.h"

namespace mmgen::attention::paged {

namespace {

constexpr int64_t kQueryBlock = 64;
constexpr int64_t kKvBlock = 128;

class FlexAttentionBackend final : public PagedAttentionBackend {
 public:
  std::string_view name() const override { return "flex_attention"; }

  void set_mods(ScoreMod score_mod, MaskMod mask_mod) {
    score_mod_ = std::move(score_mod);
    mask_mod_ = std::move(mask_mod);
  }

  void init_forward_metadata(const ForwardBatch& batch) override {
    page_table_.clear();
    if (!batch.kv_pool) return;
    check(batch.req_to_token != nullptr,
          "flex_attention: the batch has a pool but no request table");
    page_size_ = batch.kv_pool->page_size();
    max_pages_ = (batch.max_seq_len() + page_size_ - 1) / page_size_;
    page_table_.assign(size_t(batch.batch_size() * max_pages_), 0);
    for (int64_t r = 0; r < batch.batch_size(); ++r) {
      const int64_t* slots = request_slots(batch, r);
      for (int64_t j = 0; j < batch.seq_lens[size_t(r)]; j += page_size_) {
        check(slots[j] % page_size_ == 0,
              "flex_attention: request {} token {} starts a page at an unaligned slot {}", r, j,
              slots[j]);
        page_table_[size_t(r * max_pages_ + j / page_size_)] = slots[j] / page_size_;
      }
    }
  }

  Tensor forward_extend(const Tensor& q, const Tensor& k, const Tensor& v, const PagedLayer& layer,
                        const ForwardBatch& batch, bool save_kv_cache) override {
    return run(q, k, v, layer, batch, save_kv_cache, layer.causal());
  }

  Tensor forward_decode(const Tensor& q, const Tensor& k, const Tensor& v, const PagedLayer& layer,
                        const ForwardBatch& batch, bool save_kv_cache) override {
    check(layer.type == AttentionType::Decoder,
          "flex_attention: layer {} is encoder-only and cannot decode", layer.layer_id);
    return run(q, k, v, layer, batch, save_kv_cache, true);
  }

 private:
  Tensor run(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, const PagedLayer& layer,
             const ForwardBatch& batch, bool save_kv_cache, bool causal) {
    const Inputs in = check_inputs(q_in, k_in, v_in, layer, batch);
    const bool encoder = layer.type == AttentionType::EncoderOnly;
    if (!encoder && save_kv_cache) save_kv(in.k, in.v, layer, batch);
    Tensor out = Tensor::empty(in.q.shape());
    const int64_t hq = layer.num_q_heads, d = layer.head_dim, group = layer.group();
    const int64_t row = layer.num_kv_heads * d;
    const auto tasks = make_tile_tasks(batch, layer, kQueryBlock);
    const int64_t count = int64_t(tasks.size());
    const float* q = in.q.data<float>();
    float* o = out.data<float>();
    // Mods read from many threads: copies of the std::functions are not needed (const calls).
    const ScoreMod& score_mod = score_mod_;
    const MaskMod& mask_mod = mask_mod_;
#pragma omp parallel  // even for one task: no Eigen threading inside (see run_tiles)
    {
      TileAttention tile;
      int64_t b = 0;
      VisibleKeys default_mask;
      bool block_full = false;
      std::vector<char> keep;  // custom mask of the current block, rows × n
      int64_t block_k0 = 0, block_n = 0;
      const RowScoreFn rule = [&](int64_t head, int64_t q_pos, int64_t k_pos, int64_t n, float* s) {
        for (int64_t j = 0; j < n; ++j) s[j] *= layer.scaling;
        if (score_mod) {
          for (int64_t j = 0; j < n; ++j) s[j] = score_mod(s[j], b, head, q_pos, k_pos + j);
        } else if (layer.bias) {
          layer.bias->add(head, q_pos, k_pos, n, s);
        }
        if (block_full) return;
        if (mask_mod) {
          const int64_t r = (head - tile.first_head()) * tile.count() + (q_pos - tile.q_pos0());
          const char* keep_row = keep.data() + r * block_n;
          for (int64_t j = 0; j < n; ++j)
            if (!keep_row[j]) s[j] = kNegInf;
          return;
        }
        int64_t lo, hi;
        default_mask.range(q_pos, lo, hi);
        for (int64_t j = 0; j < n; ++j)
          if (k_pos + j < lo || k_pos + j >= hi) s[j] = kNegInf;
      };
      // The BlockMask entry of (this tile, keys k0 .. k0 + n − 1): false when empty.
      const TileAttention::BlockFilter classify = [&](int64_t k0, int64_t n) {
        const int64_t rows = tile.rows();
        int64_t visible = 0;
        if (mask_mod) {
          keep.resize(size_t(rows * n));
          block_k0 = k0;
          block_n = n;
          for (int64_t r = 0; r < rows; ++r) {
            const int64_t head = tile.first_head() + r / tile.count();
            const int64_t q_pos = tile.q_pos0() + r % tile.count();
            for (int64_t j = 0; j < n; ++j) {
              const bool seen = mask_mod(b, head, q_pos, k0 + j);
              keep[size_t(r * n + j)] = seen;
              visible += seen;
            }
          }
        } else {
          for (int64_t i = 0; i < tile.count(); ++i) {
            int64_t lo, hi;
            default_mask.range(tile.q_pos0() + i, lo, hi);
            visible += std::max<int64_t>(0, std::min(hi, k0 + n) - std::max(lo, k0));
          }
          visible *= rows / tile.count();
        }
        block_full = visible == rows * n;
        return visible > 0;
      };
      tile.set_custom(&rule, &classify);
#pragma omp for schedule(dynamic)
      for (int64_t t = 0; t < count; ++t) {
        const TileTask& task = tasks[size_t(t)];
        b = task.request;
        const size_t r = size_t(b);
        default_mask = visible_keys(layer, batch, b, causal);
        const int64_t token = batch.extend_start_loc[r] + task.first;
        // Every key is a candidate: the mask decides (so key_span must not cut anything).
        VisibleKeys all;
        all.causal = false;
        tile.begin(q + token * hq * d, hq * d, task.count, task.kv_head * group, group, d,
                   batch.extend_prefix_lens[r] + task.first, all, nullptr, layer.scaling);
        KeyRun run;
        run.pos0 = 0;
        run.len = batch.seq_lens[r];
        if (encoder) {
          run.k = in.k.data<float>() + batch.extend_start_loc[r] * row;
          run.v = in.v.data<float>() + batch.extend_start_loc[r] * row;
          run.stride = row;
        } else {
          run.pages = page_table_.data() + b * max_pages_;
          run.page_size = page_size_;
          run.pool_k = batch.kv_pool->key_buffer(layer.layer_id).data<float>();
          run.pool_v = batch.kv_pool->value_buffer(layer.layer_id).data<float>();
          run.pool_row = row;
        }
        tile.attend_run(run, task.kv_head, kKvBlock);
        tile.finish(o + token * hq * d, hq * d, nullptr, hq);
      }
    }
    return out;
  }

  ScoreMod score_mod_;
  MaskMod mask_mod_;
  std::vector<int64_t> page_table_;
  int64_t page_size_ = 1, max_pages_ = 0;
};

}  // namespace

std::unique_ptr<PagedAttentionBackend> make_flex_attention_backend() {
  return std::make_unique<FlexAttentionBackend>();
}

void set_flex_mods(PagedAttentionBackend& flex_backend, ScoreMod score_mod, MaskMod mask_mod) {
  auto* flex = dynamic_cast<FlexAttentionBackend*>(&flex_backend);
  check(flex != nullptr, "set_flex_mods: backend {} is not flex_attention", flex_backend.name());
  flex->set_mods(std::move(score_mod), std::move(mask_mod));
}

}  // namespace mmgen::attention::paged
