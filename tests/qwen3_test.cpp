// The Qwen3 text encoder against transformers (qwen3-tiny fixture): hidden_states[-2] (Z-Image's
// prompt embedding) and the final hidden state at the real tokens, the chat template and ids, and
// greedy decoding through the LM head (ids and first logits). Plus the dense causal attention
// against a naive reference (GQA, sliding window, cached prefixes).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "attention/catalogue.h"
#include "attention/paged/paged_backend.h"
#include "core/error.h"
#include "core/file.h"
#include "core/safetensors.h"
#include "models/text_encoders/qwen3_attention.h"
#include "models/text_encoders/qwen3_config.h"
#include "models/text_encoders/qwen3_decode.h"
#include "models/text_encoders/qwen3_model.h"
#include "models/text_encoders/qwen3_paged.h"
#include "models/text_encoders/qwen3_prompt_embedding.h"
#include "tests/test_support.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace mmgen::text_encoders {
namespace {

using json = nlohmann::json;

fs::path qwen3_tiny() {
  return testing::shared_dir() / "fixtures" / "qwen3-tiny";
}
fs::path encoder_folder() {
  return qwen3_tiny() / "model" / "text_encoder";
}
SafetensorsFile reference() {
  return SafetensorsFile::open(qwen3_tiny() / "reference" / "reference.safetensors");
}
json reference_json() {
  return json::parse(read_text_file(qwen3_tiny() / "reference" / "reference.json"));
}
// The ids the reference ran: the templated prompt's ids cut to max_length (the real tokens of
// the padded batch; prompts 6 and 7 are longer than the fixture's 48).
std::vector<int64_t> ids_of(const json& prompt) {
  std::vector<int64_t> ids = prompt["padded_ids"].get<std::vector<int64_t>>();
  const auto mask = prompt["attention_mask"].get<std::vector<int64_t>>();
  ids.resize(size_t(std::count(mask.begin(), mask.end(), int64_t(1))));
  return ids;
}
// Rows [0, length) of reference tensor `name`'s batch row `row`.
Tensor reference_rows(const SafetensorsFile& ref, const std::string& name, int64_t row,
                      int64_t length) {
  return ref.tensor(name).select(0, row).slice(0, 0, length).contiguous();
}

Tensor random_tensor(const Shape& shape, std::mt19937& rng) {
  std::normal_distribution<float> normal;
  std::vector<float> values(size_t(shape_numel(shape)));
  for (float& value : values) value = normal(rng);
  return Tensor::from_vector(shape, values);
}

TEST(Qwen3Config, ReadsTheFixtureConfig) {
  MMGEN_REQUIRE_SHARED();
  const Qwen3Config config = Qwen3Config::from_file(encoder_folder() / "config.json");
  EXPECT_EQ(config.vocab_size, 567);
  EXPECT_EQ(config.hidden_size, 64);
  EXPECT_EQ(config.intermediate_size, 128);
  EXPECT_EQ(config.num_hidden_layers, 3);
  EXPECT_EQ(config.num_attention_heads, 4);
  EXPECT_EQ(config.num_key_value_heads, 2);
  EXPECT_EQ(config.head_dim, 16);
  EXPECT_DOUBLE_EQ(config.rope_theta, 1e6);
  EXPECT_EQ(config.rope_type, "default");
  EXPECT_FLOAT_EQ(config.rms_norm_eps, 1e-6f);
  EXPECT_FALSE(config.tie_word_embeddings);
  EXPECT_EQ(config.layer_windows, std::vector<int64_t>(3, 0));
}

TEST(Qwen3Config, OmittedKeysTakeTransformersDefaults) {
  const Qwen3Config config = Qwen3Config::from_json(json::parse(R"({"num_attention_heads": 8})"));
  EXPECT_EQ(config.vocab_size, 151936);
  EXPECT_EQ(config.hidden_size, 4096);
  EXPECT_EQ(config.intermediate_size, 22016);
  EXPECT_EQ(config.num_hidden_layers, 32);
  EXPECT_EQ(config.num_key_value_heads, 8);  // defaults to num_attention_heads
  EXPECT_EQ(config.head_dim, 128);
  EXPECT_DOUBLE_EQ(config.rope_theta, 10000.0);
  EXPECT_EQ(config.max_position_embeddings, 32768);
  EXPECT_EQ(config.layer_windows, std::vector<int64_t>(32, 0));

  // v4 spelling: top-level rope_theta and rope_scaling.
  const Qwen3Config v4 = Qwen3Config::from_json(
      json::parse(R"({"rope_theta": 5e5, "rope_scaling": {"type": "linear", "factor": 4.0}})"));
  EXPECT_DOUBLE_EQ(v4.rope_theta, 5e5);
  EXPECT_EQ(v4.rope_type, "linear");
  EXPECT_DOUBLE_EQ(v4.rope_factor, 4.0);

  // Sliding window: only with use_sliding_window, from max_window_layers on.
  const Qwen3Config windowed = Qwen3Config::from_json(json::parse(
      R"({"num_hidden_layers": 4, "use_sliding_window": true, "sliding_window": 7,
          "max_window_layers": 2})"));
  EXPECT_EQ(windowed.layer_windows, (std::vector<int64_t>{0, 0, 7, 7}));
  const Qwen3Config off = Qwen3Config::from_json(
      json::parse(R"({"num_hidden_layers": 4, "sliding_window": 7, "max_window_layers": 0})"));
  EXPECT_EQ(off.layer_windows, std::vector<int64_t>(4, 0));
}

TEST(Qwen3Config, RejectsWhatItDoesNotSupport) {
  auto error = [](const char* text) {
    return testing::error_message(
        [&] { Qwen3Config::from_json(json::parse(text), "x/config.json"); });
  };
  EXPECT_NE(error(R"({"rope_parameters": {"rope_type": "yarn", "factor": 4}})")
                .find("RoPE type \"yarn\" is not supported"),
            std::string::npos);
  EXPECT_NE(error(R"({"rope_scaling": {"type": "dynamic"}})").find("not supported"),
            std::string::npos);
  EXPECT_NE(error(R"({"model_type": "llama"})").find("not a Qwen3"), std::string::npos);
  EXPECT_NE(error(R"({"hidden_act": "gelu"})").find("hidden_act"), std::string::npos);
  EXPECT_NE(error(R"({"num_attention_heads": 6, "num_key_value_heads": 4})").find("multiple"),
            std::string::npos);
  EXPECT_NE(error(R"({"hidden_size": 0})").find("x/config.json"), std::string::npos);
  EXPECT_NE(error(R"({"num_hidden_layers": 2, "layer_types": ["full_attention",
      "sliding_attention"]})")
                .find("use_sliding_window"),
            std::string::npos);
}

