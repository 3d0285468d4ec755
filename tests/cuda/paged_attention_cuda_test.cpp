// The GPU paged backends (fa3 and flex_attention: native page table; flashinfer: ragged + paged
// CSR, and its paged-only mode; triton: prefix through CSR slots and new tokens packed in one
// softmax, split-KV decode; torch_native: whole sequences through the request rows, the row
// kernel; dual_chunk_flash_attn: three regions merged by LSE, against the CPU dual chunk design;
// flashinfer_mla (slots) and flashmla (64-token pages): absorbed MLA on the latent kernel, against
// the CPU flashinfer_mla) against the CPU torch_native backend (itself checked against a
// double-precision formula) on the same bf16-rounded inputs and the same slots: ragged causal
// extends, a continued request (its own partial last page), a prefix hit on another request's
// pages, decode steps, grouped-query attention, a sliding window, page sizes 1 and 16, the tile
// kernel and the row kernel; encoder-only batches with a T5-style bias, padding and a window,
// in bf16 and in the float32 mode (within 1e-5);
// CUDA-graph decode replay against eager decode (the same bits) for full and padded buckets;
// what the catalogue reports for this build on this GPU; and the errors for what the GPU cannot
// run.
#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "attention/catalogue.h"
#include "attention/paged/backends.h"
#include "attention/paged/cuda/paged_backend_cuda.h"
#include "attention/paged/cuda/paged_graph_runner.h"
#include "attention/paged/kv_memory.h"
#include "core/cuda/cuda_check.h"
#include "cuda_test_support.h"

using namespace mmgen;
using namespace mmgen::cuda_testing;
namespace ap = mmgen::attention::paged;
namespace cp = mmgen::cuda::paged;

namespace {

constexpr int64_t kLayers = 2;

// Host floats (already bf16-rounded) and their bf16 bits.
struct Values {
  Tensor host;
  std::vector<uint16_t> bits;
};

Values random_values(const Shape& shape, std::mt19937& rng, float scale) {
  Values out;
  out.host = Tensor::empty(shape);
  std::normal_distribution<float> normal(0.0f, scale);
  out.bits.resize(size_t(out.host.numel()));
  for (int64_t i = 0; i < out.host.numel(); ++i) {
    out.bits[size_t(i)] = f32_to_bf16(normal(rng));
    out.host.data<float>()[i] = bf16_to_f32(out.bits[size_t(i)]);
  }
  return out;
}

cuda::DeviceBuffer upload(const std::vector<uint16_t>& bits) {
  cuda::DeviceBuffer buffer(std::max<size_t>(bits.size(), 8) * 2);
  if (!bits.empty()) buffer.upload(bits.data(), bits.size() * 2);
  return buffer;
}

std::vector<double> download_bf16(const cuda::DeviceBuffer& buffer, int64_t count) {
  std::vector<uint16_t> bits(static_cast<size_t>(count));
  MMGEN_CUDA_CHECK(cudaDeviceSynchronize());
  buffer.download(bits.data(), bits.size() * 2);
  std::vector<double> out(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) out[i] = bf16_to_f32(bits[i]);
  return out;
}

std::vector<double> as_doubles(const Tensor& t) {
  return std::vector<double>(t.data<float>(), t.data<float>() + t.numel());
}

bool finite(const std::vector<double>& values) {
  for (double v : values)
    if (!std::isfinite(v)) return false;
  return true;
}

// MLA's absorbed form at DeepSeek's sizes: latent 512 + rope 64, one KV head.
constexpr int64_t kLatentRank = 512, kLatentRope = 64;

// V as the model hands it for MLA: the first kLatentRank columns of each K row.
Values latent_values(const Values& k) {
  const int64_t n = k.host.size(0), d = k.host.size(2);
  Values v;
  v.host = k.host.slice(2, 0, kLatentRank).contiguous();
  for (int64_t t = 0; t < n; ++t)
    v.bits.insert(v.bits.end(), k.bits.begin() + t * d, k.bits.begin() + t * d + kLatentRank);
  return v;
}

// Dual chunk layers: chunks of 32 over sequences of up to ~200 tokens (every region), with the
// length scale active beyond 64 tokens.
const ap::DualChunk kDualChunk{
    .chunk_size = 48, .local_size = 16, .original_max_position_embeddings = 64};

struct Case {
  std::string backend;
  int64_t page_size = 1, hq = 4, hkv = 2, d = 64, window = -1;
  bool ragged = true, force_rows = false;
  bool dual_chunk = false;  // dual chunk layers, checked against the CPU dual chunk design
  bool latent = false;      // MLA layers (hkv 1, d 576), checked against CPU flashinfer_mla
  std::string label() const {
    return fmt::format("{}{} P={} Hq={} Hkv={} D={}{}{}", backend, ragged ? "" : "(paged-only)",
                       page_size, hq, hkv, d, window >= 0 ? fmt::format(" window={}", window) : "",
                       force_rows ? " row kernel" : "");
  }
  int64_t query_rows() const { return dual_chunk ? 3 * hq : hq; }
  int64_t value_dim() const { return latent ? kLatentRank : d; }
};

// The designs for plain layers (dual_chunk_flash_attn runs dual chunk layers only, the MLA designs
// latent layers only).
std::vector<std::string> plain_backends() {
  std::vector<std::string> names;
  for (const std::string_view name : mmgen::attention::paged_backends_for(
           cp::cuda_paged_backends(), mmgen::attention::ModelAttention::Plain))
    names.emplace_back(name);
  return names;
}

// A decoder model's paged state on both sides: one host request table and allocator, a CPU pool
// and a GPU pool with the same slots.
class DecoderScenario {
 public:
  explicit DecoderScenario(const Case& c)
      : case_(c),
        table_(8, 2048),
        allocator_(4096, c.page_size),
        cpu_pool_(4096, c.page_size, kLayers, c.hkv, c.d, 0, c.latent),
        gpu_pool_(4096, c.page_size, kLayers, c.hkv, c.d, c.latent),
        cpu_(ap::make_paged_backend(c.dual_chunk ? "dual_chunk_flash_attn"
                                    : c.latent   ? "flashinfer_mla"
                                                 : "torch_native")),
        rng_(uint32_t(c.page_size * 1000 + c.d + c.hq)) {
    cp::PagedBackendCudaOptions options;
    options.flashinfer_use_ragged = c.ragged;
    options.force_row_kernel = c.force_rows;
    options.max_context_len = 1024;
    options.max_q_heads = c.hq;
    gpu_ = cp::make_paged_backend_cuda(c.backend, &gpu_pool_, options);
  }

