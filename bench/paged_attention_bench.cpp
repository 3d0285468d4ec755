// Text-encoder attention on the paged CPU backends: 64 prompts of mixed length (20–512 tokens)
// through one UMT5-XXL-sized layer (d_model 4096 = 64 heads × 64; encoder-only, relative position
// bias, no scaling) and one Qwen3-4B-sized layer (hidden 2560, 32 query heads / 8 KV heads × 128;
// causal, GQA), random q/k/v. Reports real (unpadded) tokens per second for each backend against
// a padded dense batch (every prompt padded to 512, attention::dense_attention with a key mask,
// plus a causal bias for Qwen3 and KV heads repeated for GQA), and the prefix cache's speedup when
// every prompt starts with the same 30-token template (cache warmed by one prompt; the others hit).
// Attention only: the projections around it scale with the token count (the padding ratio for the
// padded batch, the template's share for the cache) and are not timed here.
//
//   paged_attention_bench [--repeats N] [--prompts N] [--cache-only]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "attention/dense_attention.h"
#include "attention/paged/backends.h"
#include "attention/paged/paged_runner.h"
#include "core/ops.h"

namespace {

using namespace mmgen;
using namespace mmgen::attention::paged;

const std::vector<std::string> kBackends = {"torch_native", "triton", "flashinfer", "fa3",
                                            "flex_attention"};
constexpr int64_t kMaxLen = 512;

struct LayerShape {
  std::string name;
  int64_t hq, hkv, d;
  AttentionType type;
  float scale;
};

Tensor random_tensor(const Shape& shape, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Tensor t = Tensor::empty(shape);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = normal(rng);
  return t;
}

template <typename F>
double median_seconds(int repeats, F&& run) {
  std::vector<double> times;
  for (int r = 0; r < repeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
    run();
    times.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// One forward of the packed batch through `name` (a pool for the causal layer, written as it runs).
double time_backend(const std::string& name, const LayerShape& shape,
                    const std::vector<int64_t>& lengths, const Tensor& q, const Tensor& k,
                    const Tensor& v, const ScoreBias* bias, int repeats) {
  PagedLayer layer{.num_q_heads = shape.hq,
                   .num_kv_heads = shape.hkv,
                   .head_dim = shape.d,
                   .scaling = shape.scale,
                   .type = shape.type,
                   .bias = bias};
  const int64_t total = q.size(0);
  return median_seconds(repeats, [&] {
    auto backend = make_paged_backend(name);
    if (shape.type == AttentionType::EncoderOnly) {
      const ForwardBatch batch = ForwardBatch::encoder_only(lengths);
      backend->init_forward_metadata(batch);
      backend->forward(q, k, v, layer, batch);
      return;
    }
    const int64_t page = 16;
    ReqToTokenPool table(int64_t(lengths.size()), kMaxLen);
    PageAllocator allocator(total + page * int64_t(lengths.size()), page);
    KVPool pool(allocator.num_pages() * page, page, 1, shape.hkv, shape.d);
    ForwardBatch batch;
    std::vector<int64_t> zeros(lengths.size(), 0), none(lengths.size(), -1);
    allocator.alloc_extend(zeros, lengths, none, batch.out_cache_loc);
    int64_t at = 0;
    for (int64_t len : lengths) {
      const int64_t row = *table.alloc();
      batch.req_pool_indices.push_back(row);
      for (int64_t j = 0; j < len; ++j) table.row(row)[j] = batch.out_cache_loc[size_t(at++)];
    }
    batch.seq_lens = lengths;
    batch.extend_seq_lens = lengths;
    batch.extend_prefix_lens = zeros;
    batch.req_to_token = &table;
    batch.kv_pool = &pool;
    batch.finish_metadata();
    backend->init_forward_metadata(batch);
    backend->forward(q, k, v, layer, batch);
  });
}

// The padded dense batch: [B, 512, H, D], key mask, bias (T5 table or causal −inf).
double time_padded(const LayerShape& shape, const std::vector<int64_t>& lengths, const Tensor& q,
                   const Tensor& kv_source, int repeats, std::mt19937& rng) {
  const int64_t batch = int64_t(lengths.size());
  attention::DenseAttentionArgs args;
  // The packed data, padded: every prompt's rows at the start of its 512-row slot.
  auto pad = [&](const Tensor& packed, int64_t heads) {
    Tensor out = Tensor::zeros({batch, kMaxLen, heads, shape.d});
    const int64_t row = packed.size(1) * shape.d, group = heads / packed.size(1);
    int64_t at = 0;
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t j = 0; j < lengths[size_t(b)]; ++j, ++at)
        for (int64_t h = 0; h < heads; ++h)  // GQA: each KV head repeated for its query heads
          std::memcpy(out.data<float>() + ((b * kMaxLen + j) * heads + h) * shape.d,
                      packed.data<float>() + at * row + (h / group) * shape.d,
                      size_t(shape.d) * sizeof(float));
    return out;
  };
  args.q = pad(q, shape.hq);
  args.k = pad(kv_source, shape.hq);
  args.v = args.k;
  args.scale = shape.scale;
  args.bias = Tensor::zeros({shape.hq, kMaxLen, kMaxLen});
  float* bias = args.bias.data<float>();
  if (shape.type == AttentionType::Decoder) {
    for (int64_t h = 0; h < shape.hq; ++h)
      for (int64_t i = 0; i < kMaxLen; ++i)
        for (int64_t j = i + 1; j < kMaxLen; ++j) bias[(h * kMaxLen + i) * kMaxLen + j] = -INFINITY;
  } else {
    const Tensor noise = random_tensor({shape.hq, kMaxLen, kMaxLen}, rng);
    std::memcpy(bias, noise.data<float>(), noise.nbytes());
  }
  std::vector<int64_t> mask(size_t(batch * kMaxLen), 0);
  for (int64_t b = 0; b < batch; ++b)
    std::fill(mask.begin() + b * kMaxLen, mask.begin() + b * kMaxLen + lengths[size_t(b)], 1);
  args.key_mask = Tensor::from_vector({batch, kMaxLen}, mask);
  return median_seconds(repeats, [&] { attention::dense_attention(args); });
}

}  // namespace

int main(int argc, char** argv) {
  int repeats = 3, prompt_count = 64;
  bool cache_only = false;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--cache-only") cache_only = true;
    if (i + 1 >= argc) continue;
    if (std::string(argv[i]) == "--repeats") repeats = std::atoi(argv[i + 1]);
    if (std::string(argv[i]) == "--prompts") prompt_count = std::atoi(argv[i + 1]);
  }
  std::mt19937 rng(2024);
  std::uniform_int_distribution<int64_t> length(20, kMaxLen);
  std::vector<int64_t> lengths;
  int64_t total = 0;
  for (int i = 0; i < prompt_count; ++i) total += lengths.emplace_back(length(rng));
  const double padding_ratio = double(prompt_count * kMaxLen) / double(total);
  std::printf("%d prompts, %lld real tokens (padded batch: %lld, ratio %.2f); median of %d\n\n",
              prompt_count, static_cast<long long>(total),
              static_cast<long long>(prompt_count * kMaxLen), padding_ratio, repeats);