// qwen3-tiny's tokenizer folder has no chat template; its reference prompts were rendered with
// Qwen3's, the template zimage-tiny's tokenizer folder holds (a folder without one is refused:
// chat_template_test.cpp).
TEST(Qwen3ChatTemplate, MatchesTheFixtureTemplatedTextAndIds) {
  MMGEN_REQUIRE_SHARED();
  const json ref = reference_json();
  const auto tokenizer = tokenizers::Tokenizer::load(qwen3_tiny() / "model" / "tokenizer");
  const auto chat = tokenizers::ChatTemplate::load(testing::shared_dir() / "fixtures" /
                                                   "zimage-tiny" / "model" / "tokenizer");
  std::vector<std::string> prompts;
  for (const json& prompt : ref["prompts"]) {
    const std::string text = prompt["prompt"].get<std::string>();
    EXPECT_EQ(chat.render_prompt(text), prompt["templated"].get<std::string>()) << text;
    prompts.push_back(text);
  }
  const auto ids = z_image_prompt_ids(*tokenizer, chat, prompts, ref["max_length"].get<int64_t>());
  const auto whole = z_image_prompt_ids(*tokenizer, chat, prompts, 4096);
  ASSERT_EQ(ids.size(), ref["prompts"].size());
  for (size_t i = 0; i < ids.size(); ++i) {
    EXPECT_EQ(ids[i], ids_of(ref["prompts"][i])) << i;
    EXPECT_EQ(whole[i], ref["prompts"][i]["ids"].get<std::vector<int64_t>>()) << i;
  }
  // Truncation keeps the first max_sequence_length ids.
  const auto cut = z_image_prompt_ids(*tokenizer, chat, {prompts[0]}, 5);
  EXPECT_EQ(cut[0], std::vector<int64_t>(ids[0].begin(), ids[0].begin() + 5));
}

