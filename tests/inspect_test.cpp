// `mmgen inspect` and the memory check of `generate`: the inventory against the fixture's real
// sizes (read here from the safetensors headers and the folder listing, independently of the
// library), the estimate against measured peaks, and the refusal of a request far beyond memory.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "core/safetensors.h"
#include "core/system_memory.h"
#include "models/dit/wan/wan_transformer.h"
#include "pipeline/model_index.h"
#include "pipeline/model_inventory.h"
#include "pipeline/wan/wan_memory.h"
#include "tests/test_support.h"

namespace mmgen {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using testing::run_command;

std::string mmgen() {
  return testing::mmgen_binary().string();
}

fs::path wan_tiny() {
  return testing::source_dir() / "examples/models/wan-tiny";
}

// What a safetensors file's header says: parameters per dtype and the data section's size.
struct HeaderSums {
  int64_t parameters = 0, tensors = 0;
  uint64_t data_bytes = 0;
  std::map<std::string, int64_t> dtypes;
};

HeaderSums read_header(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  uint64_t length = 0;
  in.read(reinterpret_cast<char*>(&length), 8);
  std::string text(length, '\0');
  in.read(text.data(), std::streamsize(length));
  HeaderSums sums;
  const json header = json::parse(text);
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    int64_t elements = 1;
    for (int64_t size : entry["shape"]) elements *= size;
    std::string dtype = entry["dtype"];
    std::transform(dtype.begin(), dtype.end(), dtype.begin(), ::tolower);
    sums.dtypes[dtype] += elements;
    sums.parameters += elements;
    ++sums.tensors;
    sums.data_bytes +=
        entry["data_offsets"][1].get<uint64_t>() - entry["data_offsets"][0].get<uint64_t>();
  }
  return sums;
}

uint64_t folder_bytes(const fs::path& folder) {
  uint64_t total = 0;
  for (const auto& entry : fs::recursive_directory_iterator(folder))
    if (entry.is_regular_file()) total += entry.file_size();
  return total;
}

// The reference fixture's model folder (../shared), else its copy in examples/models.
fs::path fixture_model() {
  const fs::path shared = testing::shared_dir() / "fixtures/wan-tiny/model";
  return !testing::shared_dir().empty() && fs::exists(shared) ? shared : wan_tiny();
}

TEST(Inspect, InventoryMatchesTheSafetensorsHeadersAndTheFolders) {
  const fs::path model = fixture_model();
  const auto result = run_command(mmgen() + " inspect --json --model-path " + model.string());
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const json report = json::parse(result.out);
  EXPECT_EQ(report["pipeline"], "WanPipeline");
  int64_t all_parameters = 0;
  uint64_t all_bytes = 0;
  for (const char* name : {"text_encoder", "transformer", "vae"}) {
    SCOPED_TRACE(name);
    const fs::path folder = model / name;
    fs::path weights;
    for (const auto& entry : fs::directory_iterator(folder))
      if (entry.path().extension() == ".safetensors") weights = entry.path();
    const HeaderSums sums = read_header(weights);
    const json& c = report["components"][name];
    EXPECT_EQ(c["parameters"].get<int64_t>(), sums.parameters);
    EXPECT_EQ(c["tensors"].get<int64_t>(), sums.tensors);
    EXPECT_EQ(c["tensor_bytes"].get<uint64_t>(), sums.data_bytes);
    EXPECT_EQ(c["float32_bytes"].get<uint64_t>(), uint64_t(sums.parameters) * 4);
    EXPECT_EQ(c["dtypes"], json(sums.dtypes));
    EXPECT_EQ(c["on_disk_bytes"].get<uint64_t>(), folder_bytes(folder));
    EXPECT_EQ(c["weight_files"], json::array({weights.filename().string()}));
    all_parameters += sums.parameters;
    all_bytes += sums.data_bytes;
    // The backend the selector gives it, as the dry-run shows it.
    EXPECT_FALSE(c["attention_backend"].is_null());
    EXPECT_EQ(c["attention_backend_source"], "auto");
  }
  EXPECT_EQ(report["parameters"].get<int64_t>(), all_parameters);
  EXPECT_EQ(report["tensor_bytes"].get<uint64_t>(), all_bytes);
  EXPECT_EQ(report["components"]["transformer"]["attention_backend"], "fa");
  EXPECT_EQ(report["components"]["tokenizer"]["parameters"], 0);
  EXPECT_EQ(report["components"]["tokenizer"]["on_disk_bytes"].get<uint64_t>(),
            folder_bytes(model / "tokenizer"));
  EXPECT_TRUE(report["components"]["scheduler"]["attention_backend"].is_null());
  // The estimate's weights are the mapped tensors of the components that run.
  EXPECT_EQ(report["memory"]["weights_bytes"].get<uint64_t>(), all_bytes);
  EXPECT_EQ(report["memory"]["total_bytes"].get<uint64_t>(),
            report["memory"]["weights_bytes"].get<uint64_t>() +
                report["memory"]["overhead_bytes"].get<uint64_t>() +
                std::max({report["memory"]["text_encoding_bytes"].get<uint64_t>(),
                          report["memory"]["denoising_bytes"].get<uint64_t>(),
                          report["memory"]["vae_decode_bytes"].get<uint64_t>() +
                              report["memory"]["output_bytes"].get<uint64_t>()}));
}

