// Inputs that once crashed mmgen, replayed through the entry points the libFuzzer targets in
// fuzz/ drive (scripts/fuzz.sh), so each bug stays fixed: every input must now end in a clean
// mmgen::Error that names the problem, or parse correctly. Inputs the fuzzers found (or small
// hand-made ones) live in tests/data/fuzz/<target>/; the long ones (tens of kilobytes of digits or
// brackets, which overflowed the stack) are built here. A file added there needs a test here:
// EveryStoredInputHasATest checks that.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <set>
#include <string>

#include "attention/backend_config.h"
#include "attention/backends/sliding_tile_attn/sta_mask.h"
#include "core/error.h"
#include "core/npy.h"
#include "core/safetensors.h"
#include "generate/settings.h"
#include "models/dit/wan/wan_transformer_config.h"
#include "models/text_encoders/qwen3_config.h"
#include "models/text_encoders/t5_config.h"
#include "models/vae/wan_vae_config.h"
#include "pipeline/model_index.h"
#include "pipeline/schedulers/scheduler.h"
#include "tests/test_support.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace mmgen {
namespace {

using testing::error_message;
using testing::scratch_dir;

fs::path data_dir() {
  return testing::source_dir() / "tests" / "data" / "fuzz";
}

// The inputs the tests below read, relative to data_dir().
const std::set<std::string>& stored_inputs() {
  static const std::set<std::string> inputs = {
      "fuzz_backend_config/invalid-utf8-key",
      "fuzz_backend_config/real-out-of-range",
      "fuzz_config_yaml/alias-expansion.yaml",
      "fuzz_config_yaml/int-option-float-overflow.yaml",
      "fuzz_config_yaml/invalid-utf8-value.yaml",
      "fuzz_config_yaml/real-out-of-range.yaml",
      "fuzz_model_index/scheduler-int-overflow.json",
      "fuzz_model_index/unipc-flow-shift-zero.json",
      "fuzz_model_index/unipc-shift-terminal-huge.json",
      "fuzz_model_index/vae-dim-mult-float.json",
      "fuzz_npy/zero-extent-huge-extents.npy",
      "fuzz_npy/zero-extent-stride-overflow.npy",
      "fuzz_safetensors/misaligned-bf16.safetensors",
      "fuzz_safetensors/misaligned-f32.safetensors",
      "fuzz_safetensors/zero-extent-huge-extents.safetensors",
      "fuzz_sta_mask/number-overflow.json",
  };
  return inputs;
}

fs::path input(const std::string& name) {
  EXPECT_TRUE(stored_inputs().count(name)) << name << " is missing from stored_inputs()";
  return data_dir() / name;
}

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Writes `bytes` to `name` in a fresh folder: the readers tell formats apart by the file name.
fs::path staged(const std::string& folder, const std::string& name, const std::string& bytes) {
  const fs::path path = scratch_dir(folder) / name;
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

// Expects `action` to throw mmgen::Error (nothing else) whose message holds every key word.
void expect_error(const std::function<void()>& action, const std::vector<std::string>& words) {
  std::string message;
  try {
    message = error_message(action);
  } catch (const std::exception& e) {
    FAIL() << "threw a non-mmgen exception: " << e.what();
  }
  ASSERT_FALSE(message.empty()) << "no mmgen::Error was thrown";
  for (const auto& word : words) EXPECT_NE(message.find(word), std::string::npos) << message;
}

TEST(FuzzRegression, EveryStoredInputHasATest) {
  ASSERT_TRUE(fs::is_directory(data_dir())) << data_dir();
  for (const auto& entry : fs::recursive_directory_iterator(data_dir())) {
    if (!entry.is_regular_file()) continue;
    const std::string name = fs::relative(entry.path(), data_dir()).generic_string();
    EXPECT_TRUE(stored_inputs().count(name)) << name << " has no regression test";
  }
}

// ------------------------------------------------------------------ fuzz_backend_config

nlohmann::json spec(const std::string& text) {
  return attention::parse_backend_config_spec(text);
}

TEST(FuzzRegression, BackendConfigInvalidUtf8IsRefused) {
  // A key with 0xFF bytes became a JSON string that nlohmann::json threw on when printed.
  const std::string text = read_bytes(input("fuzz_backend_config/invalid-utf8-key"));
  expect_error([&] { spec(text); }, {"--attention-backend-config", "not valid UTF-8"});
}

TEST(FuzzRegression, BackendConfigNumbersOutOfRangeStayText) {
  // std::stod threw std::out_of_range; 60 000 digits overflowed std::regex's stack.
  for (const std::string& text : {read_bytes(input("fuzz_backend_config/real-out-of-range")),
                                  "sparsity=" + std::string(60000, '7')}) {
    const nlohmann::json settings = spec(text);
    ASSERT_TRUE(settings["sparsity"].is_string());
    expect_error([&] { attention::validate_backend_config(settings, "video_sparse_attn"); },
                 {"video_sparse_attn's sparsity must be"});
  }
  EXPECT_EQ(spec("a=-12,b=+1.5e3,c=.5,d=7.,e=1e,f=--1"),
            nlohmann::json(
                {{"a", -12}, {"b", 1500.0}, {"c", 0.5}, {"d", 7.0}, {"e", "1e"}, {"f", "--1"}}));
}

TEST(FuzzRegression, BackendConfigDeepNestingIsRefused) {
  // Nested lists were copied once per level (out of memory); nested JSON and dotted keys
  // overflowed the stack when the value was printed.
  expect_error([] { spec("tile_size=" + std::string(30000, '[') + std::string(30000, ']')); },
               {"nested deeper than 128"});
  expect_error(
      [] { spec("{\"sparsity\": " + std::string(60000, '[') + std::string(60000, ']') + "}"); },
      {"--attention-backend-config", "nested deeper than 128"});
  std::string dotted = "a";
  for (int i = 0; i < 40000; ++i) dotted += ".a";
  expect_error([&] { spec(dotted + "=1"); }, {"more than 127 dots"});
  EXPECT_EQ(spec("moba_config.st_topk=3,x=[[1,2],[3]]"),
            nlohmann::json::parse(R"({"moba_config": {"st_topk": 3}, "x": [[1, 2], [3]]})"));
}

// ------------------------------------------------------------------ fuzz_config_yaml

std::string config_error(const std::string& yaml) {
  return error_message([&] { cli::load_config_file(staged("fuzz-yaml", "config.yaml", yaml)); });
}

TEST(FuzzRegression, ConfigYamlInvalidUtf8IsRefused) {
  const std::string yaml = read_bytes(input("fuzz_config_yaml/invalid-utf8-value.yaml"));
  const std::string message = config_error(yaml);
  EXPECT_NE(message.find("config.yaml: line 4, column 12"), std::string::npos) << message;
  EXPECT_NE(message.find("not valid UTF-8"), std::string::npos) << message;
}

TEST(FuzzRegression, ConfigYamlNumbersOutOfRangeAreRefusedByName) {
  // 1e30 for an integer option was converted to int64 (undefined); 1e999 made std::stod throw;
  // a 60 000-digit number overflowed std::regex's stack.
  EXPECT_NE(config_error(read_bytes(input("fuzz_config_yaml/int-option-float-overflow.yaml")))
                .find("height: expected a whole number"),
            std::string::npos);
  EXPECT_NE(config_error(read_bytes(input("fuzz_config_yaml/real-out-of-range.yaml")))
                .find("guidance_scale: expected a number"),
            std::string::npos);
  EXPECT_NE(config_error("height: " + std::string(60000, '7') + "\n")
                .find("height: expected a whole number"),
            std::string::npos);
  const cli::SettingsLayer layer =
      cli::load_config_file(staged("fuzz-yaml", "ok.yaml", "height: 1e3\nguidance_scale: -.5e1\n"));
  EXPECT_EQ(layer["height"], 1000);
  EXPECT_EQ(layer["guidance-scale"], -5.0);
}

TEST(FuzzRegression, ConfigYamlAliasExpansionIsBounded) {
  // Nine levels of ten aliases stand for 10^9 values: converting them ran out of time.
  const std::string message =
      config_error(read_bytes(input("fuzz_config_yaml/alias-expansion.yaml")));
  EXPECT_NE(message.find("once YAML aliases are expanded"), std::string::npos) << message;
}

// ------------------------------------------------------------------ fuzz_model_index

nlohmann::json config_of(const std::string& name) {
  return read_json_object(input("fuzz_model_index/" + name));
}

TEST(FuzzRegression, SchedulerConfigValuesOutOfRangeAreRefused) {
  // flow_shift 0 gave NaN sigmas, converted to int64 timesteps (undefined).
  expect_error(
      [] {
        auto scheduler = schedulers::make_scheduler(config_of("unipc-flow-shift-zero.json"));
        scheduler->set_timesteps(4);
      },
      {"UniPCMultistepScheduler", "flow_shift must be a positive number"});
  // shift_terminal 1e300 stretched the sigmas to ~1e302 before the same conversion.
  expect_error([] { schedulers::make_scheduler(config_of("unipc-shift-terminal-huge.json")); },
               {"shift_terminal must be between 0 and 1"});
  // num_train_timesteps 1e30 was converted to int (undefined).
  expect_error([] { schedulers::make_scheduler(config_of("scheduler-int-overflow.json")); },
               {"FlowMatchEulerDiscreteScheduler", "'num_train_timesteps' must be a whole number"});
}

TEST(FuzzRegression, VaeIntegerListsTakeWholeNumbersOnly) {
  // dim_mult [1e30, ...] was converted to int64 (undefined).
  expect_error([] { vae::WanVaeConfig::from_json(config_of("vae-dim-mult-float.json")); },
               {"\"dim_mult\" must be a list of whole numbers"});
}

TEST(FuzzRegression, DeeplyNestedModelIndexIsRefused) {
  // Copying the 60 000-deep extra value overflowed the stack.
  const fs::path file =
      staged("fuzz-index", "model_index.json",
             "{\"_class_name\": \"WanPipeline\", \"x\": " + std::string(60000, '[') +
                 std::string(60000, ']') + "}");
  expect_error([&] { load_model_index(file.parent_path()); },
               {"model_index.json: JSON nested deeper than 128 levels"});
}

// The config readers of the model's components parse through core/json's depth-bounded parser,
// like model_index.json: deep nesting is one clear error, not a crash later on.
TEST(FuzzRegression, DeeplyNestedComponentConfigsAreRefused) {
  const std::string deep = std::string(5000, '[') + std::string(5000, ']');
  const fs::path file = staged("fuzz-config", "config.json", deep);
  const std::vector<std::string> words = {"config.json", "nested deeper than"};
  expect_error([&] { dit::WanTransformerConfig::from_file(file); }, words);
  expect_error([&] { vae::WanVaeConfig::from_file(file); }, words);
  expect_error([&] { text_encoders::T5Config::from_file(file); }, words);
  expect_error([&] { text_encoders::Qwen3Config::from_file(file); }, words);
}

// ------------------------------------------------------------------ fuzz_npy

TEST(FuzzRegression, NpyShapesWhoseStridesOverflowAreRefused) {
  // A zero extent made the byte count 0, but the strides multiplied the others past int64. The
  // fuzzer's own input has a mangled tuple, which the shape reader now refuses entry by entry.
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"zero-extent-stride-overflow.npy", "is not a non-negative integer"},
      {"zero-extent-huge-extents.npy", ".npy shape too large"}};
  for (const auto& [name, message] : cases) {
    const fs::path file = staged("fuzz-npy", "x.npy", read_bytes(input("fuzz_npy/" + name)));
    expect_error([&] { read_tensor_file(file); }, {"x.npy", message});
  }
}