// Each prompt alone and unpadded: the fixture's padded-batch rows at real positions equal this.
TEST(Qwen3TextModel, HiddenStatesMatchTransformersAtTheRealTokens) {
  MMGEN_REQUIRE_SHARED();
  const json ref = reference_json();
  const SafetensorsFile tensors = reference();
  const Qwen3TextModel model = Qwen3TextModel::from_folder(encoder_folder());
  double worst_minus2 = 0, worst_last = 0;
  for (size_t i = 0; i < ref["prompts"].size(); ++i) {
    const std::vector<int64_t> ids = ids_of(ref["prompts"][i]);
    const int64_t length = int64_t(ids.size());
    const double minus2 = testing::relative_error(
        model.hidden_state(ids, -2),
        reference_rows(tensors, "encoder.hidden_states_minus2", int64_t(i), length));
    const double last = testing::relative_error(
        model.hidden_state(ids, -1),
        reference_rows(tensors, "encoder.hidden_states_last", int64_t(i), length));
    std::printf("prompt %zu (%lld tokens): hidden_states[-2] %.3g, last %.3g\n", i,
                static_cast<long long>(length), minus2, last);
    EXPECT_LT(minus2, 1e-5) << i;
    EXPECT_LT(last, 1e-5) << i;
    worst_minus2 = std::max(worst_minus2, minus2);
    worst_last = std::max(worst_last, last);
  }
  std::printf("worst relative error: hidden_states[-2] %.3g, hidden_states[-1] %.3g\n",
              worst_minus2, worst_last);
}

// All prompts in one ragged packed forward give the same rows as one at a time.
TEST(Qwen3TextModel, PackedBatchEqualsOnePromptAtATime) {
  MMGEN_REQUIRE_SHARED();
  const json ref = reference_json();
  const SafetensorsFile tensors = reference();
  const Qwen3TextModel model = Qwen3TextModel::from_folder(encoder_folder());
  std::vector<std::vector<int64_t>> ids;
  for (const json& prompt : ref["prompts"]) ids.push_back(ids_of(prompt));
  const std::vector<Tensor> embeddings = encode_hidden_states_minus2(model, ids);
  ASSERT_EQ(embeddings.size(), ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    const Tensor alone = model.hidden_state(ids[i], -2);
    EXPECT_LT(testing::max_abs_diff(embeddings[i], alone), 1e-6) << i;
    const double error = testing::relative_error(
        embeddings[i], reference_rows(tensors, "encoder.hidden_states_minus2", int64_t(i),
                                      int64_t(ids[i].size())));
    EXPECT_LT(error, 1e-5) << i;
  }
}

TEST(Qwen3Decode, GreedyIdsAndFirstLogitsMatchTransformers) {
  MMGEN_REQUIRE_SHARED();
  const json ref = reference_json();
  const SafetensorsFile tensors = reference();
  const Qwen3TextModel model = Qwen3TextModel::from_folder(encoder_folder());
  ASSERT_TRUE(model.has_lm_head());
  for (size_t i = 0; i < 3; ++i) {
    const json& prompt = ref["prompts"][i];
    const auto expected = prompt["greedy_new_ids"].get<std::vector<int64_t>>();
    const GreedyDecodeResult result =
        greedy_decode(model, ids_of(prompt), int64_t(expected.size()));
    EXPECT_EQ(result.new_ids, expected) << i;
    const double error = testing::relative_error(
        result.first_logits, tensors.tensor("decode.logits_first" + std::to_string(i)));
    std::printf("prompt %zu: greedy ids %s, first logits relative error %.3g\n", i,
                result.new_ids == expected ? "exact" : "DIFFER", error);
    EXPECT_LT(error, 1e-5) << i;
  }
}

// Decoding with the KV cache gives the logits a full recompute gives at every step.
TEST(Qwen3Decode, CachedStepsEqualFullRecompute) {
  MMGEN_REQUIRE_SHARED();
  const json ref = reference_json();
  const Qwen3TextModel model = Qwen3TextModel::from_folder(encoder_folder());
  std::vector<int64_t> ids = ids_of(ref["prompts"][0]);
  const GreedyDecodeResult result = greedy_decode(model, ids, 6);
  for (int64_t next : result.new_ids) {
    const Tensor last = model.hidden_state(ids, -1);
    const Tensor logits =
        model.logits(last.slice(0, last.size(0) - 1, last.size(0)).contiguous()).view({-1});
    const float* values = logits.data<float>();
    EXPECT_EQ(std::max_element(values, values + logits.numel()) - values, next);
    ids.push_back(next);
  }
}

