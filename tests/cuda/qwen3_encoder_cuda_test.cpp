// The Qwen3 text encoder placed on the GPU (one class: Qwen3TextModel::set_device) against
// transformers' float32 references: the qwen3-tiny fixture's hidden_states[-2] / [-1] and first
// decode logits, and zimage-tiny's prompt embeddings through encode_qwen3_prompts (Z-Image's
// path), on every GPU paged backend, page sizes 1 and 16, prefix cache off and on.
//
// Tolerances. The GPU rounds the float32 checkpoint's weights to bf16 and every product's input
// to bf16 (relative rounding 2^-9 ≈ 2e-3 each, q/k/v once more for the bf16 KV pool); a row's
// relative error is a few such roundings through 2 layers, which the UMT5 test measured at
// 3-4e-3 per component for width 32 and below 1e-2 end to end. Qwen3-tiny is narrower (hidden
// 64, head 16: little averaging) and its q/k RMSNorm rescales each head's rounded product, so the
// bound is 2e-2 against the references (a wrong op, RoPE layout or KV slot gives O(1)). Between
// two GPU runs (cache on vs off, backend vs backend) the weights and roundings are the same and
// only the summation order differs (attention tiles over a cached prefix, a product's algorithm
// for another row count), flipping a few bf16 roundings: 5e-3. The rotate-half op alone is
// float32 on both devices: 1e-6.
//
// The fixture folder is $MMGEN_FIXTURES or ../shared/fixtures.
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>

#include "attention/catalogue.h"
#include "attention/paged/cuda/paged_backend_cuda.h"
#include "core/file.h"
#include "core/ops.h"
#include "core/safetensors.h"
#include "cuda_test_support.h"
#include "models/text_encoders/qwen3_model.h"
#include "models/text_encoders/qwen3_paged.h"
#include "models/text_encoders/qwen3_rope.h"
#include "pipeline/prompt_encoding.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

using namespace mmgen;
using namespace mmgen::cuda_testing;
using namespace mmgen::text_encoders;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr double kReference = 2e-2;  // GPU bf16 vs transformers float32
constexpr double kGpuToGpu = 5e-3;   // two GPU bf16 runs of the same weights

fs::path fixtures() {
  const char* from_environment = std::getenv("MMGEN_FIXTURES");
  return from_environment ? fs::path(from_environment) : fs::path(MMGEN_SHARED_DIR) / "fixtures";
}

// The reference's real tokens (the padded ids cut at the mask).
std::vector<int64_t> ids_of(const json& prompt) {
  std::vector<int64_t> ids = prompt["padded_ids"].get<std::vector<int64_t>>();
  const auto mask = prompt["attention_mask"].get<std::vector<int64_t>>();
  ids.resize(size_t(std::count(mask.begin(), mask.end(), int64_t(1))));
  return ids;
}

Tensor reference_rows(const SafetensorsFile& ref, const std::string& name, int64_t row,
                      int64_t length) {
  return ref.tensor(name).select(0, row).slice(0, 0, length).contiguous();
}

attention::paged::PagedRunnerOptions options(std::string_view backend, int64_t page_size,
                                             bool cache) {
  attention::paged::PagedRunnerOptions result;
  result.backend = std::string(backend);
  result.page_size = page_size;
  result.prefix_cache = cache;
  result.pool_tokens = 2048;
  result.max_context_len = 512;
  return result;
}

// ops::rope_half_ on the GPU against the CPU (float32 both: the same products, FMA aside).
void check_rope_op() {
  const RotaryEmbedding rope(16, 1e6);
  std::vector<int64_t> positions;
  for (int64_t t = 0; t < 37; ++t) positions.push_back(t * 7 % 50);
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  std::vector<float> values(37 * 3 * 16);
  for (float& v : values) v = normal(rng);
  Tensor cpu = Tensor::from_vector({37, 3, 16}, values);
  Tensor gpu = cpu.to(Device::CUDA);
  rope.apply_(cpu, positions);
  const RopeTables tables = rope.tables(positions, Device::CUDA);
  ops::rope_half_(gpu, tables.cos, tables.sin);
  const double error = relative_error(gpu, cpu);
  expect(error < 1e-6, fmt::format("rope_half_: GPU vs CPU relative error {:.2e} < 1e-6", error));
}