  ap::PagedLayer layer(int64_t id) const {
    ap::PagedLayer layer;
    layer.layer_id = id;
    layer.num_q_heads = case_.hq;
    layer.num_kv_heads = case_.hkv;
    layer.head_dim = case_.d;
    layer.scaling = float(1.0 / std::sqrt(double(case_.d)));
    layer.sliding_window_size = case_.window;
    if (case_.dual_chunk) layer.dual_chunk = kDualChunk;
    if (case_.latent) layer.latent = {.kv_lora_rank = kLatentRank, .qk_rope_head_dim = kLatentRope};
    return layer;
  }

  int64_t new_request() {
    const int64_t row = *table_.alloc();
    lengths_[row] = 0;
    return row;
  }
  // A new request whose first `count` tokens are request `from`'s (a prefix-cache hit).
  int64_t share_prefix(int64_t from, int64_t count) {
    const int64_t row = new_request();
    std::copy(table_.row(from), table_.row(from) + count, table_.row(row));
    lengths_[row] = count;
    return row;
  }

  // An extend of `extend[i]` new tokens for requests `rows[i]` after what they hold.
  ap::ForwardBatch extend_batch(const std::vector<int64_t>& rows,
                                const std::vector<int64_t>& extend) {
    ap::ForwardBatch batch;
    batch.mode = ap::ForwardMode::Extend;
    std::vector<int64_t> last;
    for (size_t i = 0; i < rows.size(); ++i) {
      const int64_t prefix = lengths_[rows[i]];
      batch.req_pool_indices.push_back(rows[i]);
      batch.extend_prefix_lens.push_back(prefix);
      batch.extend_seq_lens.push_back(extend[i]);
      batch.seq_lens.push_back(prefix + extend[i]);
      last.push_back(prefix > 0 ? table_.row(rows[i])[prefix - 1] : -1);
    }
    check(allocator_.alloc_extend(batch.extend_prefix_lens, batch.seq_lens, last,
                                  batch.out_cache_loc),
          "test pool too small");
    return finish(batch);
  }