TEST(Inspect, Bf16ComponentsMatchTheirHeaders) {
  // The shapes model stores bf16: parameters and mapped bytes from the headers, float32 twice.
  const fs::path shapes = testing::source_dir() / "examples/models/wan-shapes";
  if (!fs::exists(shapes)) GTEST_SKIP() << shapes << " not found";
  const ModelInventory inventory = take_inventory(load_model_index(shapes));
  for (const char* name : {"text_encoder", "transformer", "vae"}) {
    SCOPED_TRACE(name);
    const ComponentInventory* c = inventory.find(name);
    ASSERT_NE(c, nullptr);
    ASSERT_EQ(c->weight_files.size(), 1u);
    const HeaderSums sums = read_header(c->weight_files[0]);
    EXPECT_EQ(c->parameters, sums.parameters);
    EXPECT_EQ(c->dtype_parameters.at("bf16"), sums.dtypes.at("bf16"));
    EXPECT_EQ(c->tensor_bytes, sums.data_bytes);
    EXPECT_EQ(c->float32_bytes(), 2 * c->tensor_bytes);
  }
}

TEST(Inspect, ShardedWeightsAreCountedFromTheIndex) {
  // A component saved in two shards with an index, plus a stray file the index does not name
  // (the loader ignores it, and so must the count).
  const fs::path model = testing::scratch_dir("inspect-sharded") / "model";
  fs::copy(wan_tiny(), model, fs::copy_options::recursive);
  const fs::path folder = model / "transformer";
  const fs::path single = folder / "diffusion_pytorch_model.safetensors";
  const WeightStore store = WeightStore::open_file(single);
  NamedTensors first, second;
  nlohmann::json weight_map = nlohmann::json::object();
  int i = 0;
  for (const auto& name : store.names()) {
    const bool in_first = i++ % 2 == 0;
    (in_first ? first : second).emplace_back(name, store.get(name).clone());
    weight_map[name] = in_first ? "part-00001.safetensors" : "part-00002.safetensors";
  }
  write_safetensors(folder / "part-00001.safetensors", first);
  write_safetensors(folder / "part-00002.safetensors", second);
  std::ofstream(folder / "diffusion_pytorch_model.safetensors.index.json")
      << nlohmann::json({{"metadata", nlohmann::json::object()}, {"weight_map", weight_map}});
  const HeaderSums whole = read_header(single);
  fs::rename(single, folder / "unused.safetensors");
  const ModelInventory inventory = take_inventory(load_model_index(model));
  const ComponentInventory* c = inventory.find("transformer");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->weight_files.size(), 2u);
  const HeaderSums a = read_header(folder / "part-00001.safetensors");
  const HeaderSums b = read_header(folder / "part-00002.safetensors");
  EXPECT_EQ(c->parameters, whole.parameters);
  EXPECT_EQ(c->parameters, a.parameters + b.parameters);
  EXPECT_EQ(c->tensors, whole.tensors);
  EXPECT_EQ(c->tensor_bytes, a.data_bytes + b.data_bytes);
}

