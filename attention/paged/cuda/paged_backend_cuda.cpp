#include "attention/paged/cuda/paged_backend_cuda.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>

#include "attention/paged/cuda/paged_backend_base.h"
#include "attention/paged/paged_backend.h"
#include "core/cuda/cuda_check.h"
#include "core/error.h"

namespace mmgen::cuda::paged {

namespace {

std::vector<int32_t> to_int32(const std::vector<int64_t>& values, const char* what) {
  std::vector<int32_t> out(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    check(values[i] >= std::numeric_limits<int32_t>::min() &&
              values[i] <= std::numeric_limits<int32_t>::max(),
          "GPU paged attention: {} {} does not fit the kernels' 32-bit metadata", what, values[i]);
    out[i] = int32_t(values[i]);
  }
  return out;
}

bool aligned16(const void* pointer) {
  return reinterpret_cast<uintptr_t>(pointer) % 16 == 0;
}

}  // namespace

PagedBackendCuda::~PagedBackendCuda() = default;

void PagedBackendCuda::forward(const DeviceAttentionIo& io, const PagedLayer& layer,
                               const ForwardBatch& batch, bool save_kv_cache) {
  switch (batch.mode) {
    case attention::paged::ForwardMode::Idle:
      return;
    case attention::paged::ForwardMode::Decode:
      return forward_decode(io, layer, batch, save_kv_cache);
    case attention::paged::ForwardMode::Extend:
      break;
  }
  forward_extend(io, layer, batch, save_kv_cache);
}

// ------------------------------------------------------------------ metadata upload

int64_t MetadataBuilder::add(const std::vector<int32_t>& values, int64_t capacity) {
  const int64_t offset = int64_t(data_.size());
  check(capacity < 0 || int64_t(values.size()) <= capacity,
        "GPU paged attention: {} metadata entries exceed the CUDA-graph capacity of {}",
        values.size(), capacity);
  data_.insert(data_.end(), values.begin(), values.end());
  if (capacity > int64_t(values.size())) data_.resize(size_t(offset + capacity), 0);
  return offset;
}

PinnedStaging::~PinnedStaging() {
  if (copied_) {  // no throwing in a destructor: errors here surface at the next checked call
    cudaEventSynchronize(copied_);
    cudaEventDestroy(copied_);
  }
  if (host_) cudaFreeHost(host_);
}

void PinnedStaging::upload(const std::vector<int32_t>& values, void* device, cudaStream_t stream) {
  if (values.empty()) return;
  if (!copied_) MMGEN_CUDA_CHECK(cudaEventCreateWithFlags(&copied_, cudaEventDisableTiming));
  // The previous copy out of this staging memory must be done before it is rewritten.
  MMGEN_CUDA_CHECK(cudaEventSynchronize(copied_));
  if (values.size() > capacity_) {
    if (host_) MMGEN_CUDA_CHECK(cudaFreeHost(host_));
    host_ = nullptr;
    capacity_ = std::max(values.size(), capacity_ * 2);
    MMGEN_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&host_), capacity_ * 4));
  }
  std::memcpy(host_, values.data(), values.size() * 4);
  MMGEN_CUDA_CHECK(
      cudaMemcpyAsync(device, host_, values.size() * 4, cudaMemcpyHostToDevice, stream));
  MMGEN_CUDA_CHECK(cudaEventRecord(copied_, stream));
}

// ------------------------------------------------------------------ the shared base

PagedBackendCudaBase::PagedBackendCudaBase(DeviceKVPool* pool,
                                           const PagedBackendCudaOptions& options)
    : pool_(pool), options_(options) {
  check(options.max_kv_splits >= 1 && options.max_context_len >= 1 && options.max_q_heads >= 1,
        "GPU paged attention: max_kv_splits, max_context_len and max_q_heads must be positive");
}

const int64_t* PagedBackendCudaBase::request_slots(const ForwardBatch& batch, int64_t request) {
  const int64_t row = batch.req_pool_indices[size_t(request)];
  if (row < 0 || !batch.req_to_token) return nullptr;
  return batch.req_to_token->row(row);
}

