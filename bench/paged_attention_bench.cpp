// Text encoders on the paged CPU backends, whole layers: 64 prompts of mixed length (20–512
// tokens) encoded through
//  - one UMT5-XXL-sized layer (d_model 4096 = 64 heads × 64, gated-GELU FFN 10240; encoder-only,
//    relative position bias, no scaling) by the project's UMT5Encoder, and
//  - one Qwen3-4B-sized layer (hidden 2560, 32 query / 8 KV heads × 128, q/k RMSNorm, RoPE,
//    SwiGLU 9728; causal, GQA) by the project's Qwen3TextModel / Qwen3PagedEncoder (a 2-layer
//    model: hidden_states[-2] is the first layer's output),
// with random bf16 weights read from a safetensors file, as a checkpoint is. Every figure is a
// whole layer: RMSNorms, q/k/v/o projections, attention and FFN (weights converted to float32 as
// the layer uses them, as in a real run).
//
// Reports real (unpadded) tokens per second for each backend against a padded batch (every prompt
// padded to 512 tokens and run as a [64, 512] batch through the same layer code: UMT5Encoder::
// forward with an attention mask, attention by torch_native over each prompt's real keys while
// the padding rows still run as queries; Qwen3TextModel::forward_layers with the dense causal
// reference attention over all 512 positions), and the prefix cache's speedup per backend when
// every prompt starts with the same 30-token template (page size 1, so the whole template is
// hit: the first prompt runs alone and leaves it in the cache, the 63 others reuse its KV and
// hidden rows). Yardstick: Eigen's float32 GEMM at the layer's projection shape ([2048, d] ×
// [d, d]), timed in the same repeats. Every repeat runs all candidates back to back in a rotating
// order, so a slow spell of the shared machine hits them alike; each keeps its median, of the
// wall-clock time and of the process's CPU time (the work done, whoever else held the cores).
// A last table times the attention call alone, the only part in which the backends differ.
//
//   paged_attention_bench [--repeats N] [--prompts N] [--only umt5|qwen3|attention]
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "attention/kernels/dense_attention.h"
#include "attention/paged/backends.h"
#include "attention/paged/kv_memory.h"
#include "core/dtype.h"
#include "core/ops.h"
#include "core/safetensors.h"
#include "models/text_encoders/qwen3_paged.h"
#include "models/text_encoders/t5_config.h"
#include "models/text_encoders/umt5_encoder.h"

namespace {

using namespace mmgen;
using namespace mmgen::text_encoders;
using json = nlohmann::json;

const std::vector<std::string> kBackends = {"torch_native", "triton", "flashinfer", "fa3",
                                            "flex_attention"};
constexpr int64_t kMaxLen = 512;
constexpr int64_t kTemplate = 30;
constexpr int64_t kVocab = 1000;

float uniform_at(uint64_t seed, uint64_t index) {
  uint64_t z = seed * 0x9e3779b97f4a7c15ull + index + 1;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return float(double(z >> 40) / double(1ull << 23) - 1.0);
}

// Uniform in center ± spread, in `dtype`.
Tensor random_tensor(const Shape& shape, float center, float spread, uint64_t seed,
                     DType dtype = DType::BF16) {
  Tensor out = Tensor::empty(shape, dtype);
  const int64_t count = out.numel();
  if (dtype == DType::BF16) {
    uint16_t* p = out.data<uint16_t>();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < count; ++i)
      p[i] = f32_to_bf16(center + spread * uniform_at(seed, uint64_t(i)));
  } else {
    float* p = out.data<float>();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < count; ++i) p[i] = center + spread * uniform_at(seed, uint64_t(i));
  }
  return out;
}

