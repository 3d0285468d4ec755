// The paged-attention backends (attention/paged/) against a direct double-precision formula, on
// ragged batches with grouped-query attention: every backend × page size {1, 16, 64} ×
// {encoder-only with a T5-style bias, causal over a cached prefix}, decode steps, sliding windows,
// flex_attention's callbacks; the PagedRunner's prefix cache (same results on and off, the
// shared template hit by every later prompt); and UMT5 through each backend against transformers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "attention/catalogue.h"
#include "attention/paged/backends.h"
#include "attention/paged/paged_runner.h"
#include "core/ops.h"
#include "core/safetensors.h"
#include "models/text_encoders/umt5_encoder.h"
#include "tests/test_support.h"

namespace mmgen::attention::paged {
namespace {

// The designs for plain layers (dual_chunk_flash_attn, for dual-chunk layers, is tested apart).
const std::vector<std::string> kBackends = {"torch_native", "triton", "flashinfer", "fa3",
                                            "flex_attention"};
const std::vector<int64_t> kPageSizes = {1, 16, 64};

Tensor random_tensor(const Shape& shape, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> normal(0.0f, scale);
  Tensor t = Tensor::empty(shape);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = normal(rng);
  return t;
}

// One request's whole K/V (prefix and new tokens) [seq, Hkv, D], and its new tokens' queries.
struct RequestData {
  int64_t prefix = 0, extend = 0, valid = -1;
  Tensor q, k, v;  // q [extend, Hq, D]; k, v [prefix + extend, Hkv, D]
};

struct Config {
  int64_t hq = 4, hkv = 2, d = 16;
  float scale = 0.25f;
  AttentionType type = AttentionType::Decoder;
  int64_t window = -1;
  const ScoreBias* bias = nullptr;
};

// softmax(scale·q·k + bias) · v over the visible keys, in double.
Tensor reference(const std::vector<RequestData>& requests, const Config& s) {
  int64_t tokens = 0;
  for (const auto& r : requests) tokens += r.q.size(0);
  Tensor out = Tensor::zeros({tokens, s.hq, s.d});
  int64_t at = 0;
  const int64_t group = s.hq / s.hkv;
  for (const auto& r : requests) {
    const int64_t seq = r.k.size(0), valid = r.valid < 0 ? seq : r.valid;
    for (int64_t i = 0; i < r.q.size(0); ++i, ++at) {
      const int64_t q_pos = seq - r.q.size(0) + i;
      for (int64_t h = 0; h < s.hq; ++h) {
        const float* q = r.q.data<float>() + (i * s.hq + h) * s.d;
        std::vector<double> score(size_t(seq), -INFINITY);
        double max_score = -INFINITY;
        for (int64_t j = 0; j < seq; ++j) {
          bool seen = j < valid;
          if (s.type == AttentionType::Decoder) {
            seen = seen && j <= q_pos && (s.window < 0 || j >= q_pos - s.window);
          } else if (s.window >= 0) {
            seen = seen && std::abs(j - q_pos) <= s.window;
          }
          if (!seen) continue;
          const float* k = r.k.data<float>() + (j * s.hkv + h / group) * s.d;
          double dot = 0;
          for (int64_t x = 0; x < s.d; ++x) dot += double(q[x]) * k[x];
          float bias = 0;
          if (s.bias) s.bias->add(h, q_pos, j, 1, &bias);
          score[size_t(j)] = dot * s.scale + bias;
          max_score = std::max(max_score, score[size_t(j)]);
        }
        if (max_score == -INFINITY) continue;
        double sum = 0;
        for (auto& value : score) sum += value = std::exp(value - max_score);
        float* o = out.data<float>() + (at * s.hq + h) * s.d;
        for (int64_t x = 0; x < s.d; ++x) {
          double acc = 0;
          for (int64_t j = 0; j < seq; ++j)
            if (score[size_t(j)] > 0)
              acc += score[size_t(j)] * r.v.data<float>()[(j * s.hkv + h / group) * s.d + x];
          o[x] = float(acc / sum);
        }
      }
    }
  }
  return out;
}

std::vector<RequestData> random_requests(const std::vector<int64_t>& prefix,
                                         const std::vector<int64_t>& extend,
                                         const std::vector<int64_t>& valid, const Config& s,
                                         std::mt19937& rng) {
  std::vector<RequestData> requests;
  for (size_t i = 0; i < extend.size(); ++i) {
    RequestData r;
    r.prefix = prefix.empty() ? 0 : prefix[i];
    r.extend = extend[i];
    r.valid = valid.empty() ? -1 : valid[i];
    r.q = random_tensor({r.extend, s.hq, s.d}, rng);
    r.k = random_tensor({r.prefix + r.extend, s.hkv, s.d}, rng);
    r.v = random_tensor({r.prefix + r.extend, s.hkv, s.d}, rng);
    requests.push_back(std::move(r));
  }
  return requests;
}

// Packs rows [first, first + n) of each request's tensor (column `which`) into one batch tensor.
Tensor pack(const std::vector<RequestData>& requests, Tensor RequestData::*field, bool new_only) {
  std::vector<Tensor> parts;
  int64_t rows = 0;
  for (const auto& r : requests) {
    const Tensor& t = r.*field;
    const int64_t first = new_only && field != &RequestData::q ? r.prefix : 0;
    parts.push_back(t.slice(0, first, t.size(0)));
    rows += t.size(0) - first;
  }
  Shape shape = parts[0].shape();
  shape[0] = rows;
  Tensor out = Tensor::empty(shape);
  int64_t at = 0;
  for (const auto& p : parts) {
    out.slice(0, at, at + p.size(0)).copy_from(p);
    at += p.size(0);
  }
  return out;
}

PagedLayer make_layer(const Config& s) {
  PagedLayer layer;
  layer.num_q_heads = s.hq;
  layer.num_kv_heads = s.hkv;
  layer.head_dim = s.d;
  layer.scaling = s.scale;
  layer.type = s.type;
  layer.sliding_window_size = s.window;
  layer.bias = s.bias;
  return layer;
}

// The memory of a causal test: the prefix K/V written to the pool as an earlier forward would
// have left it, and slots for the new tokens.
struct Memory {
  ReqToTokenPool table{16, 1024};
  PageAllocator allocator;
  KVPool pool;
  // keys_only: MLA's pool of latent rows.
  Memory(int64_t page_size, const Config& s, bool keys_only = false)
      : allocator(8192, page_size),
        pool(8192 / page_size * page_size, page_size, 1, s.hkv, s.d, 0, keys_only) {}
};

ForwardBatch causal_batch(Memory& memory, const std::vector<RequestData>& requests) {
  ForwardBatch batch;
  std::vector<int64_t> zeros, prefix, seq, none;
  for (const auto& r : requests) {
    batch.req_pool_indices.push_back(*memory.table.alloc());
    zeros.push_back(0);
    prefix.push_back(r.prefix);
    seq.push_back(r.prefix + r.extend);
    none.push_back(-1);
  }
  std::vector<int64_t> prefix_slots;
  EXPECT_TRUE(memory.allocator.alloc_extend(zeros, prefix, none, prefix_slots));
  int64_t at = 0;
  std::vector<int64_t> last;
  for (size_t i = 0; i < requests.size(); ++i) {
    int64_t* row = memory.table.row(batch.req_pool_indices[i]);
    for (int64_t j = 0; j < requests[i].prefix; ++j) row[j] = prefix_slots[size_t(at++)];
    last.push_back(requests[i].prefix > 0 ? row[requests[i].prefix - 1] : -1);
  }
  if (!prefix_slots.empty()) {
    std::vector<RequestData> prefixes;
    for (const auto& r : requests) {
      RequestData p;
      p.k = r.k.slice(0, 0, r.prefix);
      p.v = r.v.slice(0, 0, r.prefix);
      prefixes.push_back(p);
    }
    memory.pool.set_kv(0, prefix_slots, pack(prefixes, &RequestData::k, false),
                       pack(prefixes, &RequestData::v, false));
  }
  EXPECT_TRUE(memory.allocator.alloc_extend(prefix, seq, last, batch.out_cache_loc));
  at = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    int64_t* row = memory.table.row(batch.req_pool_indices[i]);
    for (int64_t j = requests[i].prefix; j < seq[i]; ++j)
      row[j] = batch.out_cache_loc[size_t(at++)];
  }
  batch.mode = ForwardMode::Extend;
  batch.seq_lens = seq;
  batch.extend_prefix_lens = prefix;
  for (const auto& r : requests) batch.extend_seq_lens.push_back(r.extend);
  batch.req_to_token = &memory.table;
  batch.kv_pool = &memory.pool;
  batch.finish_metadata();
  return batch;
}

// One decode step: every request grows by one token (a random query of `q_rows` rows of Hq
// heads, key and value; for MLA's latent rows the value is the key), written to a new slot after
// its last. `steps` gets the new tokens; returns the decode batch.
ForwardBatch decode_step(Memory& memory, const std::vector<int64_t>& rows,
                         std::vector<RequestData>& requests, std::vector<RequestData>& steps,
                         const Config& s, int64_t q_rows, bool latent, std::mt19937& rng) {
  ForwardBatch decode;
  decode.mode = ForwardMode::Decode;
  decode.req_pool_indices = rows;
  std::vector<int64_t> last;
  steps.clear();
  for (size_t i = 0; i < requests.size(); ++i) {
    RequestData& r = requests[i];
    const int64_t seq = r.k.size(0);
    last.push_back(memory.table.row(rows[i])[seq - 1]);
    decode.seq_lens.push_back(seq + 1);
    RequestData step_data;
    step_data.q = random_tensor(Shape{1, q_rows, s.d}, rng);
    step_data.k = random_tensor(Shape{1, s.hkv, s.d}, rng);
    step_data.v = latent ? step_data.k : random_tensor(Shape{1, s.hkv, s.d}, rng);
    RequestData grown;  // the request with its new token appended
    grown.q = step_data.q;
    grown.k = pack({r, step_data}, &RequestData::k, false);
    grown.v = latent ? grown.k : pack({r, step_data}, &RequestData::v, false);
    r = grown;
    steps.push_back(step_data);
  }
  EXPECT_TRUE(memory.allocator.alloc_decode(decode.seq_lens, last, decode.out_cache_loc));
  for (size_t i = 0; i < requests.size(); ++i)
    memory.table.row(rows[i])[decode.seq_lens[i] - 1] = decode.out_cache_loc[i];
  decode.req_to_token = &memory.table;
  decode.kv_pool = &memory.pool;
  decode.finish_metadata();
  return decode;
}

const std::vector<int64_t> kPrefix = {0, 5, 16, 64, 100, 37};
const std::vector<int64_t> kExtend = {1, 9, 70, 1, 150, 40};
const std::vector<int64_t> kEncoderLengths = {1, 9, 70, 3, 150, 40};
const std::vector<int64_t> kEncoderValid = {1, 9, 64, 3, 150, 31};

Tensor relative_table(const Config& s, int64_t max_len, std::mt19937& rng) {
  return random_tensor({s.hq, 2 * max_len - 1}, rng, 0.5f);
}

void expect_close(const Tensor& out, const Tensor& expected, const std::string& what) {
  const double error = testing::relative_error(out, expected);
  EXPECT_LT(error, 1e-5) << what;
  if (error >= 1e-5 || std::getenv("MMGEN_VERBOSE"))
    std::printf("%s: relative error %.3g\n", what.c_str(), error);
}

TEST(PagedAttention, EveryBackendMatchesTheReferenceOnRaggedBatches) {
  std::mt19937 rng(7);
  double worst_encoder = 0, worst_causal = 0;
  for (const std::string& name : kBackends)
    for (int64_t page_size : kPageSizes) {
      const std::string label = name + " page " + std::to_string(page_size);
      {  // encoder-only, T5-style: bias, no scaling, padding
        Config s;
        s.type = AttentionType::EncoderOnly;
        s.scale = 1.0f;
        RelativePositionBias bias(relative_table(s, 150, rng), 150);
        s.bias = &bias;
        auto requests = random_requests({}, kEncoderLengths, kEncoderValid, s, rng);
        ForwardBatch batch = ForwardBatch::encoder_only(kEncoderLengths, kEncoderValid);
        auto backend = make_paged_backend(name);
        backend->init_forward_metadata(batch);
        const Tensor out = backend->forward(
            pack(requests, &RequestData::q, true), pack(requests, &RequestData::k, true),
            pack(requests, &RequestData::v, true), make_layer(s), batch);
        const Tensor expected = reference(requests, s);
        worst_encoder = std::max(worst_encoder, testing::relative_error(out, expected));
        expect_close(out, expected, label + " encoder-only");
      }
      {  // causal over cached prefixes
        Config s;
        auto requests = random_requests(kPrefix, kExtend, {}, s, rng);
        Memory memory(page_size, s);
        ForwardBatch batch = causal_batch(memory, requests);
        auto backend = make_paged_backend(name);
        backend->init_forward_metadata(batch);
        const Tensor out = backend->forward(
            pack(requests, &RequestData::q, true), pack(requests, &RequestData::k, true),
            pack(requests, &RequestData::v, true), make_layer(s), batch);
        const Tensor expected = reference(requests, s);
        worst_causal = std::max(worst_causal, testing::relative_error(out, expected));
        expect_close(out, expected, label + " causal");
      }
    }
  std::printf("worst relative error: encoder-only %.3g, causal %.3g\n", worst_encoder,
              worst_causal);
}

TEST(PagedAttention, FlashInferPagedOnlyPathMatchesToo) {
  std::mt19937 rng(8);
  Config s;
  auto requests = random_requests(kPrefix, kExtend, {}, s, rng);
  Memory memory(16, s);
  ForwardBatch batch = causal_batch(memory, requests);
  auto backend = make_paged_backend("flashinfer", {.flashinfer_use_ragged = false});
  backend->init_forward_metadata(batch);
  const Tensor out =
      backend->forward(pack(requests, &RequestData::q, true), pack(requests, &RequestData::k, true),
                       pack(requests, &RequestData::v, true), make_layer(s), batch);
  expect_close(out, reference(requests, s), "flashinfer paged-only");
}

// A cached prefix changes no bit of the new tokens' outputs in the designs that read all of a
// request's keys as one run: the same requests computed cold (every token new) and over a cached
// prefix of odd lengths, with and without GQA and a sliding window. triton and flashinfer split
// the keys where the prefix ends (see PagedRunner.PrefixCacheGivesTheSameResultsAndHitsTheTemplate)
// and agree to rounding.
TEST(PagedAttention, ACachedPrefixChangesNoBitOfTheOutput) {
  const std::vector<int64_t> prefix = {0, 5, 30, 64, 100, 37, 129};
  const std::vector<int64_t> extend = {1, 9, 70, 1, 150, 40, 3};
  for (const auto& [hq, hkv, window] :
       {std::tuple{4, 2, int64_t(-1)}, std::tuple{3, 3, int64_t(-1)},
        std::tuple{4, 2, int64_t(40)}})
    for (const std::string& name : kBackends)
      for (int64_t page_size : kPageSizes) {
        const std::string label = name + " page " + std::to_string(page_size) + " heads " +
                                  std::to_string(hq) + "/" + std::to_string(hkv) + " window " +
                                  std::to_string(window);
        std::mt19937 rng(13);
        Config s;
        s.hq = hq;
        s.hkv = hkv;
        s.window = window;
        // Cold: every token is new. Hot: the same keys, the first prefix[i] already in the pool.
        std::vector<int64_t> whole;
        for (size_t i = 0; i < prefix.size(); ++i) whole.push_back(prefix[i] + extend[i]);
        const auto cold = random_requests({}, whole, {}, s, rng);
        std::vector<RequestData> hot = cold;
        for (size_t i = 0; i < hot.size(); ++i) {
          hot[i].prefix = prefix[i];
          hot[i].extend = extend[i];
          hot[i].q = cold[i].q.slice(0, prefix[i], whole[i]).contiguous();
        }
        auto run = [&](const std::vector<RequestData>& requests) {
          Memory memory(page_size, s);
          ForwardBatch batch = causal_batch(memory, requests);
          auto backend = make_paged_backend(name);
          backend->init_forward_metadata(batch);
          return backend->forward(pack(requests, &RequestData::q, true),
                                  pack(requests, &RequestData::k, true),
                                  pack(requests, &RequestData::v, true), make_layer(s), batch);
        };
        const Tensor cold_out = run(cold), hot_out = run(hot);
        // The cold rows of the tokens that are new in the hot run.
        Tensor expected = Tensor::empty(hot_out.shape());
        for (size_t i = 0, at = 0, from = 0; i < prefix.size(); ++i) {
          expected.slice(0, int64_t(at), int64_t(at) + extend[i])
              .copy_from(cold_out.slice(0, int64_t(from) + prefix[i], int64_t(from) + whole[i]));
          at += size_t(extend[i]);
          from += size_t(whole[i]);
        }
        if (name == "triton" || name == "flashinfer")
          EXPECT_LT(testing::relative_error(hot_out, expected), 1e-6) << label;
        else
          EXPECT_EQ(testing::max_abs_diff(hot_out, expected), 0.0) << label;
      }
}

TEST(PagedAttention, DecodeStepsMatchTheReference) {
  for (const std::string& name : kBackends)
    for (int64_t page_size : kPageSizes) {
      std::mt19937 rng(11);
      Config s;
      auto requests = random_requests(kPrefix, kExtend, {}, s, rng);
      Memory memory(page_size, s);
      ForwardBatch batch = causal_batch(memory, requests);
      auto backend = make_paged_backend(name);
      backend->init_forward_metadata(batch);
      backend->forward(pack(requests, &RequestData::q, true), pack(requests, &RequestData::k, true),
                       pack(requests, &RequestData::v, true), make_layer(s), batch);
      for (int step = 0; step < 3; ++step) {
        std::vector<RequestData> steps;
        const ForwardBatch decode =
            decode_step(memory, batch.req_pool_indices, requests, steps, s, s.hq, false, rng);
        backend->init_forward_metadata(decode);
        const Tensor out = backend->forward(
            pack(steps, &RequestData::q, false), pack(steps, &RequestData::k, false),
            pack(steps, &RequestData::v, false), make_layer(s), decode);
        expect_close(
            out, reference(requests, s),
            name + " page " + std::to_string(page_size) + " decode step " + std::to_string(step));
      }
    }
}

TEST(PagedAttention, SlidingWindowsFollowTheExclusiveConvention) {
  std::mt19937 rng(12);
  for (const std::string& name : kBackends) {
    {  // causal: window 6 (HF sliding_window 7): keys q − 6 .. q
      Config s;
      s.window = 6;
      auto requests = random_requests(kPrefix, kExtend, {}, s, rng);
      Memory memory(16, s);
      ForwardBatch batch = causal_batch(memory, requests);
      auto backend = make_paged_backend(name);
      backend->init_forward_metadata(batch);
      const Tensor out = backend->forward(
          pack(requests, &RequestData::q, true), pack(requests, &RequestData::k, true),
          pack(requests, &RequestData::v, true), make_layer(s), batch);
      expect_close(out, reference(requests, s), name + " causal window");
    }
    {  // encoder-only: |q − k| ≤ 4
      Config s;
      s.type = AttentionType::EncoderOnly;
      s.window = 4;
      auto requests = random_requests({}, kEncoderLengths, {}, s, rng);
      ForwardBatch batch = ForwardBatch::encoder_only(kEncoderLengths);
      auto backend = make_paged_backend(name);
      backend->init_forward_metadata(batch);
      const Tensor out = backend->forward(
          pack(requests, &RequestData::q, true), pack(requests, &RequestData::k, true),
          pack(requests, &RequestData::v, true), make_layer(s), batch);
      expect_close(out, reference(requests, s), name + " bidirectional window");
    }
  }
}

TEST(PagedAttention, FlexAttentionCallbacksExpressBiasWindowAndPadding) {
  std::mt19937 rng(13);
  Config s;
  s.type = AttentionType::EncoderOnly;
  s.scale = 1.0f;
  s.window = 20;
  RelativePositionBias bias(relative_table(s, 150, rng), 150);
  s.bias = &bias;
  auto requests = random_requests({}, kEncoderLengths, kEncoderValid, s, rng);
  ForwardBatch batch = ForwardBatch::encoder_only(kEncoderLengths, kEncoderValid);
  auto backend = make_paged_backend("flex_attention");
  // The same attention written as callbacks, the layer carrying none of it.
  set_flex_mods(
      *backend,
      [&](float score, int64_t, int64_t h, int64_t q_idx, int64_t kv_idx) {
        bias.add(h, q_idx, kv_idx, 1, &score);
        return score;
      },
      [&](int64_t b, int64_t, int64_t q_idx, int64_t kv_idx) {
        return kv_idx < kEncoderValid[size_t(b)] && std::abs(q_idx - kv_idx) <= 20;
      });
  Config plain = s;
  plain.bias = nullptr;
  plain.window = -1;
  backend->init_forward_metadata(batch);
  const Tensor out =
      backend->forward(pack(requests, &RequestData::q, true), pack(requests, &RequestData::k, true),
                       pack(requests, &RequestData::v, true), make_layer(plain), batch);
  expect_close(out, reference(requests, s), "flex callbacks");
}

TEST(PagedAttention, EncoderOnlyLayersRefuseAPrefix) {
  Config s;
  s.type = AttentionType::EncoderOnly;
  ForwardBatch batch;
  batch.seq_lens = {4};
  batch.extend_prefix_lens = {2};
  batch.extend_seq_lens = {2};
  batch.finish_metadata();
  auto backend = make_paged_backend("triton");
  backend->init_forward_metadata(ForwardBatch::encoder_only({2}));
  std::mt19937 rng(1);
  const std::string message = testing::error_message([&] {
    backend->forward(random_tensor({2, 4, 16}, rng), random_tensor({2, 2, 16}, rng),
                     random_tensor({2, 2, 16}, rng), make_layer(s), batch);
  });
  EXPECT_NE(message.find("cannot extend a cached prefix"), std::string::npos) << message;
}

TEST(PagedAttention, CatalogueRegistersTheCpuDesigns) {
  for (const std::string& name : kBackends)
    EXPECT_TRUE(kernel_availability(this_machine(), Family::Paged, name, "fp32", 64).ok) << name;
  EXPECT_NE(testing::error_message([] { make_paged_backend("fa4"); }).find("no CPU implementation"),
            std::string::npos);
}

// ------------------------------------------------------------------ dual chunk attention

// Dual chunk attention in double: query position p of chunk c = p / L sees key j ≤ p through its
// intra rotation (j ≥ c·L), its succ rotation (the chunk before) or its inter rotation (earlier),
// one softmax over all of them. q [extend, 3·Hq, D] (the variants head-blocked), k / v whole.
Tensor dual_chunk_reference(const std::vector<RequestData>& requests, const Config& s,
                            const DualChunk& dca) {
  int64_t tokens = 0;
  for (const auto& r : requests) tokens += r.q.size(0);
  Tensor out = Tensor::zeros({tokens, s.hq, s.d});
  const int64_t group = s.hq / s.hkv, len = dca.chunk_len();
  int64_t at = 0;
  for (const auto& r : requests) {
    const int64_t seq = r.k.size(0);
    const double scale = double(s.scale) * dca.logit_scale(seq);
    for (int64_t i = 0; i < r.q.size(0); ++i, ++at) {
      const int64_t q_pos = seq - r.q.size(0) + i, chunk0 = q_pos / len * len;
      for (int64_t h = 0; h < s.hq; ++h) {
        std::vector<double> score(size_t(q_pos + 1));
        double max_score = -INFINITY;
        for (int64_t j = 0; j <= q_pos; ++j) {
          const int64_t variant = j >= chunk0 ? 0 : j >= chunk0 - len ? 1 : 2;
          const float* q = r.q.data<float>() + ((i * 3 + variant) * s.hq + h) * s.d;
          const float* k = r.k.data<float>() + (j * s.hkv + h / group) * s.d;
          double dot = 0;
          for (int64_t x = 0; x < s.d; ++x) dot += double(q[x]) * k[x];
          score[size_t(j)] = dot * scale;
          max_score = std::max(max_score, score[size_t(j)]);
        }
        double sum = 0;
        for (auto& value : score) sum += value = std::exp(value - max_score);
        float* o = out.data<float>() + (at * s.hq + h) * s.d;
        for (int64_t x = 0; x < s.d; ++x) {
          double acc = 0;
          for (int64_t j = 0; j <= q_pos; ++j)
            acc += score[size_t(j)] * r.v.data<float>()[(j * s.hkv + h / group) * s.d + x];
          o[x] = float(acc / sum);
        }
      }
    }
  }
  return out;
}

// Requests with three query rotations per token.
std::vector<RequestData> dual_chunk_requests(const std::vector<int64_t>& prefix,
                                             const std::vector<int64_t>& extend, const Config& s,
                                             std::mt19937& rng) {
  auto requests = random_requests(prefix, extend, {}, s, rng);
  for (auto& r : requests) r.q = random_tensor({r.extend, 3 * s.hq, s.d}, rng);
  return requests;
}

PagedLayer dual_chunk_layer(const Config& s, const DualChunk& dca) {
  PagedLayer layer = make_layer(s);
  layer.dual_chunk = dca;
  return layer;
}

TEST(DualChunkAttention, QueryPositionsFollowSGLangsRotaryTables) {
  const DualChunk dca{.chunk_size = 32, .local_size = 8};  // chunk_len 24
  EXPECT_EQ(dca.key_position(53), 5);
  const auto p = dca.query_positions(53);  // 53 % 24 = 5
  EXPECT_EQ(p.intra, 5);
  EXPECT_EQ(p.succ, 29);                        // 5 + 24, under chunk_size
  EXPECT_EQ(p.inter, 32);                       // min(2·24 − 1, 32)
  EXPECT_EQ(dca.query_positions(71).succ, 32);  // 23 + 24 capped at chunk_size
  EXPECT_FLOAT_EQ(dca.logit_scale(100), 1.0f);  // no original_max_position_embeddings
  const DualChunk scaled{.chunk_size = 32, .local_size = 8, .original_max_position_embeddings = 16};
  EXPECT_NEAR(scaled.logit_scale(100), 0.1 * std::log(100.0 / 16.0) + 1.0, 1e-6);
  EXPECT_FLOAT_EQ(scaled.logit_scale(10), 1.0f);  // clipped at 1
}

// Chunks of 24 over prompts of up to 250 tokens: every region, prefixes that end mid-chunk, GQA,
// the logit scale, page sizes 1 and 16; then three decode steps.
TEST(DualChunkAttention, ExtendAndDecodeMatchTheReference) {
  for (int64_t page_size : {int64_t(1), int64_t(16)}) {
    std::mt19937 rng(21);
    Config s;
    const DualChunk dca{.chunk_size = 32, .local_size = 8, .original_max_position_embeddings = 40};
    auto requests = dual_chunk_requests(kPrefix, kExtend, s, rng);
    Memory memory(page_size, s);
    ForwardBatch batch = causal_batch(memory, requests);
    auto backend = make_paged_backend("dual_chunk_flash_attn");
    backend->init_forward_metadata(batch);
    const PagedLayer layer = dual_chunk_layer(s, dca);
    const Tensor out = backend->forward(pack(requests, &RequestData::q, true),
                                        pack(requests, &RequestData::k, true),
                                        pack(requests, &RequestData::v, true), layer, batch);
    expect_close(out, dual_chunk_reference(requests, s, dca),
                 "dual chunk extend page " + std::to_string(page_size));
    for (int step = 0; step < 3; ++step) {
      std::vector<RequestData> steps;
      const ForwardBatch decode =
          decode_step(memory, batch.req_pool_indices, requests, steps, s, 3 * s.hq, false, rng);
      backend->init_forward_metadata(decode);
      const Tensor step_out =
          backend->forward(pack(steps, &RequestData::q, false), pack(steps, &RequestData::k, false),
                           pack(steps, &RequestData::v, false), layer, decode);
      expect_close(
          step_out, dual_chunk_reference(requests, s, dca),
          "dual chunk decode page " + std::to_string(page_size) + " step " + std::to_string(step));
    }
  }
}

// Within one chunk only the intra rotation is used: the result is plain causal attention of it.
TEST(DualChunkAttention, PromptsShorterThanAChunkArePlainCausalAttention) {
  std::mt19937 rng(22);
  Config s;
  const DualChunk dca{.chunk_size = 512, .local_size = 64};
  auto requests = dual_chunk_requests(kPrefix, kExtend, s, rng);
  Memory memory(16, s);
  ForwardBatch batch = causal_batch(memory, requests);
  auto backend = make_paged_backend("dual_chunk_flash_attn");
  backend->init_forward_metadata(batch);
  const Tensor out =
      backend->forward(pack(requests, &RequestData::q, true), pack(requests, &RequestData::k, true),
                       pack(requests, &RequestData::v, true), dual_chunk_layer(s, dca), batch);
  std::vector<RequestData> intra = requests;
  for (auto& r : intra) r.q = r.q.slice(1, 0, s.hq).contiguous();
  expect_close(out, reference(intra, s), "dual chunk within one chunk");
}

TEST(DualChunkAttention, OtherDesignsAndOtherLayersAreRefused) {
  std::mt19937 rng(23);
  Config s;
  const DualChunk dca{.chunk_size = 32, .local_size = 8};
  auto requests = dual_chunk_requests({0}, {10}, s, rng);
  Memory memory(1, s);
  ForwardBatch batch = causal_batch(memory, requests);
  const Tensor q = pack(requests, &RequestData::q, true), k = pack(requests, &RequestData::k, true),
               v = pack(requests, &RequestData::v, true);
  auto triton = make_paged_backend("triton");
  triton->init_forward_metadata(batch);
  std::string message =
      testing::error_message([&] { triton->forward(q, k, v, dual_chunk_layer(s, dca), batch); });
  EXPECT_NE(message.find("only dual_chunk_flash_attn runs"), std::string::npos) << message;
  auto dual = make_paged_backend("dual_chunk_flash_attn");
  dual->init_forward_metadata(batch);
  message = testing::error_message(
      [&] { dual->forward(q.slice(1, 0, s.hq).contiguous(), k, v, make_layer(s), batch); });
  EXPECT_NE(message.find("runs only models with dual chunk attention"), std::string::npos)
      << message;
  PagedLayer windowed = dual_chunk_layer(s, dca);
  windowed.sliding_window_size = 8;
  message = testing::error_message([&] { dual->forward(q, k, v, windowed, batch); });
  EXPECT_NE(message.find("without a sliding window"), std::string::npos) << message;
}

// ------------------------------------------------------------------ multi-head latent attention

// Absorbed MLA in double: every query head attends the request's latent rows causally, V being
// their first `rank` columns. q [extend, Hq, D], k whole [seq, 1, D]; out [tokens, Hq, rank].
Tensor mla_reference(const std::vector<RequestData>& requests, const Config& s, int64_t rank) {
  int64_t tokens = 0;
  for (const auto& r : requests) tokens += r.q.size(0);
  Tensor out = Tensor::zeros({tokens, s.hq, rank});
  int64_t at = 0;
  for (const auto& r : requests) {
    const int64_t seq = r.k.size(0);
    for (int64_t i = 0; i < r.q.size(0); ++i, ++at) {
      const int64_t q_pos = seq - r.q.size(0) + i;
      for (int64_t h = 0; h < s.hq; ++h) {
        const float* q = r.q.data<float>() + (i * s.hq + h) * s.d;
        std::vector<double> score(size_t(q_pos + 1));
        double max_score = -INFINITY;
        for (int64_t j = 0; j <= q_pos; ++j) {
          const float* k = r.k.data<float>() + j * s.d;
          double dot = 0;
          for (int64_t x = 0; x < s.d; ++x) dot += double(q[x]) * k[x];
          score[size_t(j)] = dot * s.scale;
          max_score = std::max(max_score, score[size_t(j)]);
        }
        double sum = 0;
        for (auto& value : score) sum += value = std::exp(value - max_score);
        float* o = out.data<float>() + (at * s.hq + h) * rank;
        for (int64_t x = 0; x < rank; ++x) {
          double acc = 0;
          for (int64_t j = 0; j <= q_pos; ++j)
            acc += score[size_t(j)] * r.k.data<float>()[j * s.d + x];
          o[x] = float(acc / sum);
        }
      }
    }
  }
  return out;
}

// A DeepSeek-shaped layer in miniature: latent rank 32 + rope 8, one KV head, four query heads.
constexpr int64_t kRank = 32, kRope = 8;

Config mla_config() {
  Config s;
  s.hq = 4;
  s.hkv = 1;
  s.d = kRank + kRope;
  s.scale = 0.15f;
  return s;
}

PagedLayer mla_layer(const Config& s) {
  PagedLayer layer = make_layer(s);
  layer.latent = {.kv_lora_rank = kRank, .qk_rope_head_dim = kRope};
  return layer;
}

// v as the model hands it: the first kv_lora_rank columns of k.
Tensor latent_values(const Tensor& k) {
  return k.slice(2, 0, kRank).contiguous();
}

// Extend over cached prefixes (one past FlashMLA's 512-key split), then three decode steps.
TEST(LatentAttention, ExtendAndDecodeMatchTheReference) {
  const std::vector<int64_t> prefix = {0, 5, 64, 700, 37}, extend = {1, 70, 9, 40, 150};
  for (const auto& [name, page_size] : {std::pair<std::string, int64_t>{"flashinfer_mla", 1},
                                        {"flashinfer_mla", 16},
                                        {"flashmla", 64}}) {
    const std::string label = name + " page " + std::to_string(page_size);
    std::mt19937 rng(31);
    const Config s = mla_config();
    auto requests = random_requests(prefix, extend, {}, s, rng);
    Memory memory(page_size, s, true);
    ForwardBatch batch = causal_batch(memory, requests);
    auto backend = make_paged_backend(name);
    backend->init_forward_metadata(batch);
    const PagedLayer layer = mla_layer(s);
    const Tensor k = pack(requests, &RequestData::k, true);
    const Tensor out =
        backend->forward(pack(requests, &RequestData::q, true), k, latent_values(k), layer, batch);
    expect_close(out, mla_reference(requests, s, kRank), label + " extend");
    for (int step = 0; step < 3; ++step) {
      std::vector<RequestData> steps;
      const ForwardBatch decode =
          decode_step(memory, batch.req_pool_indices, requests, steps, s, s.hq, true, rng);
      backend->init_forward_metadata(decode);
      const Tensor step_k = pack(steps, &RequestData::k, false);
      const Tensor step_out = backend->forward(pack(steps, &RequestData::q, false), step_k,
                                               latent_values(step_k), layer, decode);
      expect_close(step_out, mla_reference(requests, s, kRank),
                   label + " decode step " + std::to_string(step));
    }
  }
}

TEST(LatentAttention, OtherDesignsLayersAndPoolsAreRefused) {
  std::mt19937 rng(32);
  const Config s = mla_config();
  auto requests = random_requests({0}, {10}, {}, s, rng);
  Memory memory(16, s, true);
  ForwardBatch batch = causal_batch(memory, requests);
  const Tensor q = pack(requests, &RequestData::q, true), k = pack(requests, &RequestData::k, true);
  auto triton = make_paged_backend("triton");
  triton->init_forward_metadata(batch);
  std::string message =
      testing::error_message([&] { triton->forward(q, k, latent_values(k), mla_layer(s), batch); });
  EXPECT_NE(message.find("which only flashinfer_mla and flashmla run"), std::string::npos)
      << message;
  auto mla = make_paged_backend("flashinfer_mla");
  mla->init_forward_metadata(batch);
  message = testing::error_message([&] { mla->forward(q, k, k, make_layer(s), batch); });
  EXPECT_NE(message.find("flashinfer_mla runs only models with multi-head latent attention"),
            std::string::npos)
      << message;
  Memory plain_pool(16, s);
  ForwardBatch plain_batch = causal_batch(plain_pool, requests);
  message = testing::error_message(
      [&] { mla->forward(q, k, latent_values(k), mla_layer(s), plain_batch); });
  EXPECT_NE(message.find("needs a keys-only KV pool"), std::string::npos) << message;
  PagedLayer wrong = mla_layer(s);
  wrong.latent.qk_rope_head_dim = 4;
  message = testing::error_message([&] { wrong.validate(); });
  EXPECT_NE(message.find("one KV head of kv_lora_rank + qk_rope_head_dim = 32 + 4"),
            std::string::npos)
      << message;
  // FlashMLA decodes 64-token pages only.
  ForwardBatch decode;
  decode.mode = ForwardMode::Decode;
  decode.req_pool_indices = batch.req_pool_indices;
  decode.seq_lens = {11};
  decode.out_cache_loc = {999};
  decode.req_to_token = &memory.table;
  decode.kv_pool = &memory.pool;
  decode.finish_metadata();
  auto flashmla = make_paged_backend("flashmla");
  message = testing::error_message([&] { flashmla->init_forward_metadata(decode); });
  EXPECT_NE(message.find("FlashMLA reads pages of 64 tokens, this pool's hold 16"),
            std::string::npos)
      << message;
}

// ------------------------------------------------------------------ the runner and its cache

// A toy causal model on the runner: embedding + position rows, two attention layers with random
// projections and residuals; every token's final row is its output (stored as token state).
struct ToyModel {
  int64_t width = 32, heads = 4, kv_heads = 2, head_dim = 8, layers = 2;
  Tensor embedding, positions;
  std::vector<Tensor> wq, wk, wv, wo;
  explicit ToyModel(std::mt19937& rng) {
    embedding = random_tensor({1000, width}, rng);
    positions = random_tensor({1024, width}, rng, 0.5f);
    for (int64_t l = 0; l < layers; ++l) {
      wq.push_back(random_tensor({heads * head_dim, width}, rng, 0.2f));
      wk.push_back(random_tensor({kv_heads * head_dim, width}, rng, 0.2f));
      wv.push_back(random_tensor({kv_heads * head_dim, width}, rng, 0.2f));
      wo.push_back(random_tensor({width, heads * head_dim}, rng, 0.2f));
    }
  }
  PagedModelSpec spec() const {
    return {.num_layers = layers,
            .num_q_heads = heads,
            .num_kv_heads = kv_heads,
            .head_dim = head_dim,
            .scaling = 1.0f / std::sqrt(float(head_dim)),
            .state_width = width};
  }
  // x · wᵀ with every row rounded as if the batch had any other size. ops::linear (Eigen's GEMM)
  // rounds the last (rows mod 4) rows of a batch in another order (its kernel takes result
  // columns four at a time, leftovers one by one), so a token's projection would depend on how
  // many tokens its batch has — with the cache on it has fewer. Projecting a multiple of 4 rows
  // keeps the toy model row-independent, so that the comparison below sees the attention only.
  static Tensor project(const Tensor& x, const Tensor& w) {
    const int64_t rows = x.size(0), padded = (rows + 3) / 4 * 4;
    Tensor in = Tensor::zeros({padded, x.size(1)});
    std::copy(x.data<float>(), x.data<float>() + x.numel(), in.data<float>());
    return ops::linear(in, w).slice(0, 0, rows).contiguous();
  }
  // Runs one forward of the runner's current batch; stores each new token's output row.
  void forward(PagedRunner& runner) const {
    const ForwardBatch& batch = runner.batch();
    Tensor x = Tensor::empty({batch.num_tokens, width});
    for (int64_t t = 0; t < batch.num_tokens; ++t)
      for (int64_t c = 0; c < width; ++c)
        x.data<float>()[t * width + c] =
            embedding.data<float>()[batch.input_ids[size_t(t)] * width + c] +
            positions.data<float>()[batch.positions[size_t(t)] * width + c];
    for (int64_t l = 0; l < layers; ++l) {
      const Tensor o = runner.attention(l, project(x, wq[size_t(l)]), project(x, wk[size_t(l)]),
                                        project(x, wv[size_t(l)]));
      ops::add_(x, project(o.view({batch.num_tokens, heads * head_dim}), wo[size_t(l)]));
    }
    runner.store_token_states(x);
  }
  // Every prompt's rows [len, width], with cached prefix rows read back from the runner.
  std::vector<Tensor> encode(PagedRunner& runner, const std::vector<std::vector<int64_t>>& prompts,
                             std::vector<int64_t>* next = nullptr) const {
    runner.begin_extend(prompts);
    forward(runner);
    std::vector<Tensor> out;
    for (size_t i = 0; i < prompts.size(); ++i)
      out.push_back(runner.request_token_states(int64_t(i)));
    if (next) {  // two decode steps feeding fixed tokens; the last rows are returned
      for (int step = 0; step < 2; ++step) {
        runner.begin_decode(*next);
        forward(runner);
      }
      for (size_t i = 0; i < prompts.size(); ++i)
        out.push_back(runner.request_token_states(int64_t(i)));
    }
    runner.finish();
    return out;
  }
};

std::vector<std::vector<int64_t>> templated_prompts(std::mt19937& rng, int64_t count) {
  std::uniform_int_distribution<int64_t> token(1, 999), length(5, 60);
  std::vector<int64_t> templ;
  for (int i = 0; i < 30; ++i) templ.push_back(token(rng));
  std::vector<std::vector<int64_t>> prompts;
  for (int64_t i = 0; i < count; ++i) {
    std::vector<int64_t> p = templ;
    for (int64_t j = length(rng); j > 0; --j) p.push_back(token(rng));
    prompts.push_back(p);
  }
  return prompts;
}

// With the cache on, torch_native, fa3 and flex_attention give the cold run's results bit for
// bit: every query reads all its keys through one run, in the same tiles and key blocks with or
// without a cached prefix (tile_attention.h). triton and flashinfer cannot, by design: triton's
// extend attends the cached prefix (from the pool) and the new tokens (from the batch) as two
// runs, so the key block that straddles the template's end is split in two steps of the online
// softmax, and flashinfer computes the new tokens and the prefix as two softmaxes merged by
// their LSEs. Both are exact in real arithmetic; in float32 they differ from the cold run by a few
// roundings (2e-7 relative here), so they keep a bound of 1e-6.
TEST(PagedRunner, PrefixCacheGivesTheSameResultsAndHitsTheTemplate) {
  std::mt19937 rng(21);
  const ToyModel model(rng);
  const auto prompts = templated_prompts(rng, 9);
  const std::vector<std::vector<int64_t>> first(prompts.begin(), prompts.begin() + 1);
  const std::vector<std::vector<int64_t>> rest(prompts.begin() + 1, prompts.end());
  std::vector<int64_t> next(rest.size(), 17);
  double worst_overall = 0;
  for (const std::string& name : kBackends)
    for (int64_t page_size : kPageSizes) {
      const std::string label = name + " page " + std::to_string(page_size);
      PagedRunnerOptions off{
          .backend = name, .page_size = page_size, .prefix_cache = false, .pool_tokens = 4096};
      PagedRunnerOptions on = off;
      on.prefix_cache = true;
      PagedRunner plain(model.spec(), off), cached(model.spec(), on);
      model.encode(plain, first);
      model.encode(cached, first);  // warms the cache with the template
      const auto expected = model.encode(plain, rest, &next);
      const auto got = model.encode(cached, rest, &next);
      ASSERT_EQ(got.size(), expected.size());
      double worst = 0, worst_abs = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        worst = std::max(worst, testing::relative_error(got[i], expected[i]));
        worst_abs = std::max(worst_abs, testing::max_abs_diff(got[i], expected[i]));
      }
      if (name == "triton" || name == "flashinfer")
        EXPECT_LT(worst, 1e-6) << label;
      else
        EXPECT_EQ(worst_abs, 0.0) << label;
      const RadixCache::Stats& stats = *cached.cache_stats();
      // Every prompt after the first hits the template's whole pages (none when a page is
      // longer than the 30-token template).
      const int64_t template_pages = 30 / page_size * page_size;
      EXPECT_EQ(stats.hits, template_pages > 0 ? int64_t(rest.size()) : 0) << label;
      EXPECT_EQ(stats.hit_tokens, int64_t(rest.size()) * template_pages) << label;
      worst_overall = std::max(worst_overall, worst);
      // Every page is accounted for: free, or held by the cache.
      EXPECT_EQ(cached.allocator()->available_tokens() + cached.cache()->cached_tokens(),
                cached.allocator()->num_pages() * page_size)
          << label;
      EXPECT_EQ(plain.allocator()->available_pages(), plain.allocator()->num_pages()) << label;
      if (std::getenv("MMGEN_VERBOSE"))
        std::printf("%s: cache on vs off %.3g, %lld hit tokens\n", label.c_str(), worst,
                    static_cast<long long>(stats.hit_tokens));
    }
  std::printf("prefix cache on vs off: worst relative difference %.3g\n", worst_overall);
}