void PagedBackendCudaBase::add_slot_indices(const ForwardBatch& batch,
                                            const std::vector<int64_t>& lengths,
                                            MetadataBuilder& builder, Sections& s,
                                            const GraphCapacity* graph) const {
  const int64_t bs = batch.batch_size();
  std::vector<int32_t> indptr(size_t(bs), 0), counts(size_t(bs), 0), indices;
  int64_t total = 0;
  for (int64_t r = 0; r < bs; ++r) {
    indptr[size_t(r)] = int32_t(total);
    counts[size_t(r)] = int32_t(lengths[size_t(r)]);
    total += lengths[size_t(r)];
  }
  const int64_t capacity = graph ? graph->batch_size : -1;
  s.kv_start = builder.add(indptr, capacity);
  s.kv_len = builder.add(counts, capacity);
  if (total == 0 && !graph) return;
  // (A CUDA-graph capture batch has padding rows only and no table.)
  const bool real_rows = std::any_of(batch.req_pool_indices.begin(), batch.req_pool_indices.end(),
                                     [](int64_t r) { return r >= 0; });
  check(batch.req_to_token != nullptr || total == 0 || !real_rows,
        "GPU {} paged attention: the batch reads the pool but has no request table", name());
  indices.reserve(size_t(total));
  for (int64_t r = 0; r < bs; ++r) {
    const int64_t* slots = request_slots(batch, r);
    for (int64_t j = 0; j < lengths[size_t(r)]; ++j)
      indices.push_back(slots ? int32_t(slots[j]) : 0);  // padding rows read slot 0
  }
  s.indices = builder.add(indices, graph ? graph->indices : -1);
}

const int32_t* PagedBackendCudaBase::at(int64_t offset) const {
  return offset < 0 ? nullptr : device_base_ + offset;
}

void PagedBackendCudaBase::build(const ForwardBatch& batch, const GraphCapacity* graph,
                                 MetadataBuilder& builder) {
  const int64_t bs = batch.batch_size();
  const int64_t capacity = graph ? graph->batch_size : -1;
  Sections s;
  s.q_start = builder.add(to_int32(batch.extend_start_loc, "token offset"), capacity);
  s.q_len = builder.add(to_int32(batch.extend_seq_lens, "length"), capacity);
  s.q_pos0 = builder.add(to_int32(batch.extend_prefix_lens, "prefix length"), capacity);
  s.seq_len = builder.add(to_int32(batch.seq_lens, "sequence length"), capacity);
  if (!batch.valid_lens.empty())
    s.valid_len = builder.add(to_int32(batch.valid_lens, "valid length"), capacity);
  std::vector<int32_t> token_request, tiles;
  // Query tiles with their work (the keys the last query may see, an upper bound for both
  // causal and encoder-only layers), the heaviest first so the long tail does not come last.
  std::vector<std::array<int64_t, 3>> tile_work;
  token_request.reserve(size_t(batch.num_tokens));
  for (int64_t r = 0; r < bs; ++r) {
    const int64_t n = batch.extend_seq_lens[size_t(r)];
    token_request.insert(token_request.end(), size_t(n), int32_t(r));
    if (batch.mode != attention::paged::ForwardMode::Decode)
      for (int64_t first = 0; first < n; first += kPagedTileQueries) {
        const int64_t causal_keys =
            batch.extend_prefix_lens[size_t(r)] + std::min(n, first + kPagedTileQueries);
        tile_work.push_back({-std::min(causal_keys, batch.seq_lens[size_t(r)]), r, first});
      }
  }
  std::stable_sort(tile_work.begin(), tile_work.end(),
                   [](const auto& a, const auto& b) { return a[0] < b[0]; });
  for (const auto& [work, r, first] : tile_work) {
    tiles.push_back(int32_t(r));
    tiles.push_back(int32_t(first));
  }
  s.token_request = builder.add(token_request, capacity);
  s.num_tiles = int64_t(tiles.size() / 2);
  if (!tiles.empty()) s.tiles = builder.add(tiles);
  // Graph buffers always hold the slots (padding rows write slot 0).
  if (!batch.out_cache_loc.empty() || graph)
    s.out_loc = builder.add(to_int32(batch.out_cache_loc, "cache slot"), capacity);
  sections_ = s;
  add_key_indices(batch, builder, sections_, graph);
}

void PagedBackendCudaBase::init_forward_metadata(const ForwardBatch& batch) {
  graph_mode_ = false;
  MetadataBuilder builder;
  build(batch, nullptr, builder);
  const size_t bytes = std::max<size_t>(builder.data().size(), 1) * 4;
  if (eager_metadata_.size() < bytes) eager_metadata_ = DeviceBuffer(bytes);
  eager_staging_.upload(builder.data(), eager_metadata_.data(), stream_);
  device_base_ = eager_metadata_.as<int32_t>();
}