TEST(FuzzRegression, NpyLongHeaderIsRefused) {
  // A 60 KB header overflowed std::regex's stack.
  std::string header = "{'descr': '" + std::string(60000, 'x') + "', 'fortran_order': False, }\n";
  std::string bytes = std::string("\x93NUMPY\x02\x00", 8);
  for (int i = 0; i < 4; ++i) bytes += char((header.size() >> (8 * i)) & 0xff);
  const fs::path file = staged("fuzz-npy", "long.npy", bytes + header);
  expect_error([&] { read_tensor_file(file); }, {"long.npy", "longer than the 10000 numpy reads"});
}

// ------------------------------------------------------------------ fuzz_safetensors

TEST(FuzzRegression, MisalignedSafetensorsDataIsReadCorrectly) {
  // Data that the header left at an odd offset was read through misaligned float pointers.
  const WeightStore f32 =
      WeightStore::open_file(input("fuzz_safetensors/misaligned-f32.safetensors"));
  const Tensor a = f32.get_f32("a");
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data<float>()) % alignof(float), 0u);
  EXPECT_EQ(a.data<float>()[0], 1.5f);
  EXPECT_EQ(a.data<float>()[1], -2.0f);
  const WeightStore bf16 =
      WeightStore::open_file(input("fuzz_safetensors/misaligned-bf16.safetensors"));
  EXPECT_EQ(bf16.get("ab").dtype(), DType::BF16);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(bf16.get("ab").raw()) % 2, 0u);
  const Tensor ab = bf16.get_f32("ab");
  EXPECT_EQ(ab.data<float>()[0], 1.0f);
  EXPECT_EQ(ab.data<float>()[1], -3.0f);
}

