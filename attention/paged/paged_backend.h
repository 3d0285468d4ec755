// The paged-attention backend contract (SGLang's AttentionBackend), which the text encoders run
// their attention layers through:
//   init_forward_metadata(batch)   once per forward pass, before any layer: whatever all layers
//                                  share (page tables, CSR indices, plans, split counts);
//   forward_extend(q, k, v, ...)   once per layer for a prefill (with or without a cached prefix);
//   forward_decode(q, k, v, ...)   once per layer for one new token per request;
//   forward(...)                   the dispatcher: idle → empty, decode → forward_decode, else
//                                  forward_extend.
// q [num_tokens, Hq, D], k and v [num_tokens, Hkv, D] float32 (the new tokens, packed request
// after request). Decoder layers write the new K/V to the pool at batch.out_cache_loc when
// save_kv_cache is set (a caller that already wrote them passes false); encoder-only layers never
// touch a pool. Returns [num_tokens, Hq, D].
//
// The CUDA-graph hooks are part of the contract and do nothing on the CPU (the CUDA issue fills
// them): init_cuda_graph_state allocates, once, every persistent buffer captured graphs read;
// the capture hook prepares metadata in those buffers before capturing one batch size; the replay
// hook refreshes them in place before each replay, on the critical path and without host syncs.
//
// Backends (CPU ports of the designs; see each file): torch_native, triton, flashinfer, fa3,
// flex_attention, dual_chunk_flash_attn, flashinfer_mla, flashmla.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "attention/paged/forward_batch.h"
#include "attention/paged/paged_layer.h"
#include "core/tensor.h"

namespace mmgen::attention::paged {

class PagedAttentionBackend {
 public:
  virtual ~PagedAttentionBackend() = default;
  virtual std::string_view name() const = 0;

  virtual void init_forward_metadata(const ForwardBatch& batch) = 0;
  virtual Tensor forward_extend(const Tensor& q, const Tensor& k, const Tensor& v,
                                const PagedLayer& layer, const ForwardBatch& batch,
                                bool save_kv_cache = true) = 0;
  virtual Tensor forward_decode(const Tensor& q, const Tensor& k, const Tensor& v,
                                const PagedLayer& layer, const ForwardBatch& batch,
                                bool save_kv_cache = true) = 0;
  Tensor forward(const Tensor& q, const Tensor& k, const Tensor& v, const PagedLayer& layer,
                 const ForwardBatch& batch, bool save_kv_cache = true);

  // CUDA-graph hooks (no-ops on the CPU).
  virtual void init_cuda_graph_state(int64_t max_batch_size, int64_t max_num_tokens) {}
  virtual void init_forward_metadata_capture_cuda_graph(int64_t batch_size, int64_t num_tokens,
                                                        const ForwardBatch& batch) {}
  virtual void init_forward_metadata_replay_cuda_graph(int64_t batch_size,
                                                       const ForwardBatch& batch) {}
  // The seq_len given to rows padded up to a captured batch size.
  virtual int64_t cuda_graph_seq_len_fill_value() const { return 1; }

 protected:
  // Shared by the designs: checks shapes and that the layer is of the kind this design runs
  // (check_layer_kind), and returns contiguous q [T, query_rows, D], k [T, Hkv, D] and
  // v [T, Hkv, value_dim] (for MLA, v is the first kv_lora_rank columns of k and is not read).
  struct Inputs {
    Tensor q, k, v;
  };
  Inputs check_inputs(const Tensor& q, const Tensor& k, const Tensor& v, const PagedLayer& layer,
                      const ForwardBatch& batch) const;
  // The kind of layer this design runs.
  virtual ModelAttention layer_kind() const { return ModelAttention::Plain; }
  // Writes the new tokens' K/V to the pool (decoder layers only; checks that there is a pool).
  static void save_kv(const Tensor& k, const Tensor& v, const PagedLayer& layer,
                      const ForwardBatch& batch);
  // A request's pool slots 0 .. count − 1 (its req_to_token row).
  static const int64_t* request_slots(const ForwardBatch& batch, int64_t request);
};

// Settings some designs read (the rest ignore them).
struct PagedBackendOptions {
  int64_t max_kv_splits = 8;          // triton decode: --triton-attention-num-kv-splits
  bool flashinfer_use_ragged = true;  // flashinfer: ragged + paged extend (false: paged only)
};

// Builds a paged backend by canonical catalogue name; throws Error for a name without a CPU
// implementation (listing those that have one).
std::unique_ptr<PagedAttentionBackend> make_paged_backend(std::string_view name,
                                                          const PagedBackendOptions& options = {});
// The same on `device`: on the GPU the backend takes device tensors (bf16, or float32 in the exact
// mode) and runs the CUDA kernels of that design
// (attention/paged/cuda/paged_tensor_backend_cuda.h). Encoder-only use (no K/V pool).
std::unique_ptr<PagedAttentionBackend> make_paged_backend(std::string_view name, Device device,
                                                          const PagedBackendOptions& options = {});

// The KV pool a decoder backend keeps on the GPU: `size` token slots (plus the padding page) of
// `num_layers` layers, bf16 (attention/paged/cuda/paged_kv_pool.h).
struct DeviceKVPoolShape {
  int64_t size = 0;
  int64_t page_size = 1;
  int64_t num_layers = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  bool keys_only = false;  // MLA: one latent row per token, no V
};
// A backend for decoder (causal, KV-caching) layers on `device`. On the CPU it is
// make_paged_backend(name): its K/V live in batch.kv_pool, the caller's. On the GPU it owns a
// device pool of `pool`'s shape, whose rows the host allocator's slots address (batch.kv_pool is
// not read there); the tensors are as make_paged_backend(name, device) takes them (bf16: the
// pool and the decode path are bf16).
std::unique_ptr<PagedAttentionBackend> make_paged_decoder_backend(
    std::string_view name, Device device, const DeviceKVPoolShape& pool,
    const PagedBackendOptions& options = {});

// The paged backends this build implements on the CPU (feeds the catalogue's kernel table).
std::vector<std::string_view> cpu_paged_backends();

// Throws Error when `layer` is not of the kind `design` (a backend of kind `design_kind`) runs.
// `where` prefixes the message ("GPU " or "").
void check_layer_kind(const PagedLayer& layer, std::string_view design, ModelAttention design_kind,
                      std::string_view where);

}  // namespace mmgen::attention::paged