PagedAttentionParams PagedBackendCudaBase::query_params(const DeviceAttentionIo& io,
                                                        const PagedLayer& layer,
                                                        const ForwardBatch& batch,
                                                        bool extend) const {
  layer.validate();
  attention::paged::check_layer_kind(layer, name(), layer_kind(), "GPU ");
  const int64_t d = layer.head_dim, hq = layer.num_q_heads, hkv = layer.num_kv_heads;
  check(layer.bias == nullptr,
        "GPU paged attention layer {}: PagedLayer::bias is the CPU hook; on the GPU the bias is "
        "DeviceAttentionIo::bias",
        layer.layer_id);
  if (layer.latent.enabled()) {
    check(paged_latent_kernel_supports(d, layer.value_dim()),
          "GPU paged attention ({}): the latent kernel takes MLA's latent 512 + rope 64, got {} + "
          "{}",
          name(), layer.value_dim(), d - layer.value_dim());
  } else {
    const bool supported = extend ? paged_tile_kernel_supports(d) || paged_row_kernel_supports(d)
                                  : paged_row_kernel_supports(d);
    check(supported,
          "GPU paged attention ({}): head size {} is not compiled; the GPU kernels take 8, 16, "
          "32, 64, 128 or 256",
          name(), d);
  }
  check(io.q && io.k && io.v && io.out, "GPU paged attention layer {}: q, k, v and out are needed",
        layer.layer_id);
  check(device_base_ != nullptr,
        "GPU paged attention ({}): init_forward_metadata must run before the layers", name());
  if (layer.type == attention::paged::AttentionType::EncoderOnly)
    check(!batch.has_prefix(),
          "GPU paged attention layer {}: an encoder-only layer cannot extend a cached prefix",
          layer.layer_id);
  if (io.bias.values)
    check(io.bias.max_len >= batch.max_seq_len(),
          "GPU paged attention layer {}: the bias covers {} positions, the batch has sequences of "
          "{}",
          layer.layer_id, io.bias.max_len, batch.max_seq_len());
  PagedAttentionParams p;
  p.q = io.q;
  p.q_stride = io.q_stride ? io.q_stride : hq * d;
  p.out = io.out;
  p.v_dim = layer.value_dim();
  p.out_stride = io.out_stride ? io.out_stride : hq * p.v_dim;
  p.k = io.k;
  p.v = io.v;
  p.k_stride = io.k_stride ? io.k_stride : hkv * d;
  p.v_stride = io.v_stride ? io.v_stride : hkv * d;
  const int64_t per16 = io.fp32 ? 4 : 8;  // elements per 16 bytes
  check(p.q_stride % per16 == 0 && p.out_stride % per16 == 0 && p.k_stride % per16 == 0 &&
            p.v_stride % per16 == 0 && aligned16(io.q) && aligned16(io.k) && aligned16(io.v) &&
            aligned16(io.out),
        "GPU paged attention layer {}: q, k, v and out must be 16-byte aligned with token "
        "strides of whole 16-byte chunks",
        layer.layer_id);
  check(!io.fp32 || layer.type == attention::paged::AttentionType::EncoderOnly,
        "GPU paged attention layer {}: float32 attention runs encoder-only layers only (the KV "
        "pool and the decode path are bf16)",
        layer.layer_id);
  p.fp32 = io.fp32;
  p.num_tokens = batch.num_tokens;
  p.num_q_heads = hq;
  p.group = layer.group();
  p.head_dim = d;
  p.scale = layer.scaling;
  p.causal = layer.causal();
  p.window = layer.sliding_window_size;
  p.bias = io.bias.values;
  p.bias_max_len = io.bias.max_len;
  p.q_start = at(sections_.q_start);
  p.q_len = at(sections_.q_len);
  p.q_pos0 = at(sections_.q_pos0);
  p.valid_len = at(sections_.valid_len);
  p.token_request = at(sections_.token_request);
  p.tiles = at(sections_.tiles);
  p.num_tiles = sections_.num_tiles;
  return p;
}

void PagedBackendCudaBase::read_keys_from_pool(PagedAttentionParams& p, const DeviceAttentionIo& io,
                                               const PagedLayer& layer, const ForwardBatch& batch,
                                               bool save_kv_cache) {
  check(sections_.indices >= 0,
        "GPU {} paged attention layer {}: a decoder layer needs the batch's request table", name(),
        layer.layer_id);
  if (save_kv_cache) save_kv(io, layer, batch);
  set_pool_keys(p, layer);
  set_decode_keys(p, layer);
}