TEST(FuzzRegression, SafetensorsShapesWhoseStridesOverflowAreRefused) {
  // [0, 2^62, 2^62]: zero bytes, but strides past int64.
  expect_error(
      [] { SafetensorsFile::open(input("fuzz_safetensors/zero-extent-huge-extents.safetensors")); },
      {"tensor 'a' has a shape too large to address"});
}

// ------------------------------------------------------------------ fuzz_sta_mask

TEST(FuzzRegression, StaMaskNumberOverflowIsAnError) {
  // nlohmann's out_of_range (number overflow) escaped read_json_object, which caught parse
  // errors only.
  expect_error(
      [] { attention::StaMaskStrategy::load(input("fuzz_sta_mask/number-overflow.json")); },
      {"number-overflow.json: malformed JSON", "number overflow"});
}

TEST(FuzzRegression, StaMaskLongKeyIsAnError) {
  // A 60 000-digit key overflowed std::regex's stack.
  const fs::path file =
      staged("fuzz-sta", "mask.json", "{\"" + std::string(60000, '1') + "_0_0\": [1, 1, 1]}");
  expect_error([&] { attention::StaMaskStrategy::load(file); }, {"has a number too large"});
  for (const char* key : {"1__2", "_1_2_3", "1_2_3_4", "1_2_", "1_2_x"}) {
    const fs::path bad = staged("fuzz-sta", "bad.json", fmt::format("{{\"{}\": [1, 1, 1]}}", key));
    expect_error([&] { attention::StaMaskStrategy::load(bad); }, {"is not \"step_layer_head\""});
  }
  const fs::path good = staged("fuzz-sta", "good.json", R"({"3_1_0": [1, 2, 3]})");
  const auto mask = attention::StaMaskStrategy::load(good);
  EXPECT_EQ(mask.window(3, 1, 0), (attention::StaMaskStrategy::Window{1, 2, 3}));
}

