#include "attention/paged/cuda/paged_tensor_backend_cuda.h"

#include "core/error.h"

namespace mmgen::cuda::paged {
namespace {

using attention::paged::PagedAttentionBackend;
using attention::paged::RelativePositionBias;

// Checks one of q, k, v: a GPU tensor [tokens, heads, head_dim] of `dtype` whose heads are packed
// (rows may be strided). Returns the elements between consecutive tokens.
int64_t token_stride(const Tensor& x, const char* what, int64_t tokens, int64_t heads,
                     int64_t head_dim, DType dtype) {
  check(x.device() == Device::CUDA && x.dim() == 3 && x.size(0) == tokens && x.size(1) == heads &&
            x.size(2) == head_dim && x.dtype() == dtype && x.strides()[2] == 1 &&
            (heads == 1 || x.strides()[1] == head_dim),
        "GPU paged attention: {} is {} {} on {}, expected [{}, {}, {}] {} on the GPU", what,
        dtype_name(x.dtype()), shape_string(x.shape()), device_name(x.device()), tokens, heads,
        head_dim, dtype_name(dtype));
  return x.strides()[0];
}

class TensorPagedBackendCuda final : public PagedAttentionBackend {
 public:
  // `pool` (null for encoder-only use) is the one `backend` was built with.
  TensorPagedBackendCuda(std::unique_ptr<DeviceKVPool> pool,
                         std::unique_ptr<PagedBackendCuda> backend)
      : pool_(std::move(pool)), backend_(std::move(backend)) {}

  std::string_view name() const override { return backend_->name(); }
  void init_forward_metadata(const ForwardBatch& batch) override {
    backend_->init_forward_metadata(batch);
  }
  Tensor forward_extend(const Tensor& q, const Tensor& k, const Tensor& v, const PagedLayer& layer,
                        const ForwardBatch& batch, bool save_kv_cache) override {
    return run(q, k, v, layer, batch, save_kv_cache, false);
  }
  Tensor forward_decode(const Tensor& q, const Tensor& k, const Tensor& v, const PagedLayer& layer,
                        const ForwardBatch& batch, bool save_kv_cache) override {
    return run(q, k, v, layer, batch, save_kv_cache, true);
  }
  void init_cuda_graph_state(int64_t max_batch_size, int64_t max_num_tokens) override {
    backend_->init_cuda_graph_state(max_batch_size, max_num_tokens);
  }
  void init_forward_metadata_capture_cuda_graph(int64_t batch_size, int64_t num_tokens,
                                                const ForwardBatch& batch) override {
    backend_->init_forward_metadata_capture_cuda_graph(batch_size, num_tokens, batch);
  }
  void init_forward_metadata_replay_cuda_graph(int64_t batch_size,
                                               const ForwardBatch& batch) override {
    backend_->init_forward_metadata_replay_cuda_graph(batch_size, batch);
  }
  int64_t cuda_graph_seq_len_fill_value() const override {
    return backend_->cuda_graph_seq_len_fill_value();
  }

 private:
  Tensor run(const Tensor& q, const Tensor& k, const Tensor& v, const PagedLayer& layer,
             const ForwardBatch& batch, bool save_kv_cache, bool decode) {
    layer.validate();
    const int64_t tokens = q.dim() == 3 ? q.size(0) : -1;
    const DType dtype = q.dtype();
    check(dtype == DType::BF16 || dtype == DType::F32,
          "GPU paged attention: q, k, v must be bf16 (or float32, the exact mode), got {}",
          dtype_name(dtype));
    DeviceAttentionIo io;
    io.q_stride = token_stride(q, "q", tokens, layer.query_rows(), layer.head_dim, dtype);
    io.k_stride = token_stride(k, "k", tokens, layer.num_kv_heads, layer.head_dim, dtype);
    io.v_stride = token_stride(v, "v", tokens, layer.num_kv_heads, layer.value_dim(), dtype);
    Tensor out = Tensor::empty({tokens, layer.num_q_heads, layer.value_dim()}, dtype, Device::CUDA);
    io.q = q.raw(), io.k = k.raw(), io.v = v.raw(), io.out = out.raw();
    io.fp32 = dtype == DType::F32;
    PagedLayer device_layer = layer;
    device_layer.bias = nullptr;  // the GPU form of the hook is io.bias
    if (layer.bias) {
      const auto* relative = dynamic_cast<const RelativePositionBias*>(layer.bias);
      check(relative != nullptr,
            "GPU paged attention: only a relative position bias (T5's) has a GPU form");
      check(relative->values().device() == Device::CUDA,
            "GPU paged attention: the relative position bias must be on the GPU with q, k, v");
      io.bias.values = relative->values().data<float>();
      io.bias.max_len = relative->max_len();
    }
    if (decode)
      backend_->forward_decode(io, device_layer, batch, save_kv_cache);
    else
      backend_->forward_extend(io, device_layer, batch, save_kv_cache);
    return out;
  }

  std::unique_ptr<DeviceKVPool> pool_;  // declared first: outlives the backend that reads it
  std::unique_ptr<PagedBackendCuda> backend_;
};

}  // namespace

std::unique_ptr<PagedAttentionBackend> make_tensor_paged_backend_cuda(
    std::string_view name, const PagedBackendCudaOptions& options) {
  return std::make_unique<TensorPagedBackendCuda>(nullptr,
                                                  make_paged_backend_cuda(name, nullptr, options));
}

std::unique_ptr<PagedAttentionBackend> make_tensor_paged_backend_cuda(
    std::string_view name, std::unique_ptr<DeviceKVPool> pool,
    const PagedBackendCudaOptions& options) {
  check(pool != nullptr, "GPU paged attention ({}): a decoder backend needs a KV pool", name);
  auto backend = make_paged_backend_cuda(name, pool.get(), options);
  return std::make_unique<TensorPagedBackendCuda>(std::move(pool), std::move(backend));
}

}  // namespace mmgen::cuda::paged