void PagedBackendCudaBase::set_pool_keys(PagedAttentionParams& p, const PagedLayer& layer) const {
  check(pool_ != nullptr,
        "GPU paged attention ({}): decoder layer {} needs a device KV pool (the backend was built "
        "without one)",
        name(), layer.layer_id);
  check(pool_->kv_heads() == layer.num_kv_heads && pool_->head_dim() == layer.head_dim &&
            layer.layer_id >= 0 && layer.layer_id < pool_->num_layers(),
        "GPU paged attention: layer {} ({} KV heads of {}) does not fit the pool ({} layers, {} "
        "KV heads of {})",
        layer.layer_id, layer.num_kv_heads, layer.head_dim, pool_->num_layers(), pool_->kv_heads(),
        pool_->head_dim());
  check(pool_->keys_only() == layer.latent.enabled(),
        "GPU paged attention ({}): layer {} {} but the pool {}", name(), layer.layer_id,
        layer.latent.enabled() ? "is MLA (one latent row per token)" : "has K and V",
        pool_->keys_only() ? "keeps keys only" : "keeps K and V");
  p.k = pool_->key_buffer(layer.layer_id);
  p.v = pool_->value_buffer(layer.layer_id);
  p.k_stride = p.v_stride = pool_->row_elems();
  p.page_size = pool_->page_size();
}

void PagedBackendCudaBase::save_kv(const DeviceAttentionIo& io, const PagedLayer& layer,
                                   const ForwardBatch& batch) {
  check(pool_ && sections_.out_loc >= 0 && int64_t(batch.out_cache_loc.size()) == batch.num_tokens,
        "GPU paged attention layer {}: a decoder layer needs a KV pool and one cache slot per new "
        "token",
        layer.layer_id);
  PagedAttentionParams unused;
  set_pool_keys(unused, layer);  // checks the layer against the pool
  const int64_t row = layer.num_kv_heads * layer.head_dim;
  store_kv(io.k, io.k_stride ? io.k_stride : row, pool_->keys_only() ? nullptr : io.v,
           io.v_stride ? io.v_stride : row, at(sections_.out_loc), batch.num_tokens,
           pool_->key_buffer(layer.layer_id), pool_->value_buffer(layer.layer_id), row, stream_);
}

void PagedBackendCudaBase::run_extend(const PagedAttentionParams& params) {
  if (paged_tile_kernel_supports(params.head_dim) && !options_.force_row_kernel && !params.fp32)
    paged_attention_tiles(params, stream_);
  else
    paged_attention_rows(params, 1, nullptr, nullptr, stream_);
}

void PagedBackendCudaBase::forward_decode(const DeviceAttentionIo& io, const PagedLayer& layer,
                                          const ForwardBatch& batch, bool save_kv_cache) {
  check(layer.type == attention::paged::AttentionType::Decoder,
        "GPU paged attention ({}): layer {} is encoder-only and cannot decode", name(),
        layer.layer_id);
  check(batch.mode == attention::paged::ForwardMode::Decode,
        "GPU paged attention ({}): forward_decode needs a decode batch", name());
  PagedAttentionParams p = query_params(io, layer, batch, false);
  if (save_kv_cache) save_kv(io, layer, batch);
  set_pool_keys(p, layer);
  set_decode_keys(p, layer);
  const int64_t splits = options_.max_kv_splits;
  float* partial_out = nullptr;
  float* partial_lse = nullptr;
  if (splits > 1) {
    const size_t floats = size_t(p.num_tokens * p.num_q_heads * splits * (p.head_dim + 1));
    if (graph_mode_) {
      check(floats * 4 <= graph_partial_.size(),
            "GPU paged attention ({}): a captured decode of {} rows x {} heads x {} exceeds the "
            "CUDA-graph workspace (max_q_heads {})",
            name(), p.num_tokens, p.num_q_heads, p.head_dim, options_.max_q_heads);
      partial_out = graph_partial_.as<float>();
    } else {
      if (eager_partial_.size() < floats * 4) eager_partial_ = DeviceBuffer(floats * 4);
      partial_out = eager_partial_.as<float>();
    }
    partial_lse = partial_out + p.num_tokens * p.num_q_heads * splits * p.head_dim;
  }
  paged_attention_rows(p, splits, partial_out, partial_lse, stream_);
}