TEST(PagedRunner, EvictsUnderItsTokenBudget) {
  std::mt19937 rng(22);
  const ToyModel model(rng);
  PagedRunner runner(
      model.spec(),
      {.backend = "triton", .page_size = 16, .pool_tokens = 2048, .cache_token_budget = 100});
  for (int round = 0; round < 5; ++round) {
    model.encode(runner, templated_prompts(rng, 3));
    EXPECT_LE(runner.cache()->cached_tokens(), 100);
  }
  EXPECT_GT(runner.cache_stats()->evicted_tokens, 0);
}

TEST(PagedRunner, ReportsAPoolTooSmall) {
  std::mt19937 rng(23);
  const ToyModel model(rng);
  PagedRunner runner(model.spec(), {.backend = "fa3", .page_size = 16, .pool_tokens = 64});
  const std::string message =
      testing::error_message([&] { runner.begin_extend({std::vector<int64_t>(100, 5)}); });
  EXPECT_NE(message.find("cannot hold this batch"), std::string::npos) << message;
  EXPECT_EQ(runner.allocator()->available_pages(), runner.allocator()->num_pages());
}

// ------------------------------------------------------------------ UMT5 on the paged backends

TEST(PagedUMT5, EveryBackendReproducesTransformersLastHiddenState) {
  MMGEN_REQUIRE_SHARED();
  const fs::path wan_tiny = testing::shared_dir() / "fixtures" / "wan-tiny";
  const SafetensorsFile ref =
      SafetensorsFile::open(wan_tiny / "reference" / "reference.safetensors");
  text_encoders::UMT5Encoder encoder =
      text_encoders::UMT5Encoder::from_folder(wan_tiny / "model" / "text_encoder");
  const Tensor expected = ref.tensor("text_encoder.last_hidden_state");
  for (const std::string& name : kBackends)
    for (int64_t page_size : kPageSizes) {
      encoder.set_attention_backend(name, page_size);
      const Tensor hidden = encoder.forward(ref.tensor("text_encoder.input_ids"),
                                            ref.tensor("text_encoder.attention_mask"));
      ASSERT_EQ(hidden.shape(), expected.shape());
      const double error = testing::relative_error(hidden, expected);
      std::printf("UMT5 %s page %lld: relative error %.3g\n", name.c_str(),
                  static_cast<long long>(page_size), error);
      EXPECT_LT(error, 1e-5) << name << " page " << page_size;
    }
}