TEST(Inspect, HumanReportNamesEveryComponentAndTheVerdict) {
  const auto result =
      run_command("MMGEN_AVAILABLE_MEMORY=64G " + mmgen() + " inspect --model-path " +
                  wan_tiny().string() + " --height 256 --width 512 --num-frames 17");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  for (const char* text : {"WanPipeline", "UMT5EncoderModel", "WanTransformer3DModel",
                           "AutoencoderKLWan", "T5Tokenizer", "UniPCMultistepScheduler",
                           "fa (auto)", "512x256, 17 frame(s)", "(MMGEN_AVAILABLE_MEMORY): fits"})
    EXPECT_NE(result.out.find(text), std::string::npos) << text << "\n" << result.out;
}

// Peak resident memory of a generate run, as its final summary line reports it.
double measured_peak_mib(const std::string& flags) {
  const fs::path out = testing::scratch_dir("inspect-peak");
  const auto result =
      run_command(mmgen() + " generate --model-path " + wan_tiny().string() + flags +
                  " --prompt fox --num-inference-steps 1 --max-sequence-length 16"
                  " --output-format npy --log-level info --output-path " +
                  out.string());
  EXPECT_EQ(result.exit_code, 0) << result.err;
  std::smatch match;
  const std::regex peak(R"(peak memory ([0-9.]+) (MiB|GiB))");
  EXPECT_TRUE(std::regex_search(result.err, match, peak)) << result.err;
  if (match.empty()) return 0;
  return std::stod(match[1]) * (match[2] == "GiB" ? 1024 : 1);
}

double estimated_mib(const std::string& flags) {
  const auto result = run_command(mmgen() + " inspect --json --model-path " + wan_tiny().string() +
                                  flags + " --max-sequence-length 16");
  EXPECT_EQ(result.exit_code, 0) << result.err;
  return json::parse(result.out)["memory"]["total_bytes"].get<double>() / (1 << 20);
}

TEST(Inspect, EstimateCoversTheMeasuredPeakWithoutWildExcess) {
  // A video large enough that the VAE decode dominates the process's baseline, tiled and not.
  for (const std::string& flags :
       {std::string(" --height 256 --width 256 --num-frames 5"),
        std::string(" --height 256 --width 256 --num-frames 5 --vae-tiling --vae-tile-size 64"
                    " --vae-tile-overlap 16")}) {
    SCOPED_TRACE(flags);
    const double peak = measured_peak_mib(flags), estimate = estimated_mib(flags);
    std::printf("%s: estimate %.0f MiB, measured peak %.0f MiB\n", flags.c_str(), estimate, peak);
    EXPECT_GE(estimate, peak * 0.95);
    EXPECT_LE(estimate, peak * 1.6);
  }
}

TEST(Inspect, GenerateRefusesARequestFarBeyondMemoryBeforeLoadingAnything) {
  const fs::path out = testing::scratch_dir("inspect-refusal");
  const auto result =
      run_command(mmgen() + " generate --model-path " + wan_tiny().string() +
                  " --prompt fox --height 8192 --width 8192 --num-frames 401 --output-path " +
                  (out / "videos").string() + " --output-file-name huge");
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_EQ(result.err.rfind("mmgen: error: generate: this request needs about ", 0), 0u)
      << result.err;
  EXPECT_EQ(std::count(result.err.begin(), result.err.end(), '\n'), 1) << result.err;
  EXPECT_NE(result.err.find(" is free ("), std::string::npos) << result.err;
  EXPECT_NE(result.err.find("--skip-memory-check"), std::string::npos) << result.err;
  // Nothing was written, not even the output folder.
  EXPECT_FALSE(fs::exists(out / "videos"));
}