  const std::vector<LayerShape> shapes = {
      {"UMT5 (64x64, encoder-only, bias)", 64, 64, 64, AttentionType::EncoderOnly, 1.0f},
      {"Qwen3 (32/8x128, causal, GQA)", 32, 8, 128, AttentionType::Decoder,
       1.0f / std::sqrt(128.0f)},
  };
  if (!cache_only)
    std::printf(
        "| layer | backend | seconds | real tokens/s | vs padded |\n|---|---|---|---|---|\n");
  for (const LayerShape& shape : shapes) {
    if (cache_only) break;
    const Tensor q = random_tensor({total, shape.hq, shape.d}, rng);
    const Tensor k = random_tensor({total, shape.hkv, shape.d}, rng);
    const Tensor v = random_tensor({total, shape.hkv, shape.d}, rng);
    const Tensor table = random_tensor({shape.hq, 2 * kMaxLen - 1}, rng);
    RelativePositionBias bias(table, kMaxLen);
    const ScoreBias* layer_bias = shape.type == AttentionType::EncoderOnly ? &bias : nullptr;
    // The machine is shared: every repeat runs all candidates back to back (in a rotating
    // order), so a slow spell hits them alike; each keeps its median.
    std::vector<std::vector<double>> times(kBackends.size() + 1);
    for (int r = 0; r < repeats; ++r)
      for (size_t c = 0; c <= kBackends.size(); ++c) {
        const size_t which = (c + size_t(r)) % (kBackends.size() + 1);
        times[which].push_back(
            which == kBackends.size()
                ? time_padded(shape, lengths, q, k, 1, rng)
                : time_backend(kBackends[which], shape, lengths, q, k, v, layer_bias, 1));
      }
    auto median = [](std::vector<double> t) {
      std::sort(t.begin(), t.end());
      return t[t.size() / 2];
    };
    const double padded = median(times.back());
    std::printf("| %s | padded dense | %.3f | %.0f | 1.00x |\n", shape.name.c_str(), padded,
                double(total) / padded);
    for (size_t b = 0; b < kBackends.size(); ++b) {
      const double seconds = median(times[b]);
      std::printf("| %s | %s | %.3f | %.0f | %.2fx |\n", shape.name.c_str(), kBackends[b].c_str(),
                  seconds, double(total) / seconds, padded / seconds);
    }
    std::fflush(stdout);
  }