// Adds random tensors to a checkpoint: linear weights scaled by 1/√fan_in, norms around 1.
struct Checkpoint {
  NamedTensors tensors;
  uint64_t seed = 1;
  void linear(const std::string& name, int64_t out, int64_t in) {
    tensors.emplace_back(
        name, random_tensor({out, in}, 0.0f, float(std::sqrt(3.0 / double(in))), seed++));
  }
  void norm(const std::string& name, int64_t width) {
    tensors.emplace_back(name, random_tensor({width}, 1.0f, 0.1f, seed++));
  }
  void add(const std::string& name, const Shape& shape, float spread) {
    tensors.emplace_back(name, random_tensor(shape, 0.0f, spread, seed++));
  }
};

// CPU time of the whole process (every thread): on a shared machine it counts the work done,
// not the time other jobs held the cores.
double cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

// One candidate of a table: its name, the timed work, untimed preparation, and its wall-clock
// and CPU times.
struct Candidate {
  std::string name;
  std::function<void()> run;
  std::function<void()> prepare = nullptr;
  std::vector<double> seconds = {}, cpu = {};
};

// Every repeat runs every candidate once, starting at a rotating place.
void run_interleaved(std::vector<Candidate>& candidates, int repeats, const char* what) {
  for (int r = 0; r < repeats; ++r)
    for (size_t c = 0; c < candidates.size(); ++c) {
      Candidate& candidate = candidates[(c + size_t(r)) % candidates.size()];
      if (candidate.prepare) candidate.prepare();
      const double cpu0 = cpu_seconds();
      const auto start = std::chrono::steady_clock::now();
      candidate.run();
      candidate.seconds.push_back(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      candidate.cpu.push_back(cpu_seconds() - cpu0);
      std::fprintf(stderr, "%s, repeat %d: %s %.2f s (CPU %.2f s)\n", what, r + 1,
                   candidate.name.c_str(), candidate.seconds.back(), candidate.cpu.back());
    }
}

// The GEMM yardstick: x [2048, d] · wᵀ, w [d, d], float32, as ops::linear runs the projections.
Candidate gemm_yardstick(int64_t d) {
  auto x = std::make_shared<Tensor>(random_tensor({2048, d}, 0.0f, 1.0f, 901, DType::F32));
  auto w = std::make_shared<Tensor>(random_tensor({d, d}, 0.0f, 0.02f, 902, DType::F32));
  return {"GEMM", [x, w] { ops::linear(*x, *w); }};
}

double gemm_flops(int64_t d) {
  return 2.0 * 2048.0 * double(d) * double(d);
}

struct Prompts {
  std::vector<std::vector<int64_t>> ids;  // every one starts with the same 30-token template
  int64_t tokens = 0;
};

// Lengths uniform in 20..512 (at least 31: the template and one token of its own).
Prompts make_prompts(int count) {
  std::mt19937 rng(2024);
  std::uniform_int_distribution<int64_t> length(20, kMaxLen), token(2, kVocab - 1);
  std::vector<int64_t> lengths;
  for (int i = 0; i < count; ++i) lengths.push_back(std::max<int64_t>(length(rng), kTemplate + 1));
  std::vector<int64_t> templ;
  for (int64_t i = 0; i < kTemplate; ++i) templ.push_back(token(rng));
  Prompts prompts;
  for (int64_t len : lengths) {
    std::vector<int64_t> p = templ;
    while (int64_t(p.size()) < len) p.push_back(token(rng));
    prompts.tokens += len;
    prompts.ids.push_back(std::move(p));
  }
  return prompts;
}

// The prompts right-padded to 512 with id 0: ids [B, 512] and the attention mask.
void padded_batch(const Prompts& prompts, Tensor& ids, Tensor& mask) {
  const int64_t batch = int64_t(prompts.ids.size());
  std::vector<int64_t> flat(size_t(batch * kMaxLen), 0), ones(size_t(batch * kMaxLen), 0);
  for (int64_t b = 0; b < batch; ++b)
    for (size_t j = 0; j < prompts.ids[size_t(b)].size(); ++j) {
      flat[size_t(b * kMaxLen) + j] = prompts.ids[size_t(b)][j];
      ones[size_t(b * kMaxLen) + j] = 1;
    }
  ids = Tensor::from_vector({batch, kMaxLen}, flat);
  mask = Tensor::from_vector({batch, kMaxLen}, ones);
}

// Σ over prompts of L² (attention work of a full bidirectional layer, per head and channel).
double sum_squares(const Prompts& prompts) {
  double total = 0;
  for (const auto& p : prompts.ids) total += double(p.size()) * double(p.size());
  return total;
}

void print_layer_table(const char* layer, std::vector<Candidate>& candidates, const Prompts& p,
                       double useful_flops, double yardstick_flops) {
  const double padded = median(candidates[0].seconds), padded_cpu = median(candidates[0].cpu);
  const double gemm = yardstick_flops / median(candidates.back().seconds) / 1e9;
  for (size_t c = 0; c + 1 < candidates.size(); ++c) {
    const double s = median(candidates[c].seconds), cpu = median(candidates[c].cpu);
    std::printf("| %s | %s | %.2f | %.2f | %.0f | %.2fx | %.2fx | %.1f | %.0f%% |\n", layer,
                candidates[c].name.c_str(), s, cpu, double(p.tokens) / s, padded / s,
                padded_cpu / cpu, useful_flops / s / 1e9, 100.0 * useful_flops / s / 1e9 / gemm);
  }
  std::printf("| %s | Eigen GEMM yardstick | | | | | | %.1f | 100%% |\n", layer, gemm);
  std::fflush(stdout);
}

// ------------------------------------------------------------------ UMT5-XXL-sized layer

void bench_umt5(const Prompts& prompts, const fs::path& dir, int repeats) {
  const int64_t d = 4096, heads = 64, d_kv = 64, ff = 10240;
  const json config_json = {{"model_type", "umt5"}, {"vocab_size", kVocab},
                            {"d_model", d},         {"d_kv", d_kv},
                            {"d_ff", ff},           {"num_heads", heads},
                            {"num_layers", 1},      {"feed_forward_proj", "gated-gelu"}};
  const fs::path file = dir / "umt5.safetensors";
  {
    Checkpoint ckpt;
    ckpt.add("shared.weight", {kVocab, d}, 1.0f);
    const std::string block = "encoder.block.0.layer.";
    ckpt.norm(block + "0.layer_norm.weight", d);
    for (const char* name : {"q", "k", "v"})
      ckpt.linear(block + "0.SelfAttention." + name + ".weight", heads * d_kv, d);
    ckpt.linear(block + "0.SelfAttention.o.weight", d, heads * d_kv);
    ckpt.add(block + "0.SelfAttention.relative_attention_bias.weight", {32, heads}, 1.0f);
    ckpt.norm(block + "1.layer_norm.weight", d);
    ckpt.linear(block + "1.DenseReluDense.wi_0.weight", ff, d);
    ckpt.linear(block + "1.DenseReluDense.wi_1.weight", ff, d);
    ckpt.linear(block + "1.DenseReluDense.wo.weight", d, ff);
    ckpt.norm("encoder.final_layer_norm.weight", d);
    write_safetensors(file, ckpt.tensors);
  }
  UMT5Encoder encoder(T5Config::from_json(config_json), WeightStore::open_file(file));
  Tensor ids, mask;
  padded_batch(prompts, ids, mask);

  std::vector<Candidate> candidates;
  candidates.push_back({"padded batch", [&] {
                          encoder.set_attention_backend("torch_native");
                          encoder.forward(ids, mask);
                        }});
  for (const std::string& name : kBackends)
    candidates.push_back({name, [&encoder, &prompts, name] {
                            encoder.set_attention_backend(name);
                            encoder.forward_unpadded(prompts.ids);
                          }});
  candidates.push_back(gemm_yardstick(d));
  run_interleaved(candidates, repeats, "UMT5");
  // Per real token: q/k/v/o (4·d·inner) and the gated FFN (3·d·ff) multiply-adds; attention
  // 4·L²·inner per prompt (q·kᵀ and p·v).
  const double useful = 2.0 * double(prompts.tokens) * double(4 * d * heads * d_kv + 3 * d * ff) +
                        4.0 * sum_squares(prompts) * double(heads * d_kv);
  print_layer_table("UMT5-XXL-sized (64 heads x 64, encoder-only, bias, FFN 10240)", candidates,
                    prompts, useful, gemm_flops(d));
}

// ------------------------------------------------------------------ Qwen3-4B-sized layer

void bench_qwen3(const Prompts& prompts, const fs::path& dir, int repeats) {
  const int64_t d = 2560, heads = 32, kv_heads = 8, head_dim = 128, ff = 9728;
  const json config_json = {
      {"model_type", "qwen3"},           {"vocab_size", kVocab},   {"hidden_size", d},
      {"intermediate_size", ff},         {"num_hidden_layers", 2}, {"num_attention_heads", heads},
      {"num_key_value_heads", kv_heads}, {"head_dim", head_dim},   {"rope_theta", 1000000.0}};
  const fs::path file = dir / "qwen3.safetensors";
  {
    Checkpoint ckpt;
    ckpt.add("embed_tokens.weight", {kVocab, d}, 1.0f);
    for (int layer = 0; layer < 2; ++layer) {
      const std::string block = "layers." + std::to_string(layer) + ".";
      ckpt.norm(block + "input_layernorm.weight", d);
      ckpt.linear(block + "self_attn.q_proj.weight", heads * head_dim, d);
      ckpt.linear(block + "self_attn.k_proj.weight", kv_heads * head_dim, d);
      ckpt.linear(block + "self_attn.v_proj.weight", kv_heads * head_dim, d);
      ckpt.linear(block + "self_attn.o_proj.weight", d, heads * head_dim);
      ckpt.norm(block + "self_attn.q_norm.weight", head_dim);
      ckpt.norm(block + "self_attn.k_norm.weight", head_dim);
      ckpt.norm(block + "post_attention_layernorm.weight", d);
      ckpt.linear(block + "mlp.gate_proj.weight", ff, d);
      ckpt.linear(block + "mlp.up_proj.weight", ff, d);
      ckpt.linear(block + "mlp.down_proj.weight", d, ff);
    }
    ckpt.norm("norm.weight", d);
    write_safetensors(file, ckpt.tensors);
  }
  const Qwen3TextModel model(Qwen3Config::from_json(config_json), WeightStore::open_file(file));
  std::vector<int64_t> padded_ids;
  for (const auto& p : prompts.ids) {
    padded_ids.insert(padded_ids.end(), p.begin(), p.end());
    padded_ids.insert(padded_ids.end(), size_t(kMaxLen) - p.size(), 0);
  }
  const CausalBatch padded_batch =
      CausalBatch::fresh(std::vector<int64_t>(prompts.ids.size(), kMaxLen));
  auto options = [&](const std::string& name, bool cache) {
    attention::paged::PagedRunnerOptions o;
    o.backend = name;
    o.page_size = 1;
    o.prefix_cache = cache;
    o.pool_tokens = 2 * (prompts.tokens + 1024);  // a batch may take half the pool
    o.max_context_len = kMaxLen;
    o.cache_token_budget = prompts.tokens;
    return o;
  };

  std::vector<Candidate> candidates;
  candidates.push_back({"padded batch", [&] {
                          auto attention = model.dense_attention(false);
                          model.forward_layers(padded_ids, padded_batch, *attention, 1);
                        }});
  std::vector<int64_t> hit_tokens(kBackends.size(), 0);
  std::unique_ptr<Qwen3PagedEncoder> encoder;  // a fresh one (empty pool and cache) per run
  for (size_t b = 0; b < kBackends.size(); ++b)
    for (bool cache : {false, true}) {
      const std::string name = kBackends[b];
      candidates.push_back({name + (cache ? " cache on" : ""),
                            [&, b, cache] {
                              encoder->encode(prompts.ids);
                              if (cache) hit_tokens[b] = encoder->report().hit_tokens;
                            },
                            [&, name, cache] {
                              encoder.reset();
                              encoder =
                                  std::make_unique<Qwen3PagedEncoder>(model, options(name, cache));
                            }});
    }
  candidates.push_back(gemm_yardstick(d));
  run_interleaved(candidates, repeats, "Qwen3");

  // Per real token: q/k/v/o and the SwiGLU MLP multiply-adds; causal attention 2·L²·q_width.
  const int64_t q_width = heads * head_dim, kv_width = kv_heads * head_dim;
  const double per_token = 2.0 * double(d * (q_width + 2 * kv_width) + q_width * d + 3 * d * ff);
  const double useful = per_token * double(prompts.tokens) + 2.0 * sum_squares(prompts) * q_width;
  std::vector<Candidate> layer_rows = {candidates[0]};
  for (size_t b = 0; b < kBackends.size(); ++b) {
    layer_rows.push_back(candidates[1 + 2 * b]);
    layer_rows.back().name = kBackends[b];
  }
  layer_rows.push_back(candidates.back());
  print_layer_table("Qwen3-4B-sized (32 q / 8 kv heads x 128, causal, SwiGLU 9728)", layer_rows,
                    prompts, useful, gemm_flops(d));

  // The prefix cache: the same 64 prompts, cache off (one batch) against on (the first prompt
  // alone, then the others over its template). A hit skips the template's 30 tokens of every
  // later prompt: their whole layer (projections, MLP, attention as queries).
  std::printf(
      "\nprefix cache, Qwen3-4B-sized layer, 30-token template shared by all %zu prompts, page "
      "size 1\n\n| backend | cache off s | cache on s | speedup | CPU s off / on | CPU "
      "speedup | hit tokens | share of the tokens | speedup if the saving were proportional "
      "|\n|---|---|---|---|---|---|---|---|---|\n",
      prompts.ids.size());
  for (size_t b = 0; b < kBackends.size(); ++b) {
    const Candidate &off = candidates[1 + 2 * b], &on = candidates[2 + 2 * b];
    const double share = double(hit_tokens[b]) / double(prompts.tokens);
    std::printf("| %s | %.2f | %.2f | %.3fx | %.2f / %.2f | %.3fx | %lld | %.1f%% | %.3fx |\n",
                kBackends[b].c_str(), median(off.seconds), median(on.seconds),
                median(off.seconds) / median(on.seconds), median(off.cpu), median(on.cpu),
                median(off.cpu) / median(on.cpu), static_cast<long long>(hit_tokens[b]),
                100.0 * share, 1.0 / (1.0 - share));
  }
  std::fflush(stdout);
}

// ------------------------------------------------------------------ attention alone

// The part of a layer the backends differ in: one attention call over the packed batch, random
// q/k/v of the two layer shapes, against dense attention over the padded [64, 512] batch
// (attention::dense_attention with a key mask and the T5 bias or a causal mask, KV heads repeated
// for GQA). Backends: a fresh backend and, for the causal shape, a pool (page size 1) holding the
// batch's slots are made untimed; init_forward_metadata and the forward are timed.
struct AttentionShape {
  std::string name;
  int64_t hq, hkv, d;
  attention::paged::AttentionType type;
  float scale;
};

void bench_attention(const Prompts& prompts, int repeats) {
  using namespace attention::paged;
  const std::vector<AttentionShape> shapes = {
      {"UMT5-XXL-sized (64 heads x 64, encoder-only, bias)", 64, 64, 64, AttentionType::EncoderOnly,
       1.0f},
      {"Qwen3-4B-sized (32 q / 8 kv heads x 128, causal)", 32, 8, 128, AttentionType::Decoder,
       1.0f / std::sqrt(128.0f)}};
  std::vector<int64_t> lengths;
  for (const auto& p : prompts.ids) lengths.push_back(int64_t(p.size()));
  const int64_t total = prompts.tokens, batch_size = int64_t(lengths.size());
  std::printf(
      "\nattention alone (one call over the packed batch; the rest of the layer is the same "
      "work for every backend)\n\n| layer | batch | s | CPU s | vs padded | vs padded (CPU) "
      "|\n|---|---|---|---|---|---|\n");
  for (const AttentionShape& shape : shapes) {
    const Tensor q = random_tensor({total, shape.hq, shape.d}, 0.0f, 1.7f, 11, DType::F32);
    const Tensor k = random_tensor({total, shape.hkv, shape.d}, 0.0f, 1.7f, 12, DType::F32);
    const Tensor v = random_tensor({total, shape.hkv, shape.d}, 0.0f, 1.7f, 13, DType::F32);
    const Tensor table = random_tensor({shape.hq, 2 * kMaxLen - 1}, 0.0f, 1.0f, 14, DType::F32);
    RelativePositionBias bias(table, kMaxLen);
    const bool encoder = shape.type == AttentionType::EncoderOnly;
    const PagedLayer layer{.num_q_heads = shape.hq,
                           .num_kv_heads = shape.hkv,
                           .head_dim = shape.d,
                           .scaling = shape.scale,
                           .type = shape.type,
                           .bias = encoder ? &bias : nullptr};

    // The padded batch: every prompt's rows at the start of its 512-row slot.
    attention::DenseAttentionArgs args;
    auto pad = [&](const Tensor& packed, int64_t heads) {
      Tensor out = Tensor::zeros({batch_size, kMaxLen, heads, shape.d});
      const int64_t row = packed.size(1) * shape.d, group = heads / packed.size(1);
      int64_t at = 0;
      for (int64_t b = 0; b < batch_size; ++b)
        for (int64_t j = 0; j < lengths[size_t(b)]; ++j, ++at)
          for (int64_t h = 0; h < heads; ++h)  // GQA: each KV head repeated for its query heads
            std::copy_n(packed.data<float>() + at * row + (h / group) * shape.d, shape.d,
                        out.data<float>() + ((b * kMaxLen + j) * heads + h) * shape.d);
      return out;
    };
    args.q = pad(q, shape.hq);
    args.k = pad(k, shape.hq);
    args.v = pad(v, shape.hq);
    args.scale = shape.scale;
    args.bias = Tensor::zeros({shape.hq, kMaxLen, kMaxLen});
    float* dense_bias = args.bias.data<float>();
    for (int64_t h = 0; h < shape.hq; ++h)
      for (int64_t i = 0; i < kMaxLen; ++i)
        for (int64_t j = 0; j < kMaxLen; ++j)
          if (encoder)
            bias.add(h, i, j, 1, &dense_bias[(h * kMaxLen + i) * kMaxLen + j]);
          else if (j > i)
            dense_bias[(h * kMaxLen + i) * kMaxLen + j] = -INFINITY;
    std::vector<int64_t> mask(size_t(batch_size * kMaxLen), 0);
    for (int64_t b = 0; b < batch_size; ++b)
      std::fill_n(mask.begin() + b * kMaxLen, lengths[size_t(b)], 1);
    args.key_mask = Tensor::from_vector({batch_size, kMaxLen}, mask);

    // A backend's state for one run: the backend, and for the causal layer a pool with the
    // batch's slots (as a runner would have allocated them).
    struct Run {
      std::unique_ptr<PagedAttentionBackend> backend;
      std::unique_ptr<ReqToTokenPool> table;
      std::unique_ptr<KVPool> pool;
      ForwardBatch batch;
    };
    auto state = std::make_shared<Run>();
    std::vector<Candidate> candidates;
    candidates.push_back({"padded batch", [&] { attention::dense_attention(args); }});
    for (const std::string& name : kBackends)
      candidates.push_back({name,
                            [&, state] {
                              state->backend->init_forward_metadata(state->batch);
                              state->backend->forward(q, k, v, layer, state->batch);
                            },
                            [&, state, name] {
                              *state = Run{};
                              state->backend = make_paged_backend(name);
                              if (encoder) {
                                state->batch = ForwardBatch::encoder_only(lengths);
                                return;
                              }
                              state->table = std::make_unique<ReqToTokenPool>(batch_size, kMaxLen);
                              PageAllocator allocator(total + 1, 1);
                              state->pool =
                                  std::make_unique<KVPool>(total + 1, 1, 1, shape.hkv, shape.d);
                              ForwardBatch& batch = state->batch;
                              std::vector<int64_t> zeros(lengths.size(), 0),
                                  none(lengths.size(), -1);
                              allocator.alloc_extend(zeros, lengths, none, batch.out_cache_loc);
                              int64_t at = 0;
                              for (int64_t len : lengths) {
                                const int64_t row = *state->table->alloc();
                                batch.req_pool_indices.push_back(row);
                                for (int64_t j = 0; j < len; ++j)
                                  state->table->row(row)[j] = batch.out_cache_loc[size_t(at++)];
                              }
                              batch.seq_lens = lengths;
                              batch.extend_seq_lens = lengths;
                              batch.extend_prefix_lens = zeros;
                              batch.req_to_token = state->table.get();
                              batch.kv_pool = state->pool.get();
                              batch.finish_metadata();
                            }});
    run_interleaved(candidates, repeats, "attention");
    const double padded = median(candidates[0].seconds), padded_cpu = median(candidates[0].cpu);
    for (const Candidate& c : candidates)
      std::printf("| %s | %s | %.2f | %.2f | %.2fx | %.2fx |\n", shape.name.c_str(), c.name.c_str(),
                  median(c.seconds), median(c.cpu), padded / median(c.seconds),
                  padded_cpu / median(c.cpu));
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) {
  int repeats = 3, prompt_count = 64;
  std::string only;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--repeats")
      repeats = std::atoi(argv[i + 1]);
    else if (flag == "--prompts")
      prompt_count = std::atoi(argv[i + 1]);
    else if (flag == "--only")
      only = argv[i + 1];
    else {
      std::fprintf(stderr, "usage: %s [--repeats N] [--prompts N] [--only umt5|qwen3|attention]\n",
                   argv[0]);
      return 2;
    }
  }
  const Prompts prompts = make_prompts(prompt_count);
  const double padding_ratio = double(int64_t(prompt_count) * kMaxLen) / double(prompts.tokens);
  std::printf("%d prompts, %lld real tokens (padded batch: %lld, ratio %.2f); median of %d\n",
              prompt_count, static_cast<long long>(prompts.tokens),
              static_cast<long long>(int64_t(prompt_count) * kMaxLen), padding_ratio, repeats);
  if (only != "attention")
    std::printf(
        "\nwhole layers\n\n| layer | batch | s | CPU s | real tokens/s | vs padded | vs padded "
        "(CPU) | useful GFLOP/s | of GEMM |\n|---|---|---|---|---|---|---|---|---|\n");
  const fs::path dir =
      fs::temp_directory_path() / ("mmgen-paged-bench-" + std::to_string(getpid()));
  fs::create_directories(dir);
  try {
    if (only.empty() || only == "umt5") bench_umt5(prompts, dir, repeats);
    if (only.empty() || only == "qwen3") bench_qwen3(prompts, dir, repeats);
    if (only.empty() || only == "attention") bench_attention(prompts, repeats);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "paged_attention_bench: %s\n", e.what());
    fs::remove_all(dir);
    return 1;
  }
  fs::remove_all(dir);
  return 0;
}