TEST(Qwen3Decode, StopsAtAStopToken) {
  MMGEN_REQUIRE_SHARED();
  const json ref = reference_json();
  const Qwen3TextModel model = Qwen3TextModel::from_folder(encoder_folder());
  const auto expected = ref["prompts"][2]["greedy_new_ids"].get<std::vector<int64_t>>();
  const GreedyDecodeResult result = greedy_decode(model, ids_of(ref["prompts"][2]), 8, {457});
  EXPECT_EQ(result.new_ids, std::vector<int64_t>(expected.begin(), expected.begin() + 3));
}

// A bare Qwen3Model checkpoint (Z-Image's text_encoder): no `model.` prefix and no LM head.
TEST(Qwen3TextModel, LoadsABareQwen3ModelCheckpoint) {
  MMGEN_REQUIRE_SHARED();
  const WeightStore weights = WeightStore::open_folder(encoder_folder());
  NamedTensors bare;
  for (const std::string& name : weights.names()) {
    if (name == "lm_head.weight") continue;
    ASSERT_EQ(name.rfind("model.", 0), 0u) << name;
    bare.emplace_back(name.substr(6), weights.get(name).to(DType::BF16));
  }
  const fs::path folder = testing::scratch_dir("qwen3_bare");
  write_safetensors(folder / "model.safetensors", bare);
  const Qwen3Config config = Qwen3Config::from_file(encoder_folder() / "config.json");
  const Qwen3TextModel model(config, WeightStore::open_folder(folder));
  EXPECT_FALSE(model.has_lm_head());
  const Qwen3TextModel reference_model = Qwen3TextModel::from_folder(encoder_folder());
  const std::vector<int64_t> ids = ids_of(reference_json()["prompts"][0]);
  // bf16 weights: close to the float32 model, not equal.
  EXPECT_LT(
      testing::relative_error(model.hidden_state(ids, -2), reference_model.hidden_state(ids, -2)),
      2e-2);
  EXPECT_NE(testing::error_message([&] { greedy_decode(model, ids, 2); }).find("no lm_head"),
            std::string::npos);
}

TEST(Qwen3TextModel, RejectsMismatchedCheckpointsAndIds) {
  MMGEN_REQUIRE_SHARED();
  Qwen3Config config = Qwen3Config::from_file(encoder_folder() / "config.json");
  config.intermediate_size = 96;
  EXPECT_NE(testing::error_message([&] {
              Qwen3TextModel(config, WeightStore::open_folder(encoder_folder()));
            }).find("mlp.gate_proj.weight"),
            std::string::npos);
  const Qwen3TextModel model = Qwen3TextModel::from_folder(encoder_folder());
  EXPECT_NE(testing::error_message([&] {
              model.hidden_state({1, 567}, -2);
            }).find("token id 567"),
            std::string::npos);
}

// set_device on the CPU maps the weights again (the same numbers); float32 on the GPU is refused
// before anything moves, and so is the GPU itself in a build without CUDA (tests/cuda/
// qwen3_encoder_cuda_test runs the GPU).
TEST(Qwen3TextModel, SetDeviceKeepsTheCpuNumbersAndRefusesWhatItCannotRun) {
  MMGEN_REQUIRE_SHARED();
  const Qwen3TextModel model = Qwen3TextModel::from_folder(encoder_folder());
  const std::vector<int64_t> ids = ids_of(reference_json()["prompts"][1]);
  Qwen3TextModel moved = model;
  moved.set_device(Device::CPU);
  EXPECT_EQ(moved.device(), Device::CPU);
  EXPECT_EQ(moved.compute_dtype(), DType::F32);
  EXPECT_EQ(moved.resident_weight_bytes(), 0u);
  EXPECT_EQ(testing::max_abs_diff(moved.hidden_state(ids, -2), model.hidden_state(ids, -2)), 0.0);
  EXPECT_NE(testing::error_message([&] {
              moved.set_device(Device::CUDA, DType::F32);
            }).find("bf16 on the GPU"),
            std::string::npos);
  EXPECT_EQ(moved.device(), Device::CPU);
#ifndef MMGEN_HAVE_CUDA
  EXPECT_FALSE(testing::error_message([&] { moved.set_device(Device::CUDA); }).empty());
  EXPECT_EQ(moved.device(), Device::CPU);
  EXPECT_EQ(testing::max_abs_diff(moved.hidden_state(ids, -2), model.hidden_state(ids, -2)), 0.0);
  attention::paged::PagedRunnerOptions gpu;
  gpu.device = Device::CUDA;
  gpu.backend = "fa3";
  gpu.pool_tokens = 64;
  EXPECT_NE(testing::error_message([&] {
              attention::paged::PagedRunner(qwen3_paged_spec(model.config(), 2, 0), gpu);
            }).find("no CUDA support"),
            std::string::npos);
#endif
}