  // The prefix cache: a 30-token template before every prompt (total length still 20..512).
  // The prefix cache: a 30-token template before every prompt (total length still 20..512). The
  // first prompt runs alone and leaves the template in the cache; the other 63 are timed. With
  // "+ projections" each new token also goes through Qwen3's q/k/v and o projections, the
  // per-token work a template hit removes (attention itself barely shrinks: the queries dropped
  // are the template's first 30 positions, which see few keys under the causal mask).
  std::printf("\nprefix cache, Qwen3-sized layer, 30-token template shared by all prompts\n\n");
  std::printf(
      "| work | backend | page | cache off s | cache on s | speedup | hit tokens | new tokens "
      "(off / on) |\n|---|---|---|---|---|---|---|---|\n");
  std::vector<int64_t> templ;
  for (int i = 0; i < 30; ++i) templ.push_back(1 + int64_t(rng() % 30000));
  std::vector<std::vector<int64_t>> prompts;
  for (int64_t len : lengths) {
    std::vector<int64_t> p = templ;
    for (int64_t j = std::max<int64_t>(len, 31) - 30; j > 0; --j)
      p.push_back(1 + int64_t(rng() % 30000));
    prompts.push_back(p);
  }
  const std::vector<std::vector<int64_t>> rest(prompts.begin() + 1, prompts.end());
  const LayerShape& qwen = shapes[1];
  const PagedModelSpec spec{.num_layers = 1,
                            .num_q_heads = qwen.hq,
                            .num_kv_heads = qwen.hkv,
                            .head_dim = qwen.d,
                            .scaling = qwen.scale};
  int64_t prompt_tokens = 0;
  for (const auto& p : prompts) prompt_tokens += int64_t(p.size());
  const int64_t hidden = 2560, q_width = qwen.hq * qwen.d, kv_width = qwen.hkv * qwen.d;
  const Tensor q_all = random_tensor({prompt_tokens, qwen.hq, qwen.d}, rng);
  const Tensor kv_all = random_tensor({prompt_tokens, qwen.hkv, qwen.d}, rng);
  const Tensor x_all = random_tensor({prompt_tokens, hidden}, rng);
  const Tensor w_q = random_tensor({q_width, hidden}, rng),
               w_k = random_tensor({kv_width, hidden}, rng);
  const Tensor w_v = random_tensor({kv_width, hidden}, rng),
               w_o = random_tensor({hidden, q_width}, rng);
  struct Config {
    bool projections;
    std::string backend;
    int64_t page;
  };
  std::vector<Config> configs;
  for (const char* name : {"triton", "flashinfer", "fa3"})
    for (int64_t page : {int64_t(1), int64_t(16)}) configs.push_back({false, name, page});
  for (const char* name : {"triton", "fa3"})
    for (int64_t page : {int64_t(1), int64_t(16)}) configs.push_back({true, name, page});
  for (const Config& config : configs) {
    double seconds[2];
    int64_t hit_tokens = 0, new_tokens[2] = {0, 0};
    std::vector<std::unique_ptr<PagedRunner>> runners;
    for (int on = 0; on < 2; ++on)
      runners.push_back(std::make_unique<PagedRunner>(
          spec, PagedRunnerOptions{.backend = config.backend,
                                   .page_size = config.page,
                                   .prefix_cache = on == 1,
                                   .pool_tokens = prompt_tokens * 2 + 4096,
                                   .cache_token_budget = prompt_tokens * 2}));
    std::vector<double> times[2];
    for (int r = 0; r < repeats; ++r)
      for (int on : {r % 2, 1 - r % 2}) {  // alternate which goes first
        PagedRunner& runner = *runners[size_t(on)];
        if (runner.cache()) runner.cache()->reset();
        runner.begin_extend({prompts[0]});  // warms the cache (not timed)
        runner.finish();
        const auto start = std::chrono::steady_clock::now();
        const ForwardBatch& batch = runner.begin_extend(rest);
        const int64_t n = batch.num_tokens;
        new_tokens[on] = n;
        if (config.projections) {
          const Tensor x = x_all.slice(0, 0, n);
          const Tensor o =
              runner.attention(0, ops::linear(x, w_q), ops::linear(x, w_k), ops::linear(x, w_v));
          ops::linear(o.view({n, q_width}), w_o);
        } else {
          runner.attention(0, q_all.slice(0, 0, n), kv_all.slice(0, 0, n), kv_all.slice(0, 0, n));
        }
        if (runner.cache_stats()) hit_tokens = runner.cache_stats()->hit_tokens;
        runner.finish();
        times[on].push_back(
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      }
    for (int on = 0; on < 2; ++on) {
      std::sort(times[on].begin(), times[on].end());
      seconds[on] = times[on][times[on].size() / 2];
    }
    std::printf("| %s | %s | %lld | %.3f | %.3f | %.2fx | %lld | %lld / %lld |\n",
                config.projections ? "attention + projections" : "attention",
                config.backend.c_str(), static_cast<long long>(config.page), seconds[0], seconds[1],
                seconds[0] / seconds[1], static_cast<long long>(hit_tokens),
                static_cast<long long>(new_tokens[0]), static_cast<long long>(new_tokens[1]));
    std::fflush(stdout);
  }
  return 0;
}