void PagedBackendCudaBase::init_cuda_graph_state(int64_t max_batch_size, int64_t max_num_tokens) {
  check(pool_ != nullptr,
        "GPU paged attention ({}): CUDA graphs capture decode, which needs a device KV pool",
        name());
  check(max_batch_size >= 1 && max_num_tokens >= max_batch_size,
        "GPU paged attention: CUDA-graph state for {} requests and {} tokens", max_batch_size,
        max_num_tokens);
  const int64_t page = pool_->page_size();
  graph_capacity_.batch_size = max_batch_size;
  graph_capacity_.max_pages = (options_.max_context_len + page - 1) / page;
  graph_capacity_.indices = graph_indices_capacity(max_batch_size);
  // Per-request sections (at most 10) plus the design's indices.
  graph_metadata_entries_ = size_t(10 * max_batch_size + graph_capacity_.indices);
  graph_metadata_ = DeviceBuffer(graph_metadata_entries_ * 4);
  MMGEN_CUDA_CHECK(cudaMemset(graph_metadata_.data(), 0, graph_metadata_.size()));
  if (options_.max_kv_splits > 1)
    graph_partial_ = DeviceBuffer(size_t(max_batch_size * options_.max_q_heads *
                                         options_.max_kv_splits * (pool_->head_dim() + 1)) *
                                  4);
}

void PagedBackendCudaBase::init_forward_metadata_capture_cuda_graph(int64_t batch_size,
                                                                    int64_t num_tokens,
                                                                    const ForwardBatch& batch) {
  check(graph_metadata_entries_ > 0,
        "GPU paged attention ({}): init_cuda_graph_state must run before a capture", name());
  check(batch.mode == attention::paged::ForwardMode::Decode && batch.batch_size() == batch_size &&
            num_tokens == batch_size && batch_size <= graph_capacity_.batch_size,
        "GPU paged attention ({}): a captured decode takes one token per request, {} requests at "
        "most (got {} requests, {} tokens)",
        name(), graph_capacity_.batch_size, batch.batch_size(), num_tokens);
  init_forward_metadata_replay_cuda_graph(batch_size, batch);
}

void PagedBackendCudaBase::init_forward_metadata_replay_cuda_graph(int64_t batch_size,
                                                                   const ForwardBatch& batch) {
  check(graph_metadata_entries_ > 0 && batch.batch_size() == batch_size &&
            batch.mode == attention::paged::ForwardMode::Decode,
        "GPU paged attention ({}): a replay needs the CUDA-graph state and a decode batch padded "
        "to the captured size",
        name());
  check(batch.max_seq_len() <= options_.max_context_len,
        "GPU paged attention ({}): a sequence of {} tokens exceeds the CUDA-graph context limit of "
        "{}",
        name(), batch.max_seq_len(), options_.max_context_len);
  MetadataBuilder builder;
  build(batch, &graph_capacity_, builder);
  check(builder.data().size() <= graph_metadata_entries_,
        "GPU paged attention: CUDA-graph metadata overflow");
  graph_staging_.upload(builder.data(), graph_metadata_.data(), stream_);
  device_base_ = graph_metadata_.as<int32_t>();
  graph_mode_ = true;
}

// ------------------------------------------------------------------ registry

std::vector<std::string_view> cuda_paged_backends() {
  return {"fa3",
          "flashinfer",
          "triton",
          "torch_native",
          "flex_attention",
          "dual_chunk_flash_attn",
          "flashinfer_mla",
          "flashmla"};
}

std::vector<int> cuda_paged_head_sizes() {
  return {8, 16, 32, 64, 128, 256};
}

std::unique_ptr<PagedBackendCuda> make_paged_backend_cuda(std::string_view name, DeviceKVPool* pool,
                                                          const PagedBackendCudaOptions& options) {
  if (name == "fa3") return make_fa3_backend_cuda(pool, options);
  if (name == "flashinfer") return make_flashinfer_backend_cuda(pool, options);
  if (name == "triton") return make_triton_backend_cuda(pool, options);
  if (name == "torch_native") return make_torch_native_backend_cuda(pool, options);
  if (name == "flex_attention") return make_flex_attention_backend_cuda(pool, options);
  if (name == "dual_chunk_flash_attn") return make_dual_chunk_backend_cuda(pool, options);
  if (name == "flashinfer_mla") return make_flashinfer_mla_backend_cuda(pool, options);
  if (name == "flashmla") return make_flashmla_backend_cuda(pool, options);
  fail("paged attention backend '{}' has no CUDA implementation in this build; these do: {}", name,
       fmt::join(cuda_paged_backends(), ", "));
}

}  // namespace mmgen::cuda::paged