// The naive reference: every query against every visible key, in double.
Tensor naive_causal(const Tensor& q, const Tensor& k, const Tensor& v,
                    const std::vector<int64_t>& lengths, float scale, int64_t window) {
  const int64_t q_heads = q.size(1), kv_heads = k.size(1), dim = q.size(2);
  Tensor out = Tensor::zeros(q.shape());
  int64_t start = 0;
  for (int64_t length : lengths) {
    for (int64_t i = 0; i < length; ++i)
      for (int64_t h = 0; h < q_heads; ++h) {
        const int64_t kh = h / (q_heads / kv_heads);
        std::vector<double> weights;
        double max_score = -1e300;
        const int64_t first = window > 0 ? std::max<int64_t>(0, i - window + 1) : 0;
        for (int64_t j = first; j <= i; ++j) {
          double s = 0;
          for (int64_t d = 0; d < dim; ++d)
            s += double(q.item_f32({start + i, h, d})) * k.item_f32({start + j, kh, d});
          weights.push_back(s * scale);
          max_score = std::max(max_score, s * scale);
        }
        double sum = 0;
        for (double& w : weights) sum += (w = std::exp(w - max_score));
        for (int64_t d = 0; d < dim; ++d) {
          double acc = 0;
          for (int64_t j = first; j <= i; ++j)
            acc += weights[size_t(j - first)] / sum * v.item_f32({start + j, kh, d});
          out.data<float>()[((start + i) * q_heads + h) * dim + d] = float(acc);
        }
      }
    start += length;
  }
  return out;
}

TEST(DenseCausalAttention, MatchesANaiveReferenceWithGqaAndWindows) {
  std::mt19937 rng(7);
  const std::vector<int64_t> lengths = {5, 70, 1, 33};
  int64_t total = 0;
  for (int64_t length : lengths) total += length;
  const Tensor q = random_tensor({total, 6, 8}, rng);
  const Tensor k = random_tensor({total, 2, 8}, rng);
  const Tensor v = random_tensor({total, 2, 8}, rng);
  for (int64_t window : {int64_t(0), int64_t(1), int64_t(9)}) {
    DenseCausalAttention attention(1, 2, 8, /*keep_kv=*/false);
    attention.begin_forward(CausalBatch::fresh(lengths));
    const Tensor ours = attention.attend(0, q, k, v, 0.3f, window);
    EXPECT_LT(testing::relative_error(ours, naive_causal(q, k, v, lengths, 0.3f, window)), 1e-6)
        << "window " << window;
  }
}

