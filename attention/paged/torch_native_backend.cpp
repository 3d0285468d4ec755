// torch_native (SGLang torch_native_backend.py), the reference design: no metadata; per request,
// gather its whole K/V from the pool (req_to_token[row][:seq_len], the new tokens written first)
// and run plain attention with the queries at their positions — the "pad Q to the KV length,
// square causal mask" trick — in one pass over all keys, so the softmax is exact, not online.
// Encoder-only layers read their K/V straight from the packed batch (nothing is in a pool).
#include "attention/paged/backends.h"
#include "attention/paged/tile_attention.h"
#include "core/error.h"

namespace mmgen::attention::paged {

namespace {

class TorchNativeBackend final : public PagedAttentionBackend {
 public:
  std::string_view name() const override { return "torch_native"; }

  void init_forward_metadata(const ForwardBatch&) override {}

  Tensor forward_extend(const Tensor& q, const Tensor& k, const Tensor& v, const PagedLayer& layer,
                        const ForwardBatch& batch, bool save_kv_cache) override {
    return run(q, k, v, layer, batch, save_kv_cache, layer.causal());
  }

  // One query per request, every key before it: no causal mask needed.
  Tensor forward_decode(const Tensor& q, const Tensor& k, const Tensor& v, const PagedLayer& layer,
                        const ForwardBatch& batch, bool save_kv_cache) override {
    return run(q, k, v, layer, batch, save_kv_cache, false);
  }

 private:
  Tensor run(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, const PagedLayer& layer,
             const ForwardBatch& batch, bool save_kv_cache, bool causal) {
    const Inputs in = check_inputs(q_in, k_in, v_in, layer, batch);
    Tensor out = Tensor::empty(in.q.shape());
    const bool encoder = layer.type == AttentionType::EncoderOnly;
    if (!encoder && save_kv_cache) save_kv(in.k, in.v, layer, batch);
    const int64_t row = layer.num_kv_heads * layer.head_dim;
    const float* k = in.k.data<float>();
    const float* v = in.v.data<float>();
    const KVPool* pool = batch.kv_pool;
    auto runs_of = [&](const TileTask& task, std::vector<KeyRun>& runs) {
      const size_t r = size_t(task.request);
      KeyRun run;
      run.pos0 = 0;
      run.len = batch.seq_lens[r];
      if (encoder) {
        run.k = k + batch.extend_start_loc[r] * row;
        run.v = v + batch.extend_start_loc[r] * row;
        run.stride = row;
      } else {
        run.slots = request_slots(batch, task.request);
        run.pool_k = pool->key_buffer(layer.layer_id).data<float>();
        run.pool_v = pool->value_buffer(layer.layer_id).data<float>();
        run.pool_row = row;
      }
      runs.push_back(run);
    };
    // One block spanning the longest sequence: a single exact softmax per query.
    run_tiles(make_tile_tasks(batch, layer, kQueryTile), in.q.data<float>(), layer, batch, causal,
              runs_of, std::max<int64_t>(1, batch.max_seq_len()), out.data<float>(), nullptr);
    return out;
  }
};

}  // namespace

std::unique_ptr<PagedAttentionBackend> make_torch_native_backend() {
  return std::make_unique<TorchNativeBackend>();
}

}  // namespace mmgen::attention::paged