TEST(Inspect, TheRefusalsSuggestionsFitAndTheRequestDoesNot) {
  // Pretend the machine has 300 MiB free: 512x512x33 on wan-tiny needs more (its VAE decode).
  const std::string limit = "MMGEN_AVAILABLE_MEMORY=300M ";
  const std::map<std::string, std::string> request = {{"--model-path", wan_tiny().string()},
                                                      {"--prompt", "fox"},
                                                      {"--height", "512"},
                                                      {"--width", "512"},
                                                      {"--num-frames", "33"}};
  auto command = [&](const std::string& verb, const std::map<std::string, std::string>& extra) {
    std::map<std::string, std::string> flags = request;
    for (const auto& [flag, value] : extra) flags[flag] = value;
    std::string text = limit + mmgen() + " " + verb;
    for (const auto& [flag, value] : flags) text += " " + flag + (value.empty() ? "" : " " + value);
    return text;
  };
  const auto refused = run_command(command("generate", {}));
  ASSERT_EQ(refused.exit_code, 1) << refused.out;
  EXPECT_NE(refused.err.find("300 MiB is free (MMGEN_AVAILABLE_MEMORY)"), std::string::npos)
      << refused.err;
  EXPECT_EQ(std::count(refused.err.begin(), refused.err.end(), '\n'), 1) << refused.err;
  std::smatch match;
  ASSERT_TRUE(std::regex_search(refused.err, match, std::regex("what would fit: (.*); --skip")))
      << refused.err;
  std::string list = match[1];
  std::vector<std::string> suggestions;
  for (size_t at; (at = list.find(" or ")) != std::string::npos; list = list.substr(at + 4))
    suggestions.push_back(list.substr(0, at));
  suggestions.push_back(list);
  EXPECT_GE(suggestions.size(), 2u) << refused.err;
  // Every suggestion, applied to the request, fits the same 300 MiB.
  for (const auto& suggestion : suggestions) {
    SCOPED_TRACE(suggestion);
    std::map<std::string, std::string> extra;
    std::istringstream words(suggestion);
    std::string word, flag;
    while (words >> word) {
      if (word.starts_with("--")) {
        flag = word;
        extra[flag] = "";
      } else {
        extra[flag] = word;
      }
    }
    const auto check = run_command(command("inspect --json", extra));
    ASSERT_EQ(check.exit_code, 0) << check.err;
    EXPECT_EQ(json::parse(check.out)["memory_fits"], true);
  }
  const auto inspect = run_command(command("inspect --json", {}));
  ASSERT_EQ(inspect.exit_code, 0) << inspect.err;
  EXPECT_EQ(json::parse(inspect.out)["memory_fits"], false);
}

TEST(Inspect, OnTheGpuTheHostKeepsWeightsLatentsAndTheVideo) {
  const ModelIndex index = load_model_index(wan_tiny());
  const ModelInventory inventory = take_inventory(index);
  Request request;
  request.height = 256;
  request.width = 256;
  request.num_frames = 9;
  request.max_sequence_length = 16;
  const MemoryEstimate cpu = estimate_wan_memory(request, index, inventory);
  request.device = "cuda";
  const MemoryEstimate gpu = estimate_wan_memory(request, index, inventory);
  EXPECT_EQ(gpu.weights, cpu.weights);
  EXPECT_EQ(gpu.output, cpu.output);
  EXPECT_EQ(gpu.text_encoding, 0u);
  // Latents [1, 16, 3, 32, 32] and the step's output, float32, with the allocator allowance.
  EXPECT_EQ(gpu.denoising, uint64_t(2 * 16 * 3 * 32 * 32 * 4 * 1.5));
  // The video coming back (9 x 3 x 256 x 256 float32) and its 8-bit copy.
  EXPECT_EQ(gpu.decoding, uint64_t((cpu.output + cpu.output / 4) * 1.5));
  EXPECT_LT(gpu.total(), cpu.total());
}