void check_qwen3_tiny(const fs::path& root) {
  const json ref = json::parse(read_text_file(root / "reference" / "reference.json"));
  const SafetensorsFile tensors =
      SafetensorsFile::open(root / "reference" / "reference.safetensors");
  const Qwen3TextModel cpu = Qwen3TextModel::from_folder(root / "model" / "text_encoder");
  Qwen3TextModel gpu = cpu;
  expect(!error_message([&] { gpu.set_device(Device::CUDA, DType::F32); }).empty(),
         "set_device(CUDA, float32) is refused (the KV pool and decode path are bf16)");
  gpu.set_device(Device::CUDA);
  expect(gpu.device() == Device::CUDA && cpu.device() == Device::CPU &&
             gpu.resident_weight_bytes() > 0 && cpu.resident_weight_bytes() == 0,
         fmt::format("set_device moves the copy ({} bytes resident) and leaves the CPU model",
                     gpu.resident_weight_bytes()));

  std::vector<std::vector<int64_t>> ids;
  for (const json& prompt : ref["prompts"]) ids.push_back(ids_of(prompt));
  ids.push_back(ids[0]);  // a repeated prompt: all but its last token from the cache

  // hidden_state on the GPU (a runner of the prompt's size, no cache).
  double worst_minus2 = 0, worst_last = 0;
  for (size_t i = 0; i + 1 < ids.size(); ++i) {
    const int64_t length = int64_t(ids[i].size());
    const Tensor minus2 = gpu.hidden_state(ids[i], -2);
    expect(minus2.device() == Device::CPU && minus2.dtype() == DType::F32,
           "hidden_state comes back float32 on the host");
    worst_minus2 = std::max(
        worst_minus2, relative_error(minus2, reference_rows(tensors, "encoder.hidden_states_minus2",
                                                            int64_t(i), length)));
    worst_last = std::max(
        worst_last,
        relative_error(gpu.hidden_state(ids[i], -1),
                       reference_rows(tensors, "encoder.hidden_states_last", int64_t(i), length)));
  }
  expect(worst_minus2 < kReference && worst_last < kReference,
         fmt::format("hidden_state on the GPU vs transformers: [-2] {:.2e}, [-1] {:.2e} < {:.0e}",
                     worst_minus2, worst_last, kReference));

  // The paged encoder: every backend × page size × cache; rows vs the reference, cache on vs off,
  // backend vs the first backend.
  std::vector<Tensor> first_backend;
  for (std::string_view backend : attention::paged_backends_for(cuda::paged::cuda_paged_backends(),
                                                                attention::ModelAttention::Plain))
    for (int64_t page_size : {1, 16}) {
      std::vector<Tensor> uncached;
      for (bool cache : {false, true}) {
        Qwen3PagedEncoder encoder(gpu, options(backend, page_size, cache));
        const std::vector<Tensor> rows = encoder.encode(ids);
        const std::string what =
            fmt::format("{} page {} cache {}", backend, page_size, cache ? "on" : "off");
        double to_reference = rows.size() == ids.size() ? 0.0 : INFINITY;
        double to_uncached = 0, to_first = 0;
        for (size_t i = 0; i < rows.size(); ++i) {
          const size_t r = i + 1 < ids.size() ? i : 0;
          to_reference = std::max(
              to_reference,
              relative_error(rows[i], reference_rows(tensors, "encoder.hidden_states_minus2",
                                                     int64_t(r), int64_t(ids[i].size()))));
          if (cache) to_uncached = std::max(to_uncached, relative_error(rows[i], uncached[i]));
          if (!first_backend.empty())
            to_first = std::max(to_first, relative_error(rows[i], first_backend[i]));
        }
        expect(rows.empty() || (rows[0].device() == Device::CPU && rows[0].dtype() == DType::F32),
               what + ": rows come back float32 on the host");
        expect(to_reference < kReference,
               fmt::format("{}: hidden_states[-2] vs transformers worst {:.2e} < {:.0e}", what,
                           to_reference, kReference));
        expect(to_first < kGpuToGpu, fmt::format("{}: vs the first backend worst {:.2e} < {:.0e}",
                                                 what, to_first, kGpuToGpu));
        const PrefixCacheReport& report = encoder.report();
        if (!cache) {
          expect(report.hit_tokens == 0, what + ": no cache, no hits");
          uncached = rows;
          if (first_backend.empty()) first_backend = rows;
          continue;
        }
        expect(to_uncached < kGpuToGpu, fmt::format("{}: cache on vs off worst {:.2e} < {:.0e}",
                                                    what, to_uncached, kGpuToGpu));
        const int64_t repeat = (int64_t(ids[0].size()) - 1) / page_size * page_size;
        expect(report.hit_tokens >= repeat &&
                   (page_size != 1 || report.prompts_hit == int64_t(ids.size()) - 1),
               fmt::format("{}: {} of {} prompt tokens from the cache, {} prompts hit", what,
                           report.hit_tokens, report.prompt_tokens, report.prompts_hit));
      }
    }

  // Greedy decoding on the GPU: the first logits (LM head on the host) and the ids.
  for (size_t i = 0; i < 3; ++i) {
    const json& prompt = ref["prompts"][i];
    const auto expected = prompt["greedy_new_ids"].get<std::vector<int64_t>>();
    Qwen3PagedDecoder decoder(gpu, options("", 1, true));
    const GreedyDecodeResult result =
        decoder.greedy_decode(ids_of(prompt), int64_t(expected.size()));
    const double error = relative_error(result.first_logits,
                                        tensors.tensor("decode.logits_first" + std::to_string(i)));
    expect(error < kReference,
           fmt::format("decode prompt {} ({}): first logits vs transformers {:.2e} < {:.0e}; ids "
                       "{} the reference's",
                       i, decoder.runner().backend_name(), error, kReference,
                       result.new_ids == expected ? "equal" : "differ from (bf16 near-ties)"));
  }

  // Back on the CPU: the mapped weights again, the same numbers as a model that never moved.
  Qwen3TextModel back = gpu;
  back.set_device(Device::CPU);
  const double back_error =
      relative_error(back.hidden_state(ids[1], -2), cpu.hidden_state(ids[1], -2));
  expect(back.device() == Device::CPU && back_error == 0.0,
         fmt::format("moved back to the CPU: bit-identical rows (difference {:.2e})", back_error));
}