  ap::ForwardBatch decode_batch(const std::vector<int64_t>& rows) {
    ap::ForwardBatch batch;
    batch.mode = ap::ForwardMode::Decode;
    std::vector<int64_t> last;
    for (int64_t row : rows) {
      batch.req_pool_indices.push_back(row);
      batch.seq_lens.push_back(lengths_[row] + 1);
      last.push_back(table_.row(row)[lengths_[row] - 1]);
    }
    check(allocator_.alloc_decode(batch.seq_lens, last, batch.out_cache_loc),
          "test pool too small");
    return finish(batch);
  }

  // Both sides run every layer on fresh random inputs; returns the worst relative error.
  double run(const ap::ForwardBatch& batch, std::vector<std::vector<double>>* gpu_out = nullptr) {
    cpu_->init_forward_metadata(batch);
    gpu_->init_forward_metadata(batch);
    double worst = 0;
    const int64_t n = batch.num_tokens;
    for (int64_t l = 0; l < kLayers; ++l) {
      const Values q = random_values({n, case_.query_rows(), case_.d}, rng_, 1.0f);
      const Values k = random_values({n, case_.hkv, case_.d}, rng_, 1.0f);
      const Values v =
          case_.latent ? latent_values(k) : random_values({n, case_.hkv, case_.d}, rng_, 1.0f);
      const Tensor expected = cpu_->forward(q.host, k.host, v.host, layer(l), batch);
      cuda::DeviceBuffer qd = upload(q.bits), kd = upload(k.bits), vd = upload(v.bits),
                         out(size_t(n * case_.hq * case_.value_dim()) * 2);
      cp::DeviceAttentionIo io;
      io.q = qd.data(), io.k = kd.data(), io.v = vd.data(), io.out = out.data();
      gpu_->forward(io, layer(l), batch);
      const std::vector<double> actual = download_bf16(out, expected.numel());
      worst =
          std::max(worst, finite(actual) ? relative_error(actual, as_doubles(expected)) : INFINITY);
      if (gpu_out) gpu_out->push_back(actual);
    }
    return worst;
  }

  cp::PagedBackendCuda& gpu() { return *gpu_; }
  ap::PagedAttentionBackend& cpu() { return *cpu_; }
  std::mt19937& rng() { return rng_; }

 private:
  ap::ForwardBatch finish(ap::ForwardBatch& batch) {
    batch.finish_metadata();
    batch.req_to_token = &table_;
    batch.kv_pool = &cpu_pool_;
    size_t at = 0;
    for (int64_t r = 0; r < batch.batch_size(); ++r) {
      const int64_t row = batch.req_pool_indices[size_t(r)];
      for (int64_t j = batch.extend_prefix_lens[size_t(r)]; j < batch.seq_lens[size_t(r)]; ++j)
        table_.row(row)[j] = batch.out_cache_loc[at++];
      lengths_[row] = batch.seq_lens[size_t(r)];
    }
    return batch;
  }