// ------------------------------------------------------------------ fuzz_tokenizer_json

TEST(FuzzRegression, TokenizerRegexNestingIsBounded) {
  // 30 000 nested groups in a Split pattern overflowed the regex parser's stack.
  const std::string pattern = std::string(30000, '(') + "a" + std::string(30000, ')');
  const std::string json = R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []},
      "pre_tokenizer": {"type": "Split", "pattern": {"Regex": ")" +
                           pattern + R"("}, "behavior": "Isolated", "invert": false}})";
  expect_error([&] { tokenizers::Tokenizer::from_json(json, "fuzz/tokenizer.json"); },
               {"groups nested deeper than 256 levels"});
}

// ------------------------------------------------------------------ fuzz_chat_template

TEST(FuzzRegression, ChatTemplateLongChainsAreRefusedNotOverflowed) {
  // A chain the parser builds in a loop (x.a.a..., x[0][0]..., x()()..., 1 + 1 + ..., x | f | f,
  // x is t is t) grew a tree one level deeper per link, 30 000 levels from a 64 KB template, and
  // the recursive name check then overflowed the stack (ASan, hand-made inputs beside
  // fuzz_chat_template's first runs). Each link now counts as a level of nesting.
  const std::vector<std::pair<std::string, std::string>> chains = {
      {"messages", ".a"}, {"messages", "[0]"}, {"x", "()"},         {"1", " + 1"},
      {"1", " * 1"},      {"1", " ** 1"},      {"'a'", " ~ 'a'"},   {"true", " and true"},
      {"false", " or x"}, {"1", "|string"},    {"1", " is number"},
  };
  for (const auto& [head, link] : chains) {
    std::string source = "{{ " + head;
    for (int i = 0; i < 30000; ++i) source += link;
    source += " }}";
    expect_error([&] { tokenizers::ChatTemplate(source, "fuzz/chain.jinja"); },
                 {"fuzz/chain.jinja:1:", "the template nests deeper than 128 levels"});
  }
  // A chain of 100 links (real templates use under 10) still renders, left to right.
  std::string source = "{{ 1";
  for (int i = 0; i < 100; ++i) source += " + 1";
  source += " }}{{ messages[0].content.split(' ')[1]|upper|length is number }}";
  EXPECT_EQ(tokenizers::ChatTemplate(source, "fuzz/chain.jinja").render_prompt("a cat"), "101True");
}

}  // namespace
}  // namespace mmgen
