// The GPU paged text-encoder backends on the GPU machine:
//  1. extend over a ragged batch, one layer's attention, every GPU paged backend, median of
//     repeats (CUDA events):
//     causal (Qwen3-8B-like: 32 query heads, 8 KV heads, head size 128; K/V through a page-16
//     pool for fa3, packed for flashinfer's ragged pass) and encoder-only with the T5 bias
//     (UMT5-XXL-like: 64 heads of 64); TFLOP/s on the useful (unpadded, causal-halved) work;
//  2. decode, per-token latency of a Qwen3-0.6B-like stack's attention (28 layers, 16 query heads,
//     8 KV heads, 128): eager (metadata built and uploaded every step, 28 layer calls) vs
//     CUDA-graph replay (replay hook + one graph launch), batch 1, 8 and 32 at ~1000 tokens;
//  3. a UMT5-XXL-sized encoder (24 layers, d_model 4096, 64 heads x 64, d_ff 10240, random bf16
//     weights): two 512-token prompts (Wan's prompt and negative prompt) and 8 ragged prompts.
//  4. dual_chunk_flash_attn against fa3's plain causal attention on the same prompts, and the
//     MLA designs' decode at DeepSeek-V3's sizes (128 heads, latent 512 + rope 64).
// `--json FILE` writes the extend, dual chunk and MLA cases for bench/cuda/torch_paged_reference.py
// (torch SDPA on the same shapes, same run).
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "attention/catalogue.h"
#include "attention/paged/cuda/paged_backend_cuda.h"
#include "attention/paged/cuda/paged_graph_runner.h"
#include "attention/paged/kv_memory.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/t5_ops.h"
#include "event_timing.h"
#include "models/text_encoders/umt5_encoder.h"

using namespace mmgen;
namespace ap = mmgen::attention::paged;
namespace cp = mmgen::cuda::paged;