// The GPU's share of the weights (what --max-gpu-memory is held against): inspect reports it from
// the configs; FP8 products shrink the transformer's, stage offload keeps the larger stage only,
// and precomputed embeddings need no text encoder. tests/cuda/ hold each figure equal to what the
// upload keeps resident.
TEST(Inspect, GpuWeightsFollowTheProductsPrecisionAndStageOffload) {
  auto gpu_weights = [&](const std::string& flags) {
    const auto result =
        run_command(mmgen() + " inspect --json --model-path " + wan_tiny().string() + flags);
    EXPECT_EQ(result.exit_code, 0) << result.err;
    return nlohmann::json::parse(result.out)["gpu_weights"];
  };
  const nlohmann::json bf16 = gpu_weights("");
  const nlohmann::json fp8 = gpu_weights(" --gpu-matmul-precision fp8");
  const nlohmann::json limited = gpu_weights(" --max-gpu-memory 1GiB");
  const uint64_t encoder = bf16["text_encoder_bytes"], transformer = bf16["transformer_bytes"];
  const uint64_t vae = bf16["vae_bytes"];
  EXPECT_GT(encoder, 0u);
  EXPECT_EQ(vae,
            uint64_t(take_inventory(load_model_index(wan_tiny())).find("vae")->parameters) * 4);
  EXPECT_EQ(bf16["resident_bytes"].get<uint64_t>(), encoder + transformer + vae);
  EXPECT_LT(fp8["transformer_bytes"].get<uint64_t>(), transformer);
  EXPECT_EQ(fp8["text_encoder_bytes"].get<uint64_t>(), encoder);
  EXPECT_TRUE(limited["stage_offload"].get<bool>());
  EXPECT_EQ(limited["offload"], "stages");
  EXPECT_EQ(limited["resident_bytes"].get<uint64_t>(), std::max(encoder, transformer) + vae);
  // Streamed blocks: the transformer's share is two blocks' slots and the rest (wan-tiny has two
  // blocks, so that is a little more: each tensor of a slot starts at 256 bytes).
  const nlohmann::json blocks = gpu_weights(" --gpu-offload blocks");
  const uint64_t streamed = blocks["transformer_streamed_bytes"];
  EXPECT_EQ(blocks["offload"], "blocks");
  EXPECT_EQ(streamed,
            dit::WanTransformer::gpu_weight_bytes(
                dit::WanTransformerConfig::from_file(wan_tiny() / "transformer" / "config.json"),
                false, true));
  EXPECT_NE(streamed, transformer);
  EXPECT_EQ(blocks["resident_bytes"].get<uint64_t>(), std::max(encoder, streamed) + vae);
  EXPECT_EQ(gpu_weights(" --gpu-offload none --max-gpu-memory 1GiB")["offload"], "none");
}

// --gpu-offload auto: nothing without a limit; under one the stages, and the blocks too once the
// transformer would take more than three quarters of it. A pipeline that cannot offload takes
// none under auto and refuses an explicit mode in one line.
TEST(Inspect, GpuOffloadAutoStreamsTheBlocksWhenTheTransformerTakesMostOfTheLimit) {
  const uint64_t gib = uint64_t(1) << 30;
  EXPECT_EQ(choose_gpu_offload("auto", 0, true, 30 * gib).name(), "none");
  EXPECT_EQ(choose_gpu_offload("auto", 24 * gib, true, 14 * gib).name(), "stages");
  EXPECT_EQ(choose_gpu_offload("auto", 24 * gib, true, 18 * gib).name(), "stages");
  EXPECT_EQ(choose_gpu_offload("auto", 24 * gib, true, 18 * gib + 1).name(), "blocks");
  EXPECT_EQ(choose_gpu_offload("blocks", 0, true, 0).name(), "blocks");
  EXPECT_EQ(choose_gpu_offload("stages", 0, true, 0).name(), "stages");
  EXPECT_EQ(choose_gpu_offload("none", 24 * gib, true, 30 * gib).name(), "none");
  EXPECT_EQ(choose_gpu_offload("auto", 24 * gib, false, 30 * gib).name(), "none");
  const std::string refusal =
      testing::error_message([] { choose_gpu_offload("blocks", 0, false, 0); });
  EXPECT_NE(refusal.find("--gpu-offload blocks"), std::string::npos) << refusal;
  EXPECT_EQ(refusal.find('\n'), std::string::npos);
}

TEST(SystemMemory, ByteSizesParseAndPrint) {
  EXPECT_EQ(parse_byte_size("4096"), 4096u);
  EXPECT_EQ(parse_byte_size("512M"), 512u << 20);
  EXPECT_EQ(parse_byte_size("1.5GiB"), 3u << 29);
  EXPECT_EQ(parse_byte_size("2g"), 2ull << 30);
  EXPECT_EQ(parse_byte_size("lots"), std::nullopt);
  EXPECT_EQ(parse_byte_size("3X"), std::nullopt);
  EXPECT_EQ(format_bytes(7), "7 B");
  EXPECT_EQ(format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(format_bytes(300ull << 20), "300 MiB");
  EXPECT_GT(available_memory().value_or(AvailableMemory{1, ""}).bytes, 0u);
  EXPECT_GT(peak_resident_bytes(), 0u);
}

}  // namespace
}  // namespace mmgen