  Case case_;
  ap::ReqToTokenPool table_;
  ap::PageAllocator allocator_;
  ap::KVPool cpu_pool_;
  cp::DeviceKVPool gpu_pool_;
  std::unique_ptr<ap::PagedAttentionBackend> cpu_;
  std::unique_ptr<cp::PagedBackendCuda> gpu_;
  std::mt19937 rng_;
  std::map<int64_t, int64_t> lengths_;
};

void decoder_case(const Case& c) {
  DecoderScenario s(c);
  const int64_t a = s.new_request(), b = s.new_request(), r2 = s.new_request();
  double worst = s.run(s.extend_batch({a, b, r2}, {37, 5, 130}));
  // Continue a (its own partial last page), prefix hit on r2's first pages, b grows by one.
  const int64_t shared = c.page_size == 1 ? 100 : 96 / c.page_size * c.page_size;
  const int64_t hit = s.share_prefix(r2, shared);
  worst = std::max(worst, s.run(s.extend_batch({a, hit, b}, {20, 9, 1})));
  for (int step = 0; step < 3; ++step)
    worst = std::max(worst, s.run(s.decode_batch({a, b, r2, hit})));
  expect(worst < 1e-2, fmt::format("{}: extend, prefix hits and decode vs CPU {}: worst "
                                   "relative error {:.2e} < 1e-2",
                                   c.label(),
                                   c.dual_chunk ? "dual_chunk_flash_attn"
                                   : c.latent   ? "flashinfer_mla"
                                                : "torch_native",
                                   worst));
}

// Encoder-only: packed prompts, no pool, T5-style bias (scale 1), padding, optional window.
void encoder_case(const std::string& backend, int64_t d, bool force_rows, int64_t window,
                  bool fp32 = false) {
  const std::vector<int64_t> lengths = {1, 63, 64, 65, 200}, valid = {1, 50, 64, 65, 130};
  const int64_t heads = 4, max_len = 200;
  std::mt19937 rng(uint32_t(d + window + 7));
  ap::ForwardBatch batch = ap::ForwardBatch::encoder_only(lengths, valid);
  const int64_t n = batch.num_tokens;
  const Values table = random_values({heads, 2 * max_len - 1}, rng, 1.0f);
  const ap::RelativePositionBias cpu_bias(table.host, max_len);
  ap::PagedLayer layer;
  layer.num_q_heads = layer.num_kv_heads = heads;
  layer.head_dim = d;
  layer.scaling = 1.0f;
  layer.type = ap::AttentionType::EncoderOnly;
  layer.sliding_window_size = window;
  const Values q = random_values({n, heads, d}, rng, 0.3f),
               k = random_values({n, heads, d}, rng, 0.3f),
               v = random_values({n, heads, d}, rng, 1.0f);
  auto cpu = ap::make_paged_backend("torch_native");
  cpu->init_forward_metadata(batch);
  ap::PagedLayer cpu_layer = layer;
  cpu_layer.bias = &cpu_bias;
  const Tensor expected = cpu->forward(q.host, k.host, v.host, cpu_layer, batch, false);

  cp::PagedBackendCudaOptions options;
  options.force_row_kernel = force_rows;
  auto gpu = cp::make_paged_backend_cuda(backend, nullptr, options);
  gpu->init_forward_metadata(batch);
  // q, k, v interleaved per token as a fused QKV product lays them out (bf16, or float32).
  const size_t row = size_t(heads * d), element = fp32 ? 4 : 2;
  std::vector<std::byte> fused(size_t(n) * 3 * row * element);
  for (int64_t t = 0; t < n; ++t)
    for (int part = 0; part < 3; ++part) {
      const Values& source = part == 0 ? q : part == 1 ? k : v;
      const void* from = fp32 ? static_cast<const void*>(source.host.data<float>() + t * row)
                              : static_cast<const void*>(source.bits.data() + t * row);
      std::memcpy(fused.data() + (size_t(t) * 3 + size_t(part)) * row * element, from,
                  row * element);
    }
  cuda::DeviceBuffer qkv(fused.size()), out(size_t(n) * row * element);
  qkv.upload(fused.data(), fused.size());
  cuda::DeviceBuffer bias(table.host.nbytes());
  bias.upload(table.host.raw(), table.host.nbytes());
  cp::DeviceAttentionIo io;
  const auto* base = static_cast<const std::byte*>(qkv.data());
  io.q = base, io.k = base + row * element, io.v = base + 2 * row * element, io.out = out.data();
  io.q_stride = io.k_stride = io.v_stride = int64_t(3 * row);
  io.bias = {bias.as<float>(), max_len};
  io.fp32 = fp32;
  gpu->forward(io, layer, batch, false);
  std::vector<double> actual;
  if (fp32) {
    std::vector<float> values(size_t(expected.numel()));
    MMGEN_CUDA_CHECK(cudaDeviceSynchronize());
    out.download(values.data(), values.size() * 4);
    actual.assign(values.begin(), values.end());
  } else {
    actual = download_bf16(out, expected.numel());
  }
  const double error = finite(actual) ? relative_error(actual, as_doubles(expected)) : INFINITY;
  const double bound = fp32 ? 1e-5 : 1e-2;
  expect(error < bound,
         fmt::format("{} encoder-only D={}{}{}{}: T5 bias, padding, fused QKV strides vs CPU: "
                     "relative error {:.2e} < {:.0e}",
                     backend, d, force_rows ? " row kernel" : "",
                     window >= 0 ? fmt::format(" window={}", window) : "", fp32 ? " float32" : "",
                     error, bound));
}

// Decode through captured graphs: replay gives the bits eager decode gives, for a full bucket
// and a padded one, and both agree with the CPU.
void graph_case(const std::string& backend, int64_t page_size, int64_t d) {
  Case c;
  c.backend = backend;
  c.dual_chunk = backend == "dual_chunk_flash_attn";
  c.latent =
      mmgen::attention::find_backend(mmgen::attention::Family::Paged, backend)->model_attention ==
      mmgen::attention::ModelAttention::LatentMla;
  c.page_size = page_size;
  c.d = d;
  c.hq = 8;
  c.hkv = c.latent ? 1 : 2;
  DecoderScenario s(c);
  std::vector<int64_t> rows;
  for (int i = 0; i < 4; ++i) rows.push_back(s.new_request());
  s.run(s.extend_batch(rows, {300, 17, 64, 1}));  // 300 keys: split-KV decode

  const int64_t max_bs = 4, q_row = c.query_rows() * d, out_row = c.hq * c.value_dim(),
                kv_row = c.hkv * d, v_row = c.hkv * c.value_dim();
  std::vector<cuda::DeviceBuffer> q, k, v, out;
  for (int64_t l = 0; l < kLayers; ++l) {
    q.emplace_back(size_t(max_bs * q_row) * 2);
    k.emplace_back(size_t(max_bs * kv_row) * 2);
    v.emplace_back(size_t(max_bs * v_row) * 2);
    out.emplace_back(size_t(max_bs * out_row) * 2);
  }
  auto step = [&](int64_t, const ap::ForwardBatch& batch) {
    for (int64_t l = 0; l < kLayers; ++l) {
      cp::DeviceAttentionIo io;
      io.q = q[size_t(l)].data(), io.k = k[size_t(l)].data(), io.v = v[size_t(l)].data();
      io.out = out[size_t(l)].data();
      s.gpu().forward_decode(io, s.layer(l), batch);
    }
  };
  cp::DecodeGraphRunner runner(s.gpu(), max_bs, step);
  bool first_subset = true;
  for (const std::vector<int64_t>& subset :
       {rows, std::vector<int64_t>{rows[0], rows[1], rows[3]}}) {
    // Between the replays, a longer eager extend than any before (another request): a design
    // that grows an eager buffer must not pull it from under the captured graph.
    if (!first_subset) s.run(s.extend_batch({s.new_request()}, {600}));
    first_subset = false;
    const ap::ForwardBatch batch = s.decode_batch(subset);
    const int64_t n = batch.num_tokens;
    std::vector<Values> inputs;
    std::vector<Tensor> expected;
    s.cpu().init_forward_metadata(batch);
    for (int64_t l = 0; l < kLayers; ++l) {
      inputs.push_back(random_values({n, c.query_rows(), d}, s.rng(), 1.0f));
      inputs.push_back(random_values({n, c.hkv, d}, s.rng(), 1.0f));
      inputs.push_back(c.latent ? latent_values(inputs.back())
                                : random_values({n, c.hkv, d}, s.rng(), 1.0f));
      expected.push_back(s.cpu().forward(inputs[size_t(3 * l)].host, inputs[size_t(3 * l + 1)].host,
                                         inputs[size_t(3 * l + 2)].host, s.layer(l), batch));
      q[size_t(l)].upload(inputs[size_t(3 * l)].bits.data(), size_t(n * q_row) * 2);
      k[size_t(l)].upload(inputs[size_t(3 * l + 1)].bits.data(), size_t(n * kv_row) * 2);
      v[size_t(l)].upload(inputs[size_t(3 * l + 2)].bits.data(), size_t(n * v_row) * 2);
    }
    // Eager (the same kernels, metadata sized to the batch), then the graph of the bucket.
    s.gpu().init_forward_metadata(batch);
    step(n, batch);
    std::vector<std::vector<double>> eager, replayed;
    for (int64_t l = 0; l < kLayers; ++l)
      eager.push_back(download_bf16(out[size_t(l)], n * out_row));
    for (auto& buffer : out) MMGEN_CUDA_CHECK(cudaMemset(buffer.data(), 0xff, buffer.size()));
    const int64_t bucket = runner.replay(batch);
    MMGEN_CUDA_CHECK(cudaStreamSynchronize(runner.stream()));
    double worst = 0;
    bool same = true;
    for (int64_t l = 0; l < kLayers; ++l) {
      replayed.push_back(download_bf16(out[size_t(l)], n * out_row));
      same = same && replayed.back() == eager[size_t(l)];
      worst = std::max(worst, finite(replayed.back())
                                  ? relative_error(replayed.back(), as_doubles(expected[size_t(l)]))
                                  : INFINITY);
    }
    expect(same && worst < 1e-2,
           fmt::format("{} P={} D={}: CUDA-graph decode of {} requests (bucket {}) replays the "
                       "eager bits ({}), relative error vs CPU {:.2e} < 1e-2",
                       backend, page_size, d, n, bucket, same ? "same" : "DIFFERENT", worst));
  }
}

// What the catalogue and the selector say about this build on this GPU: fa3 first for text
// encoders, flashinfer too, at the head sizes the kernels take; CPU-only designs refused.
void catalogue_case() {
  namespace at = mmgen::attention;
  const at::Machine& gpu = at::machine_for_device("cuda");
  const std::string chosen = at::auto_backend(gpu, at::Family::Paged, "bf16", 64);
  expect(chosen == "fa3", "the text encoders' auto choice on this GPU is fa3: " + chosen);
  bool all = true;
  for (const std::string& name : plain_backends())
    for (int head : {8, 64, 128, 256})
      all = all && at::kernel_availability(gpu, at::Family::Paged, name, "bf16", head).ok;
  for (const char* name : {"flashinfer_mla", "flashmla"})
    all = all && at::kernel_availability(gpu, at::Family::Paged, name, "bf16", 576).ok &&
          !at::kernel_availability(gpu, at::Family::Paged, name, "bf16", 128).ok;
  expect(all,
         "fa3, flashinfer, triton, torch_native, flex_attention and dual_chunk_flash_attn run on "
         "this GPU at head sizes 8, 64, 128 and 256; flashinfer_mla and flashmla at MLA's 576 "
         "only");
  const at::Availability odd = at::kernel_availability(gpu, at::Family::Paged, "fa3", "bf16", 12);
  const at::Availability amx =
      at::kernel_availability(gpu, at::Family::Paged, "intel_amx", "bf16", 64);
  expect(!odd.ok && !amx.ok, "head size 12 and a CPU-only design are refused on the GPU: " +
                                 odd.reason + "; " + amx.reason);
}

ap::PagedLayer mla_layer() {
  ap::PagedLayer layer;
  layer.num_q_heads = 4;
  layer.num_kv_heads = 1;
  layer.head_dim = kLatentRank + kLatentRope;
  layer.latent = {.kv_lora_rank = kLatentRank, .qk_rope_head_dim = kLatentRope};
  return layer;
}

void error_cases() {
  const std::string unknown =
      error_message([] { cp::make_paged_backend_cuda("trtllm_mha", nullptr); });
  expect(
      unknown.find("no CUDA implementation") != std::string::npos &&
          unknown.find("fa3, flashinfer, triton") != std::string::npos,
      "a paged backend without a CUDA kernel is refused, naming those that have one: " + unknown);
  auto gpu = cp::make_paged_backend_cuda("fa3", nullptr);
  ap::ForwardBatch batch = ap::ForwardBatch::encoder_only({4});
  gpu->init_forward_metadata(batch);
  ap::PagedLayer layer;
  layer.num_q_heads = layer.num_kv_heads = 1;
  layer.head_dim = 12;
  layer.type = ap::AttentionType::EncoderOnly;
  cuda::DeviceBuffer buffer(1024);
  cp::DeviceAttentionIo io;
  io.q = io.k = io.v = io.out = buffer.data();
  const std::string head = error_message([&] { gpu->forward(io, layer, batch, false); });
  expect(head.find("head size 12 is not compiled") != std::string::npos,
         "an unsupported head size is refused: " + head);
  layer.head_dim = 64;
  layer.type = ap::AttentionType::Decoder;
  const std::string pool = error_message([&] { gpu->forward(io, layer, batch, true); });
  expect(pool.find("needs the batch's request table") != std::string::npos ||
             pool.find("needs a KV pool") != std::string::npos,
         "a decoder layer without a pool or request table is refused: " + pool);
  ap::PagedLayer dual = layer;
  dual.dual_chunk = kDualChunk;
  const std::string plain = error_message([&] { gpu->forward(io, dual, batch, true); });
  expect(plain.find("which only dual_chunk_flash_attn runs") != std::string::npos,
         "a plain design refuses a dual chunk layer: " + plain);
  auto dca = cp::make_paged_backend_cuda("dual_chunk_flash_attn", nullptr);
  dca->init_forward_metadata(batch);
  const std::string only = error_message([&] { dca->forward(io, layer, batch, true); });
  expect(only.find("runs only models with dual chunk attention") != std::string::npos,
         "dual_chunk_flash_attn refuses a plain layer: " + only);
  const std::string plain_mla = error_message([&] { gpu->forward(io, mla_layer(), batch, true); });
  expect(plain_mla.find("which only flashinfer_mla and flashmla run") != std::string::npos,
         "a plain design refuses an MLA layer: " + plain_mla);
  DecoderScenario pages16({.backend = "flashmla",
                           .page_size = 16,
                           .hkv = 1,
                           .d = kLatentRank + kLatentRope,
                           .latent = true});
  const int64_t row = pages16.new_request();
  const std::string page = error_message([&] { pages16.run(pages16.extend_batch({row}, {10})); });
  expect(page.find("FlashMLA reads pages of 64 tokens, this pool's hold 16") != std::string::npos,
         "flashmla refuses pages of 16 tokens: " + page);
}

}  // namespace