namespace {

cuda::DeviceBuffer random_bf16(int64_t count, uint64_t seed, float scale = 1.0f) {
  cuda::DeviceBuffer buffer(size_t(count) * 2);
  cuda::fill_uniform_bf16(buffer.data(), count, seed, scale);
  return buffer;
}

// Pool slots for requests of these lengths, page by page (as alloc_extend hands them out).
struct PagedRequests {
  ap::ReqToTokenPool table;
  ap::PageAllocator allocator;
  ap::ForwardBatch batch;
  PagedRequests(const std::vector<int64_t>& lengths, int64_t page, int64_t max_context)
      : table(int64_t(lengths.size()) + 1, max_context), allocator(1 << 20, page) {
    batch.mode = ap::ForwardMode::Extend;
    batch.seq_lens = batch.extend_seq_lens = lengths;
    batch.extend_prefix_lens.assign(lengths.size(), 0);
    std::vector<int64_t> last(lengths.size(), -1);
    for (size_t i = 0; i < lengths.size(); ++i) batch.req_pool_indices.push_back(*table.alloc());
    allocator.alloc_extend(batch.extend_prefix_lens, batch.seq_lens, last, batch.out_cache_loc);
    batch.finish_metadata();
    batch.req_to_token = &table;
    size_t at = 0;
    for (size_t i = 0; i < lengths.size(); ++i)
      for (int64_t j = 0; j < lengths[i]; ++j)
        table.row(batch.req_pool_indices[i])[j] = batch.out_cache_loc[at++];
  }
  // Decode one token per request: a slot after each prompt.
  ap::ForwardBatch decode_step() {
    ap::ForwardBatch step;
    step.mode = ap::ForwardMode::Decode;
    step.req_pool_indices = batch.req_pool_indices;
    std::vector<int64_t> last;
    for (int64_t i = 0; i < batch.batch_size(); ++i) {
      const int64_t length = batch.seq_lens[size_t(i)];
      step.seq_lens.push_back(length + 1);
      last.push_back(table.row(step.req_pool_indices[size_t(i)])[length - 1]);
    }
    allocator.alloc_decode(step.seq_lens, last, step.out_cache_loc);
    step.finish_metadata();
    step.req_to_token = &table;
    for (int64_t i = 0; i < batch.batch_size(); ++i)
      table.row(step.req_pool_indices[size_t(i)])[batch.seq_lens[size_t(i)]] =
          step.out_cache_loc[size_t(i)];
    return step;
  }
};

nlohmann::json extend_case(const std::string& name, const std::vector<int64_t>& lengths, int64_t hq,
                           int64_t hkv, int64_t d, bool causal, int repeats) {
  const int64_t tokens = std::accumulate(lengths.begin(), lengths.end(), int64_t(0));
  double pairs = 0;
  for (int64_t n : lengths) pairs += causal ? double(n) * double(n + 1) / 2 : double(n) * n;
  const double flops = 4.0 * double(d) * double(hq) * pairs;
  PagedRequests requests(lengths, 16, 4096);
  cp::DeviceKVPool pool(1 << 16, 16, 1, hkv, d);
  cuda::DeviceBuffer q = random_bf16(tokens * hq * d, 1), k = random_bf16(tokens * hkv * d, 2),
                     v = random_bf16(tokens * hkv * d, 3), out(size_t(tokens * hq * d) * 2);
  const int64_t max_len = *std::max_element(lengths.begin(), lengths.end());
  std::vector<float> bias_host(size_t(hq * (2 * max_len - 1)));
  for (size_t i = 0; i < bias_host.size(); ++i) bias_host[i] = float(int64_t(i % 31) - 15) / 8;
  cuda::DeviceBuffer bias(bias_host.size() * 4);
  bias.upload(bias_host.data(), bias_host.size() * 4);
  ap::PagedLayer layer;
  layer.num_q_heads = hq;
  layer.num_kv_heads = hkv;
  layer.head_dim = d;
  layer.scaling = causal ? float(1.0 / std::sqrt(double(d))) : 1.0f;
  layer.type = causal ? ap::AttentionType::Decoder : ap::AttentionType::EncoderOnly;
  ap::ForwardBatch batch = causal ? requests.batch : ap::ForwardBatch::encoder_only(lengths);
  cp::DeviceAttentionIo io;
  io.q = q.data(), io.k = k.data(), io.v = v.data(), io.out = out.data();
  if (!causal) io.bias = {bias.as<float>(), max_len};
  nlohmann::json result = {
      {"name", name},    {"lengths", lengths}, {"q_heads", hq},
      {"kv_heads", hkv}, {"head_dim", d},      {"causal", causal},
      {"bias", !causal}, {"flops", flops},     {"mmgen", nlohmann::json::object()}};
  std::printf("%s: %zu requests, %ld tokens (longest %ld), %ld/%ld heads x %ld%s\n", name.c_str(),
              lengths.size(), long(tokens), long(max_len), long(hq), long(hkv), long(d),
              causal ? ", causal" : ", encoder-only + T5 bias");
  for (const std::string_view name : mmgen::attention::paged_backends_for(
           cp::cuda_paged_backends(), mmgen::attention::ModelAttention::Plain)) {
    const std::string backend(name);
    auto gpu = cp::make_paged_backend_cuda(backend, &pool);
    gpu->init_forward_metadata(batch);
    // The layer call alone (metadata is per forward, shared by every layer).
    const double ms =
        bench::median_event_ms([&] { gpu->forward(io, layer, batch, causal); }, repeats);
    const double tflops = flops / (ms * 1e-3) / 1e12;
    std::printf("  %-11s %8.3f ms  %6.1f TFLOP/s\n", backend.c_str(), ms, tflops);
    result["mmgen"][backend] = {{"ms", ms}, {"tflops", tflops}};
  }
  return result;
}

// Dual chunk attention against plain causal attention on the same keys: Qwen3-8B-like heads,
// prompts several chunks long (chunk_size 2048, local_size 256: chunks of 1792). The same causal
// pairs as the plain case, so the FLOP count is the same; torch has no dual chunk attention, so
// its yardstick (torch_paged_reference.py) is plain causal SDPA on the same shapes.
nlohmann::json dual_chunk_case(int repeats) {
  const std::vector<int64_t> lengths = {8192, 3000};
  const int64_t hq = 32, hkv = 8, d = 128;
  const int64_t tokens = std::accumulate(lengths.begin(), lengths.end(), int64_t(0));
  double pairs = 0;
  for (int64_t n : lengths) pairs += double(n) * double(n + 1) / 2;
  const double flops = 4.0 * double(d) * double(hq) * pairs;
  PagedRequests requests(lengths, 16, 8192);
  cp::DeviceKVPool pool(1 << 16, 16, 1, hkv, d);
  cuda::DeviceBuffer q = random_bf16(3 * tokens * hq * d, 1), k = random_bf16(tokens * hkv * d, 2),
                     v = random_bf16(tokens * hkv * d, 3), out(size_t(tokens * hq * d) * 2);
  ap::PagedLayer layer;
  layer.num_q_heads = hq;
  layer.num_kv_heads = hkv;
  layer.head_dim = d;
  layer.scaling = float(1.0 / std::sqrt(double(d)));
  cp::DeviceAttentionIo io;
  io.q = q.data(), io.k = k.data(), io.v = v.data(), io.out = out.data();
  nlohmann::json result = {{"name", "dual chunk vs causal (Qwen3-8B-like, chunks of 1792)"},
                           {"lengths", lengths},
                           {"q_heads", hq},
                           {"kv_heads", hkv},
                           {"head_dim", d},
                           {"causal", true},
                           {"bias", false},
                           {"flops", flops},
                           {"mmgen", nlohmann::json::object()}};
  std::printf("dual chunk attention: %zu requests, %ld tokens, %ld/%ld heads x %ld, chunks of %d\n",
              lengths.size(), long(tokens), long(hq), long(hkv), long(d), 2048 - 256);
  for (const std::string backend : {"fa3", "dual_chunk_flash_attn"}) {
    ap::PagedLayer run = layer;
    if (backend == "dual_chunk_flash_attn")
      run.dual_chunk = {.chunk_size = 2048, .local_size = 256};
    auto gpu = cp::make_paged_backend_cuda(backend, &pool);
    gpu->init_forward_metadata(requests.batch);
    const double ms =
        bench::median_event_ms([&] { gpu->forward(io, run, requests.batch, true); }, repeats);
    std::printf("  %-22s %8.3f ms  %6.1f TFLOP/s\n", backend.c_str(), ms,
                flops / (ms * 1e-3) / 1e12);
    result["mmgen"][backend] = {{"ms", ms}, {"tflops", flops / (ms * 1e-3) / 1e12}};
  }
  return result;
}

// Absorbed MLA decode at DeepSeek-V3's sizes (128 query heads, latent 512 + rope 64), one layer,
// `batch_size` requests of ~`context` tokens: the latent rows each step streams, as GB/s.
nlohmann::json mla_decode_case(int64_t batch_size, int64_t context, int repeats) {
  const int64_t hq = 128, d = 576, dv = 512;
  std::vector<int64_t> lengths(size_t(batch_size), context);
  PagedRequests requests(lengths, 64, context + 64);
  cp::DeviceKVPool pool(batch_size * (context + 64) + 256, 64, 1, 1, d, /*keys_only=*/true);
  ap::PagedLayer layer;
  layer.num_q_heads = hq;
  layer.num_kv_heads = 1;
  layer.head_dim = d;
  layer.scaling = float(1.0 / std::sqrt(192.0));  // DeepSeek: 1/√(qk_nope + qk_rope)
  layer.latent = {.kv_lora_rank = dv, .qk_rope_head_dim = d - dv};
  const ap::ForwardBatch step = requests.decode_step();
  const double bytes = double(batch_size) * double(context + 1) * double(d) * 2;
  const double flops = 2.0 * double(batch_size) * double(hq) * double(context + 1) * double(d + dv);
  cuda::DeviceBuffer q = random_bf16(batch_size * hq * d, 6), k = random_bf16(batch_size * d, 7),
                     out(size_t(batch_size * hq * dv) * 2);
  cp::DeviceAttentionIo io;
  io.q = q.data(), io.k = k.data(), io.v = k.data(), io.out = out.data();
  io.v_stride = d;
  nlohmann::json result = {
      {"name", fmt::format("MLA decode (DeepSeek-V3-like), batch {}", batch_size)},
      {"latent", true},
      {"batch", batch_size},
      {"context", context + 1},
      {"q_heads", hq},
      {"head_dim", d},
      {"v_dim", dv},
      {"flops", flops},
      {"bytes", bytes},
      {"mmgen", nlohmann::json::object()}};
  std::printf("MLA decode: batch %ld x %ld tokens, %ld heads, latent %ld + rope %ld\n",
              long(batch_size), long(context + 1), long(hq), long(dv), long(d - dv));
  for (const std::string backend : {"flashinfer_mla", "flashmla"}) {
    auto gpu = cp::make_paged_backend_cuda(backend, &pool);
    {  // the prompts' latent rows: a prefill of random rows
      const int64_t tokens = requests.batch.num_tokens;
      cuda::DeviceBuffer pq = random_bf16(tokens * hq * d, 9), pk = random_bf16(tokens * d, 10),
                         po(size_t(tokens * hq * dv) * 2);
      cp::DeviceAttentionIo prompt;
      prompt.q = pq.data(), prompt.k = pk.data(), prompt.v = pk.data(), prompt.out = po.data();
      prompt.v_stride = d;
      gpu->init_forward_metadata(requests.batch);
      gpu->forward(prompt, layer, requests.batch);
      MMGEN_CUDA_CHECK(cudaDeviceSynchronize());
    }
    gpu->init_forward_metadata(step);
    const double ms =
        bench::median_event_ms([&] { gpu->forward_decode(io, layer, step, false); }, repeats);
    std::printf("  %-15s %8.3f ms  %7.1f GB/s of latent rows  %6.1f TFLOP/s\n", backend.c_str(), ms,
                bytes / (ms * 1e-3) / 1e9, flops / (ms * 1e-3) / 1e12);
    result["mmgen"][backend] = {{"ms", ms}, {"gbps", bytes / (ms * 1e-3) / 1e9}};
  }
  return result;
}

void decode_case(int64_t batch_size, int64_t context, int repeats) {
  const int64_t layers = 28, hq = 16, hkv = 8, d = 128;
  std::vector<int64_t> lengths(size_t(batch_size), context);
  for (size_t i = 0; i < lengths.size(); ++i) lengths[i] = context - int64_t(i * 37 % 200);
  for (const std::string_view name : mmgen::attention::paged_backends_for(
           cp::cuda_paged_backends(), mmgen::attention::ModelAttention::Plain)) {
    const std::string backend(name);
    PagedRequests requests(lengths, 16, context + 64);
    cp::DeviceKVPool pool(batch_size * (context + 64) + 256, 16, layers, hkv, d);
    cp::PagedBackendCudaOptions options;
    options.max_context_len = context + 64;
    options.max_q_heads = hq;
    auto gpu = cp::make_paged_backend_cuda(backend, &pool, options);
    ap::PagedLayer layer;
    layer.num_q_heads = hq;
    layer.num_kv_heads = hkv;
    layer.head_dim = d;
    layer.scaling = float(1.0 / std::sqrt(double(d)));
    const ap::ForwardBatch step = requests.decode_step();
    cuda::DeviceBuffer q = random_bf16(batch_size * hq * d, 6),
                       k = random_bf16(batch_size * hkv * d, 7),
                       v = random_bf16(batch_size * hkv * d, 8),
                       out(size_t(batch_size * hq * d) * 2);
    cp::DeviceAttentionIo io;
    io.q = q.data(), io.k = k.data(), io.v = v.data(), io.out = out.data();
    {  // the prompts' K/V in every layer: a prefill of random rows
      const int64_t tokens = requests.batch.num_tokens;
      cuda::DeviceBuffer pq = random_bf16(tokens * hq * d, 9),
                         pk = random_bf16(tokens * hkv * d, 10),
                         pv = random_bf16(tokens * hkv * d, 11), po(size_t(tokens * hq * d) * 2);
      cp::DeviceAttentionIo prompt;
      prompt.q = pq.data(), prompt.k = pk.data(), prompt.v = pv.data(), prompt.out = po.data();
      gpu->init_forward_metadata(requests.batch);
      for (int64_t l = 0; l < layers; ++l) {
        layer.layer_id = l;
        gpu->forward(prompt, layer, requests.batch);
      }
      MMGEN_CUDA_CHECK(cudaDeviceSynchronize());
    }
    auto layers_step = [&](const ap::ForwardBatch& batch) {
      for (int64_t l = 0; l < layers; ++l) {
        layer.layer_id = l;
        gpu->forward_decode(io, layer, batch);
      }
    };
    cp::DecodeGraphRunner runner(
        *gpu, batch_size, [&](int64_t, const ap::ForwardBatch& batch) { layers_step(batch); },
        {batch_size});
    auto wall_us = [&](auto&& action) {
      action();
      MMGEN_CUDA_CHECK(cudaStreamSynchronize(runner.stream()));
      std::vector<double> us;
      for (int i = 0; i < repeats; ++i) {
        const auto start = std::chrono::steady_clock::now();
        action();
        MMGEN_CUDA_CHECK(cudaStreamSynchronize(runner.stream()));
        us.push_back(
            std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
                .count());
      }
      return bench::median(us);
    };
    const double eager = wall_us([&] {
      gpu->init_forward_metadata(step);
      layers_step(step);
    });
    const double graph = wall_us([&] { runner.replay(step); });
    std::printf(
        "  %-11s batch %3ld, ~%ld tokens: eager %7.1f us/token-step, graph replay %7.1f "
        "us (%.2fx)\n",
        backend.c_str(), long(batch_size), long(context), eager, graph, eager / graph);
  }
}

void encoder_case(int repeats) {
  text_encoders::T5Config config;
  config.d_model = 4096;
  config.d_kv = 64;
  config.num_heads = 64;
  config.d_ff = 10240;
  config.num_layers = 24;
  std::printf(
      "UMT5-XXL-sized encoder (24 layers, d_model 4096, 64 heads x 64, d_ff 10240, random "
      "bf16 weights)\n");
  for (const std::string backend : {"fa3", "flashinfer"}) {
    text_encoders::UMT5Encoder encoder =
        text_encoders::UMT5Encoder::random(config, 42, Device::CUDA);
    encoder.set_device(Device::CUDA, DType::BF16, backend);
    for (const auto& [label, lengths] : std::vector<std::pair<std::string, std::vector<int64_t>>>{
             {"2 x 512 (prompt + negative, padded)", {512, 512}},
             {"8 ragged prompts", {512, 120, 37, 300, 512, 80, 226, 400}}}) {
      const ap::ForwardBatch batch = ap::ForwardBatch::encoder_only(lengths);
      std::mt19937 rng(3);
      std::normal_distribution<float> normal(0.0f, 1.0f);
      Tensor embeddings = Tensor::empty({batch.num_tokens, config.d_model});
      for (int64_t i = 0; i < embeddings.numel(); ++i) embeddings.data<float>()[i] = normal(rng);
      encoder.encode_embeddings(embeddings.to(Device::CUDA), batch);  // warm-up: cuBLASLt plans
      std::vector<double> total, compute, enqueue;
      for (int i = 0; i < repeats; ++i) {
        // On the device: embeddings already there, the result left there (CUDA events); with the
        // host copies: from host embeddings to the result on the host.
        const Tensor on_device = embeddings.to(Device::CUDA);
        cudaEvent_t begin, end;
        cudaEventCreate(&begin);
        cudaEventCreate(&end);
        cudaEventRecord(begin);
        const auto enqueue_start = std::chrono::steady_clock::now();
        const Tensor result = encoder.encode_embeddings(on_device, batch);
        enqueue.push_back(
            std::chrono::duration<double>(std::chrono::steady_clock::now() - enqueue_start)
                .count());
        cudaEventRecord(end);
        cudaEventSynchronize(end);
        float ms = 0;
        cudaEventElapsedTime(&ms, begin, end);
        cudaEventDestroy(begin);
        cudaEventDestroy(end);
        compute.push_back(ms * 1e-3);
        const auto start = std::chrono::steady_clock::now();
        encoder.encode_embeddings(embeddings.to(Device::CUDA), batch).to(Device::CPU);
        total.push_back(
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      }
      // GEMM FLOPs of the stack (2 per multiply-add), for the device rate.
      const double d = double(config.d_model), inner = double(config.inner_dim()),
                   ff = double(config.d_ff), layer_flops = 2 * d * (4 * inner + 3 * ff);
      const double flops = double(batch.num_tokens) * layer_flops * double(config.num_layers);
      std::printf(
          "  %-11s %-38s %4ld tokens: %7.2f ms on the device (%.0f TFLOP/s in the "
          "products), %7.2f ms with the host copies; the host returns after %.2f ms\n",
          backend.c_str(), label.c_str(), long(batch.num_tokens), bench::median(compute) * 1e3,
          flops / bench::median(compute) / 1e12, bench::median(total) * 1e3,
          bench::median(enqueue) * 1e3);
    }
    std::printf("  weights on GPU: %.2f GiB\n",
                double(encoder.resident_weight_bytes()) / double(1 << 30));
  }
}

}  // namespace

int main(int argc, char** argv) try {
  std::string json_path;
  int repeats = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::string(argv[i]) == "--json") json_path = argv[i + 1];
    if (std::string(argv[i]) == "--repeats") repeats = std::stoi(argv[i + 1]);
  }
  nlohmann::json cases = nlohmann::json::array();
  std::printf("== paged extend (one layer's attention)\n");
  cases.push_back(extend_case("causal ragged (Qwen3-8B-like)",
                              {1024, 512, 300, 77, 1500, 64, 900, 256}, 32, 8, 128, true, repeats));
  cases.push_back(extend_case("encoder ragged + T5 bias (UMT5-XXL-like)",
                              {512, 120, 37, 300, 512, 80, 226, 400}, 64, 64, 64, false, repeats));
  std::printf("== dual chunk attention and MLA (the model-specific designs)\n");
  cases.push_back(dual_chunk_case(repeats));
  for (int64_t bs : {1, 32}) cases.push_back(mla_decode_case(bs, 4096, repeats));
  if (!json_path.empty()) std::ofstream(json_path) << cases.dump(2);
  std::printf("== paged decode, 28 layers of attention (Qwen3-0.6B-like: 16/8 heads x 128)\n");
  for (int64_t bs : {1, 8, 32}) decode_case(bs, 1000, repeats);
  std::printf("== text encoder\n");
  encoder_case(std::max(3, repeats / 4));
  return 0;
} catch (const std::exception& error) {
  std::printf("paged_attention_cuda_bench: error: %s\n", error.what());
  return 1;
}