// A prefix extended later (a second forward reading the cache) equals one forward over it all.
TEST(DenseCausalAttention, ExtendingACachedPrefixEqualsOneForward) {
  std::mt19937 rng(11);
  const std::vector<int64_t> lengths = {40, 90};
  const Tensor q = random_tensor({130, 4, 8}, rng);
  const Tensor k = random_tensor({130, 2, 8}, rng);
  const Tensor v = random_tensor({130, 2, 8}, rng);
  for (int64_t window : {int64_t(0), int64_t(17)}) {
    DenseCausalAttention whole(1, 2, 8, /*keep_kv=*/false);
    whole.begin_forward(CausalBatch::fresh(lengths));
    const Tensor expected = whole.attend(0, q, k, v, 0.25f, window);

    // First forward: 30 and 10 tokens; second: the remaining 10 and 80.
    auto pick = [](const Tensor& x, const std::vector<std::pair<int64_t, int64_t>>& ranges) {
      std::vector<Tensor> parts;
      int64_t rows = 0;
      for (auto [begin, end] : ranges) rows += end - begin;
      Shape shape = x.shape();
      shape[0] = rows;
      Tensor out = Tensor::empty(shape);
      int64_t at = 0;
      for (auto [begin, end] : ranges) {
        out.slice(0, at, at + end - begin).copy_from(x.slice(0, begin, end));
        at += end - begin;
      }
      return out;
    };
    const std::vector<std::pair<int64_t, int64_t>> first = {{0, 30}, {40, 50}};
    const std::vector<std::pair<int64_t, int64_t>> second = {{30, 40}, {50, 130}};
    DenseCausalAttention cached(1, 2, 8, /*keep_kv=*/true);
    cached.begin_forward(CausalBatch{{0, 0}, {30, 10}});
    const Tensor part1 =
        cached.attend(0, pick(q, first), pick(k, first), pick(v, first), 0.25f, window);
    cached.begin_forward(CausalBatch{{30, 10}, {10, 80}});
    const Tensor part2 =
        cached.attend(0, pick(q, second), pick(k, second), pick(v, second), 0.25f, window);
    EXPECT_LT(testing::max_abs_diff(part1, pick(expected, first)), 1e-6);
    EXPECT_LT(testing::max_abs_diff(part2, pick(expected, second)), 1e-6);
    EXPECT_EQ(cached.cached_tokens(1), 90);
  }
  DenseCausalAttention cache(1, 2, 8, true);
  EXPECT_NE(testing::error_message([&] {
              cache.begin_forward(CausalBatch{{3}, {1}});
            }).find("holds 0"),
            std::string::npos);
}

// ---------------------------------------------------------------- paged backends

attention::paged::PagedRunnerOptions paged_options(std::string_view backend, int64_t page_size,
                                                   bool prefix_cache) {
  attention::paged::PagedRunnerOptions options;
  options.backend = std::string(backend);
  options.page_size = page_size;
  options.prefix_cache = prefix_cache;
  options.pool_tokens = 4096;
  options.max_context_len = 512;
  return options;
}

// Every backend × page size × cache on/off gives the dense rows (and so the reference's), and
// with the cache on every prompt after the first hits the chat template's shared prefix.
TEST(Qwen3Paged, EncoderMatchesDenseOnEveryBackendPageSizeAndCacheSetting) {
  MMGEN_REQUIRE_SHARED();
  const json ref = reference_json();
  const SafetensorsFile tensors = reference();
  const Qwen3TextModel model = Qwen3TextModel::from_folder(encoder_folder());
  std::vector<std::vector<int64_t>> ids;
  for (const json& prompt : ref["prompts"]) ids.push_back(ids_of(prompt));
  ids.push_back(ids[0]);  // a repeated prompt: all but its last token come from the cache
  const std::vector<Tensor> dense = encode_hidden_states_minus2(model, ids);
  double worst_reference = 0, worst_dense = 0;
  for (std::string_view backend : attention::paged_backends_for(
           attention::paged::cpu_paged_backends(), attention::ModelAttention::Plain))
    for (int64_t page_size : {1, 16, 64})
      for (bool cache : {false, true}) {
        Qwen3PagedEncoder encoder(model, paged_options(backend, page_size, cache));
        const std::vector<Tensor> rows = encoder.encode(ids);
        ASSERT_EQ(rows.size(), ids.size());
        for (size_t i = 0; i < ids.size(); ++i) {
          const double to_dense = testing::relative_error(rows[i], dense[i]);
          const size_t r = i < 8 ? i : 0;
          const double to_reference = testing::relative_error(
              rows[i], reference_rows(tensors, "encoder.hidden_states_minus2", int64_t(r),
                                      int64_t(ids[i].size())));
          EXPECT_LT(to_dense, 1e-6) << backend << " page " << page_size << " prompt " << i;
          EXPECT_LT(to_reference, 1e-5) << backend << " page " << page_size << " prompt " << i;
          worst_dense = std::max(worst_dense, to_dense);
          worst_reference = std::max(worst_reference, to_reference);
        }
        const PrefixCacheReport& report = encoder.report();
        if (!cache) {
          EXPECT_EQ(report.hit_tokens, 0);
          continue;
        }
        // The template's "<|im_start|>user\n" (3 tokens) is shared by all; whole pages only.
        if (page_size == 1) {
          EXPECT_EQ(report.prompts_hit, int64_t(ids.size()) - 1) << backend;
        }
        // The repeated prompt reuses its whole-page prefix, capped at length − 1.
        const int64_t repeat = (int64_t(ids[0].size()) - 1) / page_size * page_size;
        EXPECT_GE(report.hit_tokens, repeat) << backend << " page " << page_size;
        std::printf("%-14s page %2lld cache: %lld of %lld prompt tokens from the cache\n",
                    std::string(backend).c_str(), static_cast<long long>(page_size),
                    static_cast<long long>(report.hit_tokens),
                    static_cast<long long>(report.prompt_tokens));
      }
  std::printf("paged encoder worst relative error: vs dense %.3g, vs transformers %.3g\n",
              worst_dense, worst_reference);
}