TEST(PagedUMT5, UnpaddedPromptsGiveTheRealRows) {
  MMGEN_REQUIRE_SHARED();
  const fs::path wan_tiny = testing::shared_dir() / "fixtures" / "wan-tiny";
  const SafetensorsFile ref =
      SafetensorsFile::open(wan_tiny / "reference" / "reference.safetensors");
  const text_encoders::UMT5Encoder encoder =
      text_encoders::UMT5Encoder::from_folder(wan_tiny / "model" / "text_encoder");
  const Tensor ids = ref.tensor("text_encoder.input_ids").to(DType::I64);
  const Tensor mask = ref.tensor("text_encoder.attention_mask").to(DType::I64);
  const Tensor expected = ref.tensor("text_encoder.last_hidden_state");
  std::vector<std::vector<int64_t>> prompts;
  for (int64_t b = 0; b < ids.size(0); ++b) {
    std::vector<int64_t> prompt;
    for (int64_t j = 0; j < ids.size(1) && mask.data<int64_t>()[b * ids.size(1) + j]; ++j)
      prompt.push_back(ids.data<int64_t>()[b * ids.size(1) + j]);
    prompts.push_back(prompt);
  }
  const std::vector<Tensor> hidden = encoder.forward_unpadded(prompts);
  ASSERT_EQ(hidden.size(), prompts.size());
  for (size_t b = 0; b < prompts.size(); ++b) {
    const int64_t n = int64_t(prompts[b].size());
    const Tensor rows = expected.select(0, int64_t(b)).slice(0, 0, n).contiguous();
    EXPECT_LT(testing::relative_error(hidden[b], rows), 1e-5) << "prompt " << b;
  }
}

}  // namespace
}  // namespace mmgen::attention::paged
