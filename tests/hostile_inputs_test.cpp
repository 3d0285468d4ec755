// Hostile inputs, round two (issue 52): what an attacker tried against the executable and its
// parsers, each case the way it once went wrong — a SIGFPE, minutes of parsing, "internal error"
// with neither file nor key, raw bytes on the terminal — and what must happen now: one line that
// names the file, the key or the flag, a non-zero exit, and work linear in the input.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "core/json.h"
#include "core/safetensors.h"
#include "core/text.h"
#include "core/yaml.h"
#include "models/tokenizers/longest_match.h"
#include "models/tokenizers/tokenizer.h"
#include "tests/test_support.h"

namespace mmgen {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using testing::expect_one_line_error;
using testing::run_command;
using testing::scratch_dir;

std::string mmgen() {
  return testing::mmgen_binary().string();
}
std::string wan_tiny() {
  return (testing::source_dir() / "examples/models/wan-tiny").string();
}
std::string quoted(const std::string& text) {
  return "'" + text + "'";
}

// This thread's CPU seconds for `action`, the best of three runs: CPU time, not wall time, so that
// other tests sharing the cores (ctest -j) do not stretch one measurement and not the other.
double seconds(const std::function<void()>& action) {
  auto now = [] {
    timespec t{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
  };
  double best = 1e30;
  for (int i = 0; i < 3; ++i) {
    const double start = now();
    action();
    best = std::min(best, now() - start);
  }
  return best;
}

// Work about linear in the input: eight times the input may take at most 24 times as long (n log n
// and the caches give 8-14; a quadratic parser takes 64), plus 20 ms for the timer's and the
// allocator's noise. The test holds the shape of the cost, not a speed, so it holds on a slow or
// sanitized build too.
void expect_linear(const std::function<void(int64_t)>& work, int64_t n, const std::string& what) {
  const double small = seconds([&] { work(n); });
  const double large = seconds([&] { work(8 * n); });
  std::printf("%s: %.4f s for %lld, %.4f s for %lld\n", what.c_str(), small, (long long)n, large,
              (long long)(8 * n));
  EXPECT_LT(large, 24 * small + 0.02) << what;
}

// ------------------------------------------------------------------ 1. a size that wraps

// tile_size [2^32, 2^32, 1] once wrapped the tile's volume to 0 and divided by it (SIGFPE, exit
// 136, nothing printed). Every whole-number setting now has bounds, so it is one line naming the
// key, from the flag and from a --config file alike.
TEST(HostileInputs, AHugeTileSizeIsOneLine) {
  for (const std::string tiles : {"[4294967296,4294967296,1]", "[2097152,2097152,4194304]"}) {
    const std::string settings = "skip_time_steps=0,tile_size=" + tiles;
    expect_one_line_error(
        run_command(mmgen() + " generate --prompt x --model-path " + wan_tiny() +
                    " --attention-backend sliding_tile_attn --attention-backend-config " +
                    quoted(settings)),
        "tile_size must be a list of 3 whole numbers in [1, 4096]", settings);
    const fs::path config = scratch_dir("hostile-tile") / "run.yaml";
    std::ofstream(config) << "attention-backend: sliding_tile_attn\n"
                          << "attention-backend-config: {skip_time_steps: 0, tile_size: " << tiles
                          << "}\n";
    expect_one_line_error(run_command(mmgen() + " generate --prompt x --model-path " + wan_tiny() +
                                      " --config " + config.string()),
                          "tile_size must be", "--config with " + tiles);
  }
}

// ------------------------------------------------------------------ 2, 3. linear parsing

// 300k `{}` in a model_index.json took 22 s (the depth callback rescanned the enclosing array at
// every object's end).
TEST(HostileInputs, JsonParsingIsLinear) {
  auto objects = [](int64_t n) {
    std::string text = "{\"x\": [";
    for (int64_t i = 0; i < n; ++i) text += i ? ",{}" : "{}";
    return text + "]}";
  };
  const std::string small = objects(50000), large = objects(400000);
  expect_linear(
      [&](int64_t n) { parse_json(n == 50000 ? small : large, "model_index.json", "fix it"); },
      50000, "empty objects");
  // The depth bound holds without the callback.
  EXPECT_NE(testing::error_message([] {
              parse_json(std::string(200, '[') + std::string(200, ']'), "f.json", "fix it");
            }).find("f.json: JSON nested deeper than 128 levels"),
            std::string::npos);
  EXPECT_NO_THROW(parse_json(std::string(128, '[') + std::string(128, ']'), "f.json", "fix it"));
}

// A safetensors header of 200k zero-size tensors took over a minute; each name may appear once.
TEST(HostileInputs, SafetensorsHeadersAreLinearAndKeysUnique) {
  const fs::path dir = scratch_dir("hostile-safetensors");
  auto write = [&](int64_t n, const fs::path& file) {
    std::string header = "{";
    for (int64_t i = 0; i < n; ++i)
      header += fmt::format("{}\"t.{}\":{{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}}",
                            i ? "," : "", i);
    header += "}";
    std::ofstream out(file, std::ios::binary);
    const uint64_t length = header.size();
    out.write(reinterpret_cast<const char*>(&length), 8);
    out << header;
  };
  write(20000, dir / "small.safetensors");
  write(160000, dir / "large.safetensors");
  expect_linear(
      [&](int64_t n) {
        SafetensorsFile::open(dir / (n == 20000 ? "small.safetensors" : "large.safetensors"));
      },
      20000, "zero-size tensors");

  // The same name twice: the first entry's offsets would never be checked.
  const std::string header = R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                             R"("w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  {
    std::ofstream out(dir / "twice.safetensors", std::ios::binary);
    const uint64_t length = header.size();
    out.write(reinterpret_cast<const char*>(&length), 8);
    out << header << std::string(4, '\0');
  }
  EXPECT_NE(testing::error_message([&] {
              SafetensorsFile::open(dir / "twice.safetensors");
            }).find("the key \"w\" appears twice"),
            std::string::npos);
}

// A tokenizer.json of 100k added tokens and a prompt of 100k '<' took 91 s: every token of the
// '<' bucket was compared at every position.
TEST(HostileInputs, AddedTokenMatchingIsLinear) {
  auto tokenizer_json = [](int64_t tokens) {
    json added = json::array();
    for (int64_t i = 0; i < tokens; ++i)
      added.push_back({{"id", 10 + i},
                       {"content", "<" + std::string(size_t(i % 7 + 1), 'a') + std::to_string(i)},
                       {"special", true}});
    json vocab = json::array();
    for (const char* piece : {"<unk>", "<", "a", "b", "1"}) vocab.push_back({piece, -1.0});
    return json{{"added_tokens", added},
                {"model", {{"type", "Unigram"}, {"unk_id", 0}, {"vocab", vocab}}}}
        .dump();
  };
  const std::string small = tokenizer_json(10000), large = tokenizer_json(80000);
  expect_linear(
      [&](int64_t n) {
        const auto tokenizer =
            tokenizers::Tokenizer::from_json(n == 10000 ? small : large, "tokenizer.json");
        const auto ids = tokenizer->encode(std::string(size_t(n), '<'), false);
        EXPECT_EQ(ids.size(), size_t(n));
      },
      10000, "added tokens and a prompt of '<'");
  // Still leftmost-longest: "<aa1" is token 1's whole content, "<a" alone is not a token.
  const auto tokenizer = tokenizers::Tokenizer::from_json(small, "tokenizer.json");
  EXPECT_EQ(tokenizer->encode("<aa1<a0", false), (std::vector<int64_t>{11, 10}));
}

// The automaton against the obvious search, on random sets of overlapping strings.
TEST(HostileInputs, LongestMatchAgreesWithBruteForce) {
  std::mt19937 random(7);
  auto text_of = [&](size_t length) {
    std::string text;
    for (size_t i = 0; i < length; ++i) text += "ab<"[random() % 3];
    return text;
  };
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<std::string> patterns;
    for (int i = 0, n = int(random() % 12) + 1; i < n; ++i)
      patterns.push_back(text_of(random() % 5 + 1));
    tokenizers::LongestMatch automaton;
    for (size_t i = 0; i < patterns.size(); ++i) automaton.add(patterns[i], i);
    automaton.build();
    const std::string text = text_of(60);
    const std::vector<size_t> found = automaton.longest_at(text);
    for (size_t pos = 0; pos < text.size(); ++pos) {
      size_t expected = tokenizers::LongestMatch::kNone;
      for (size_t i = 0; i < patterns.size(); ++i)
        if (text.compare(pos, patterns[i].size(), patterns[i]) == 0 &&
            (expected == tokenizers::LongestMatch::kNone ||
             patterns[i].size() > patterns[expected].size()))
          expected = i;
      ASSERT_EQ(found[pos], expected) << "trial " << trial << " at " << pos << " in " << text;
    }
  }
}

// ------------------------------------------------------------------ 4. typed config readers

// Values of the wrong type in a model's configs ended in "internal error:
// [json.exception.type_error.302]" (exit 70) naming neither file nor key; 1e30 and 2^24 heads
// reached an undefined float-to-int conversion and a signed overflow. Each is now one line naming
// the file and the key, from the dry run and the run alike.
TEST(HostileInputs, ConfigValuesOfTheWrongTypeNameTheFileAndKey) {
  struct Case {
    const char* component;
    const char* key;
    json value;
  };
  const std::vector<Case> cases = {
      {"transformer", "num_layers", "2"},
      {"transformer", "num_layers", true},
      {"transformer", "num_attention_heads", "2"},
      {"transformer", "ffn_dim", json::array({64})},
      {"transformer", "num_attention_heads", 1e30},
      {"transformer", "num_attention_heads", int64_t(1) << 40},
      {"vae", "z_dim", "16"},
  };
  for (const Case& c : cases) {
    const fs::path model = testing::copy_of_wan_tiny("hostile-config");
    const fs::path file = model / c.component / "config.json";
    json config = read_json_object(file);
    config[c.key] = c.value;
    testing::write_json_file(file, config);
    const std::string what = std::string(c.component) + "." + c.key + " = " + c.value.dump();
    for (const char* mode : {" --dry-run", ""}) {
      const auto result =
          run_command(mmgen() + " generate --prompt x --model-path " + model.string() + mode +
                      " --output-path " + (model.parent_path() / "out").string());
      expect_one_line_error(result, "\"" + std::string(c.key) + "\"", what + mode);
      EXPECT_NE(result.err.find(file.string()), std::string::npos) << what << mode << result.err;
    }
  }
  // attention_head_dim null takes diffusers' default (128), which this model's weights do not
  // have: one line too.
  const fs::path model = testing::copy_of_wan_tiny("hostile-config-null");
  json config = read_json_object(model / "transformer/config.json");
  config["attention_head_dim"] = nullptr;
  testing::write_json_file(model / "transformer/config.json", config);
  const auto result = run_command(mmgen() + " generate --prompt x --model-path " + model.string() +
                                  " --output-path " + (model.parent_path() / "out").string());
  EXPECT_EQ(result.exit_code, 1) << result.err;
  EXPECT_EQ(result.err.find("internal error"), std::string::npos) << result.err;
}

}  // namespace
}  // namespace mmgen