// Several encode calls on one encoder: the second call's prompts all hit the cache.
TEST(Qwen3Paged, CacheCarriesAcrossCalls) {
  MMGEN_REQUIRE_SHARED();
  const json ref = reference_json();
  const Qwen3TextModel model = Qwen3TextModel::from_folder(encoder_folder());
  std::vector<std::vector<int64_t>> ids;
  for (const json& prompt : ref["prompts"]) ids.push_back(ids_of(prompt));
  Qwen3PagedEncoder encoder(model, paged_options("triton", 1, true));
  const std::vector<Tensor> first = encoder.encode(ids);
  const int64_t hits_before = encoder.report().hit_tokens;
  const std::vector<Tensor> second = encoder.encode(ids);
  // The cached rows come back bit for bit; the last token is recomputed over the cached prefix,
  // equal to rounding only: triton's two-stage extend attends the prefix (from the pool) and the
  // new token as two runs, and the projections (Eigen's GEMM) round a row by where it falls in
  // its batch (the last rows mod 4, and a blocking that changes with the batch's size), here one
  // token per prompt instead of whole prompts.
  for (size_t i = 0; i < ids.size(); ++i) {
    const int64_t length = int64_t(ids[i].size());
    EXPECT_EQ(testing::max_abs_diff(first[i].slice(0, 0, length - 1).contiguous(),
                                    second[i].slice(0, 0, length - 1).contiguous()),
              0.0)
        << i;
    EXPECT_LT(testing::relative_error(second[i], first[i]), 1e-6) << i;
  }
  int64_t expected = 0;
  for (const auto& sequence : ids) expected += int64_t(sequence.size()) - 1;
  EXPECT_EQ(encoder.report().hit_tokens - hits_before, expected);
}

TEST(Qwen3Paged, GreedyDecodeMatchesTransformersOnEveryBackend) {
  MMGEN_REQUIRE_SHARED();
  const json ref = reference_json();
  const SafetensorsFile tensors = reference();
  const Qwen3TextModel model = Qwen3TextModel::from_folder(encoder_folder());
  for (std::string_view backend : attention::paged_backends_for(
           attention::paged::cpu_paged_backends(), attention::ModelAttention::Plain))
    for (int64_t page_size : {1, 16})
      for (bool cache : {false, true}) {
        Qwen3PagedDecoder decoder(model, paged_options(backend, page_size, cache));
        for (int pass = 0; pass < (cache ? 2 : 1); ++pass)  // the second on a warm cache
          for (size_t i = 0; i < 3; ++i) {
            const json& prompt = ref["prompts"][i];
            const auto expected = prompt["greedy_new_ids"].get<std::vector<int64_t>>();
            const GreedyDecodeResult result =
                decoder.greedy_decode(ids_of(prompt), int64_t(expected.size()));
            EXPECT_EQ(result.new_ids, expected) << backend << " page " << page_size << " " << i;
            EXPECT_LT(
                testing::relative_error(result.first_logits,
                                        tensors.tensor("decode.logits_first" + std::to_string(i))),
                1e-5)
                << backend << " page " << page_size << " prompt " << i;
          }
      }
}

// ---------------------------------------------------------------- dual chunk attention

// The fixture's config with a dual_chunk_attention_config (SGLang's keys).
Qwen3Config dual_chunk_config(int64_t chunk_size, int64_t local_size, int64_t original) {
  json object = json::parse(read_text_file(encoder_folder() / "config.json"));
  object["dual_chunk_attention_config"] = {{"chunk_size", chunk_size},
                                           {"local_size", local_size},
                                           {"original_max_position_embeddings", original}};
  return Qwen3Config::from_json(object);
}