// Z-Image's path: the chat template, the tokenizer and encode_qwen3_prompts with the model on
// the GPU (the default pool: the minimum), against the reference's prompt embeddings.
void check_zimage_tiny(const fs::path& root) {
  const json ref = json::parse(read_text_file(root / "reference" / "reference.json"));
  const SafetensorsFile tensors =
      SafetensorsFile::open(root / "reference" / "reference.safetensors");
  const auto tokenizer = tokenizers::Tokenizer::load(root / "model" / "tokenizer");
  const auto chat_template = tokenizers::ChatTemplate::load(root / "model" / "tokenizer");
  Qwen3TextModel model = Qwen3TextModel::from_folder(root / "model" / "text_encoder");
  model.set_device(Device::CUDA);
  std::vector<std::string> prompts;
  for (const json& prompt : ref["prompts"]) prompts.push_back(prompt["prompt"].get<std::string>());
  for (std::string_view backend : attention::paged_backends_for(cuda::paged::cuda_paged_backends(),
                                                                attention::ModelAttention::Plain)) {
    PrefixCacheReport report;
    std::string attention;
    const std::vector<Tensor> rows =
        encode_qwen3_prompts(*tokenizer, chat_template, model, prompts, 48, std::string(backend), 1,
                             &report, &attention);
    double worst = rows.size() == prompts.size() ? 0.0 : INFINITY;
    for (size_t k = 0; k < rows.size(); ++k)
      worst = std::max(worst, relative_error(rows[k], tensors.tensor("text_encoder.prompt" +
                                                                     std::to_string(k))));
    expect(worst < kReference,
           fmt::format("zimage-tiny ({}): prompt embeddings vs diffusers worst {:.2e} < {:.0e}; "
                       "{} of {} tokens from the prefix cache",
                       attention, worst, kReference, report.hit_tokens, report.prompt_tokens));
    expect(report.hit_tokens > 0 && report.prompts_hit == int64_t(prompts.size()) - 1,
           fmt::format("zimage-tiny ({}): every prompt after the first hits the template prefix "
                       "({} hit)",
                       backend, report.prompts_hit));
  }
}

}  // namespace