int main() try {
  for (const std::string& backend : plain_backends())
    for (int64_t page : {1, 16}) {
      decoder_case({.backend = backend, .page_size = page, .hq = 4, .hkv = 2, .d = 64});
      decoder_case({.backend = backend, .page_size = page, .hq = 4, .hkv = 4, .d = 128});
      decoder_case({.backend = backend, .page_size = page, .hq = 2, .hkv = 1, .d = 32});
      decoder_case(
          {.backend = backend, .page_size = page, .hq = 4, .hkv = 2, .d = 64, .force_rows = true});
      decoder_case(
          {.backend = backend, .page_size = page, .hq = 4, .hkv = 2, .d = 64, .window = 40});
    }
  for (int64_t page : {1, 16})
    decoder_case({.backend = "flashinfer", .page_size = page, .d = 64, .ragged = false});
  for (int64_t page : {1, 16}) {
    const Case dual{.backend = "dual_chunk_flash_attn", .page_size = page, .dual_chunk = true};
    decoder_case(dual);
    decoder_case({.backend = "dual_chunk_flash_attn",
                  .page_size = page,
                  .hq = 4,
                  .hkv = 4,
                  .d = 128,
                  .dual_chunk = true});
    decoder_case({.backend = "dual_chunk_flash_attn",
                  .page_size = page,
                  .force_rows = true,
                  .dual_chunk = true});
  }
  for (const auto& [backend, page] : {std::pair<std::string, int64_t>{"flashinfer_mla", 1},
                                      {"flashinfer_mla", 16},
                                      {"flashmla", 64}})
    for (int64_t hq : {4, 16})
      decoder_case({.backend = backend,
                    .page_size = page,
                    .hq = hq,
                    .hkv = 1,
                    .d = kLatentRank + kLatentRope,
                    .latent = true});
  for (const std::string& backend : plain_backends()) {
    encoder_case(backend, 64, false, -1);
    encoder_case(backend, 64, true, -1);
    encoder_case(backend, 8, false, -1);  // wan-tiny's head size: the row kernel
    encoder_case(backend, 64, false, 20);
    encoder_case(backend, 8, false, -1, true);  // the exact mode
    encoder_case(backend, 64, false, 20, true);
  }
  for (const std::string& backend : plain_backends())
    for (int64_t page : {1, 16}) graph_case(backend, page, 128);
  graph_case("dual_chunk_flash_attn", 16, 128);
  graph_case("flashinfer_mla", 16, kLatentRank + kLatentRope);
  graph_case("flashmla", 64, kLatentRank + kLatentRope);
  graph_case("fa3", 16, 64);
  catalogue_case();
  error_cases();
  return finish("paged_attention_cuda_test");
} catch (const std::exception& error) {
  std::printf("paged_attention_cuda_test: error: %s\n", error.what());
  return 1;
}
