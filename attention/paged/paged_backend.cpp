#include "attention/paged/paged_backend.h"
#ifdef MMGEN_HAVE_CUDA
#include "attention/paged/cuda/paged_tensor_backend_cuda.h"
#endif

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "attention/paged/backends.h"
#include "core/error.h"

namespace mmgen::attention::paged {

Tensor PagedAttentionBackend::forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                      const PagedLayer& layer, const ForwardBatch& batch,
                                      bool save_kv_cache) {
  switch (batch.mode) {
    case ForwardMode::Idle:
      return Tensor::empty({0, layer.num_q_heads, layer.value_dim()});
    case ForwardMode::Decode:
      return forward_decode(q, k, v, layer, batch, save_kv_cache);
    case ForwardMode::Extend:
      break;
  }
  return forward_extend(q, k, v, layer, batch, save_kv_cache);
}

PagedAttentionBackend::Inputs PagedAttentionBackend::check_inputs(const Tensor& q, const Tensor& k,
                                                                  const Tensor& v,
                                                                  const PagedLayer& layer,
                                                                  const ForwardBatch& batch) const {
  layer.validate();
  check_layer_kind(layer, name(), layer_kind(), "");
  const Shape q_shape = {batch.num_tokens, layer.query_rows(), layer.head_dim};
  const Shape kv_shape = {batch.num_tokens, layer.num_kv_heads, layer.head_dim};
  const Shape v_shape = {batch.num_tokens, layer.num_kv_heads, layer.value_dim()};
  check(q.shape() == q_shape && k.shape() == kv_shape && v.shape() == v_shape &&
            q.dtype() == DType::F32 && k.dtype() == DType::F32 && v.dtype() == DType::F32,
        "paged attention layer {}: q {} k {} v {} should be float32 {}, {}, {}", layer.layer_id,
        shape_string(q.shape()), shape_string(k.shape()), shape_string(v.shape()),
        shape_string(q_shape), shape_string(kv_shape), shape_string(v_shape));
  if (layer.type == AttentionType::EncoderOnly)
    check(!batch.has_prefix(),
          "paged attention layer {}: an encoder-only layer cannot extend a cached prefix",
          layer.layer_id);
  return {q.contiguous(), k.contiguous(), v.contiguous()};
}

void PagedAttentionBackend::save_kv(const Tensor& k, const Tensor& v, const PagedLayer& layer,
                                    const ForwardBatch& batch) {
  check(batch.kv_pool && batch.req_to_token &&
            int64_t(batch.out_cache_loc.size()) == batch.num_tokens,
        "paged attention layer {}: a decoder layer needs a KV pool, a request table and one cache "
        "slot per new token",
        layer.layer_id);
  batch.kv_pool->set_kv(layer.layer_id, batch.out_cache_loc, k, v);
}

const int64_t* PagedAttentionBackend::request_slots(const ForwardBatch& batch, int64_t request) {
  return batch.req_to_token->row(batch.req_pool_indices[size_t(request)]);
}

void check_layer_kind(const PagedLayer& layer, std::string_view design, ModelAttention design_kind,
                      std::string_view where) {
  const ModelAttention kind = layer.kind();
  if (kind == design_kind) return;
  switch (design_kind) {
    case ModelAttention::DualChunk:
      fail(
          "{}paged attention layer {}: {} runs only models with dual chunk attention (a "
          "dual_chunk_attention_config in the model's config); choose another paged backend",
          where, layer.layer_id, design);
    case ModelAttention::LatentMla:
      fail(
          "{}paged attention layer {}: {} runs only models with multi-head latent attention "
          "(MLA: a kv_lora_rank in the model's config); choose another paged backend",
          where, layer.layer_id, design);
    case ModelAttention::Plain:
      break;
  }
  if (kind == ModelAttention::DualChunk)
    fail(
        "{}paged attention layer {}: the model uses dual chunk attention (chunk_size {}), which "
        "only dual_chunk_flash_attn runs; choose it",
        where, layer.layer_id, layer.dual_chunk.chunk_size);
  fail(
      "{}paged attention layer {}: the model uses multi-head latent attention (MLA), which only "
      "flashinfer_mla and flashmla run; choose one",
      where, layer.layer_id);
}

std::vector<std::string_view> cpu_paged_backends() {
  return {"torch_native",          "triton",         "flashinfer", "fa3", "flex_attention",
          "dual_chunk_flash_attn", "flashinfer_mla", "flashmla"};
}

std::unique_ptr<PagedAttentionBackend> make_paged_backend(std::string_view name,
                                                          const PagedBackendOptions& options) {
  if (name == "torch_native") return make_torch_native_backend();
  if (name == "triton") return make_triton_backend(options.max_kv_splits);
  if (name == "flashinfer") return make_flashinfer_backend(options.flashinfer_use_ragged);
  if (name == "fa3") return make_fa3_backend();
  if (name == "flex_attention") return make_flex_attention_backend();
  if (name == "dual_chunk_flash_attn") return make_dual_chunk_backend();
  if (name == "flashinfer_mla") return make_flashinfer_mla_backend();
  if (name == "flashmla") return make_flashmla_backend();
  fail("paged attention backend '{}' has no CPU implementation in this build; these do: {}", name,
       fmt::join(cpu_paged_backends(), ", "));
}

std::unique_ptr<PagedAttentionBackend> make_paged_backend(std::string_view name, Device device,
                                                          const PagedBackendOptions& options) {
  if (device == Device::CPU) return make_paged_backend(name, options);
#ifdef MMGEN_HAVE_CUDA
  cuda::paged::PagedBackendCudaOptions cuda_options;
  cuda_options.flashinfer_use_ragged = options.flashinfer_use_ragged;
  return cuda::paged::make_tensor_paged_backend_cuda(name, cuda_options);
#else
  fail("paged attention backend '{}' on the GPU: this build has no CUDA support; use --device cpu",
       name);
#endif
}

std::unique_ptr<PagedAttentionBackend> make_paged_decoder_backend(
    std::string_view name, Device device, const DeviceKVPoolShape& pool,
    const PagedBackendOptions& options) {
  if (device == Device::CPU) return make_paged_backend(name, options);
#ifdef MMGEN_HAVE_CUDA
  cuda::paged::PagedBackendCudaOptions cuda_options;
  cuda_options.flashinfer_use_ragged = options.flashinfer_use_ragged;
  return cuda::paged::make_tensor_paged_backend_cuda(
      name,
      std::make_unique<cuda::paged::DeviceKVPool>(pool.size, pool.page_size, pool.num_layers,
                                                  pool.kv_heads, pool.head_dim, pool.keys_only),
      cuda_options);
#else
  (void)pool;
  fail("paged attention backend '{}' on the GPU: this build has no CUDA support; use --device cpu",
       name);
#endif
}

}  // namespace mmgen::attention::paged