// Dual chunk attention on the GPU: the qwen3-tiny encoder with chunks of 7 against
// tests/data/qwen3_dual_chunk (make.py: a float64 NumPy forward with SGLang's dual chunk rotation
// and attention), through hidden_state (a paged runner on dual_chunk_flash_attn) and the prompt
// encoder with the prefix cache.
void check_dual_chunk(const fs::path& root) {
  json config = json::parse(read_text_file(root / "model" / "text_encoder" / "config.json"));
  config["dual_chunk_attention_config"] = {
      {"chunk_size", 10}, {"local_size", 3}, {"original_max_position_embeddings", 16}};
  Qwen3TextModel model(Qwen3Config::from_json(config),
                       WeightStore::open_folder(root / "model" / "text_encoder"));
  model.set_device(Device::CUDA);
  const SafetensorsFile ref = SafetensorsFile::open(
      fs::path(MMGEN_SOURCE_DIR) / "tests/data/qwen3_dual_chunk/reference.safetensors");
  const Tensor id_tensor = ref.tensor("input_ids");
  std::vector<int64_t> ids(size_t(id_tensor.numel()));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = id_tensor.data<int64_t>()[i];
  const Tensor expected = ref.tensor("hidden_states_minus2");
  const double direct = relative_error(model.hidden_state(ids, -2), expected);
  Qwen3PagedEncoder encoder(model, options("", 16, true));
  const std::vector<Tensor> rows = encoder.encode({ids, ids});
  const double cached = relative_error(rows[1], expected);
  expect(direct < kReference && cached < kReference && encoder.report().hit_tokens > 0,
         fmt::format("dual chunk qwen3-tiny (chunks of 7, 43 tokens) on the GPU vs the NumPy "
                     "reference: {:.2e}, through the prompt encoder over a cached prefix {:.2e} "
                     "< {:.0e}",
                     direct, cached, kReference));
}

int main() try {
  const fs::path root = fixtures();
  if (!fs::exists(root / "qwen3-tiny" / "reference" / "reference.safetensors") ||
      !fs::exists(root / "zimage-tiny" / "reference" / "reference.safetensors")) {
    std::printf(
        "qwen3_encoder_cuda_test: no qwen3-tiny / zimage-tiny fixture under %s (set "
        "MMGEN_FIXTURES)\n",
        root.c_str());
    return 1;
  }
  check_rope_op();
  check_qwen3_tiny(root / "qwen3-tiny");
  check_zimage_tiny(root / "zimage-tiny");
  check_dual_chunk(root / "qwen3-tiny");
  return finish("qwen3_encoder_cuda_test");
} catch (const std::exception& error) {
  std::printf("qwen3_encoder_cuda_test: error: %s\n", error.what());
  return 1;
}