// hidden_states[-2] against tests/data/qwen3_dual_chunk (make.py: a float64 NumPy forward of this
// fixture with SGLang's dual chunk rotation and attention, whose plain forward matches
// transformers to 2.5e-7): 43 tokens in chunks of 7, the length scale on. Through hidden_state
// (a paged runner, dual_chunk_flash_attn by default) and through the prompt encoder, uncached and
// over a cached prefix.
TEST(Qwen3DualChunk, HiddenStatesMatchTheNumPyReference) {
  MMGEN_REQUIRE_SHARED();
  const SafetensorsFile ref = SafetensorsFile::open(
      testing::source_dir() / "tests/data/qwen3_dual_chunk/reference.safetensors");
  const Tensor id_tensor = ref.tensor("input_ids");
  std::vector<int64_t> ids(size_t(id_tensor.numel()));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = id_tensor.data<int64_t>()[i];
  const Tensor expected = ref.tensor("hidden_states_minus2");
  const Qwen3TextModel model(dual_chunk_config(10, 3, 16),
                             WeightStore::open_folder(encoder_folder()));
  const double error = testing::relative_error(model.hidden_state(ids, -2), expected);
  EXPECT_LT(error, 1e-5);
  std::printf("dual chunk hidden_states[-2] vs the NumPy reference: relative error %.2e\n", error);
  for (bool cache : {false, true}) {
    Qwen3PagedEncoder encoder(model, paged_options("", 16, cache));
    const std::vector<std::vector<int64_t>> prompts = {
        ids, std::vector<int64_t>(ids.begin(), ids.begin() + 30), ids};
    const std::vector<Tensor> rows = encoder.encode(prompts);
    EXPECT_LT(testing::relative_error(rows[0], expected), 1e-5) << "cache " << cache;
    EXPECT_LT(testing::relative_error(rows[2], expected), 1e-5) << "cache " << cache;
    if (cache) {
      EXPECT_GT(encoder.report().hit_tokens, 0);
    }
  }
  // The plain model differs: the test sees the chunks.
  const Qwen3TextModel plain = Qwen3TextModel::from_folder(encoder_folder());
  EXPECT_GT(testing::relative_error(plain.hidden_state(ids, -2), expected), 0.1);
}

// Chunks longer than the prompt: every key is in the query's own chunk, rotated at its own
// position, so dual chunk attention is the plain model.
TEST(Qwen3DualChunk, ChunksLongerThanThePromptGiveThePlainModel) {
  MMGEN_REQUIRE_SHARED();
  const Qwen3TextModel dual(dual_chunk_config(8192, 1024, 0),
                            WeightStore::open_folder(encoder_folder()));
  const Qwen3TextModel plain = Qwen3TextModel::from_folder(encoder_folder());
  const std::vector<int64_t> ids = ids_of(reference_json()["prompts"][2]);
  EXPECT_LT(testing::relative_error(dual.hidden_state(ids, -2), plain.hidden_state(ids, -2)), 1e-6);
}

TEST(Qwen3DualChunk, RefusesWhatItCannotRun) {
  MMGEN_REQUIRE_SHARED();
  EXPECT_NE(testing::error_message([] {
              dual_chunk_config(8, 8, 0);
            }).find("dual_chunk_attention_config: local_size 8 must be below chunk_size 8"),
            std::string::npos);
  json windows = json::parse(read_text_file(encoder_folder() / "config.json"));
  windows["use_sliding_window"] = true;
  windows["sliding_window"] = 16;
  windows.erase("layer_types");
  windows["max_window_layers"] = 0;
  windows["dual_chunk_attention_config"] = {{"chunk_size", 32}, {"local_size", 8}};
  EXPECT_NE(testing::error_message([&] {
              Qwen3Config::from_json(windows);
            }).find("dual chunk attention with sliding-window layers is not supported"),
            std::string::npos);
  const Qwen3TextModel model(dual_chunk_config(10, 3, 0),
                             WeightStore::open_folder(encoder_folder()));
  EXPECT_NE(testing::error_message([&] {
              model.dense_attention(false);
            }).find("runs on the paged backend dual_chunk_flash_attn"),
            std::string::npos);
  Qwen3PagedEncoder triton(model, paged_options("triton", 1, false));
  EXPECT_NE(testing::error_message([&] {
              triton.encode({{1, 2, 3}});
            }).find("which only dual_chunk_flash_attn runs"),
            std::string::npos);
}

}  // namespace
}  // namespace mmgen::text_encoders
