// --attention-backend-config: the three SPEC forms, value coercion, validation against each
// backend's settings (defaults, aliases, every error), and the STA mask-strategy file.
#include "attention/backend_config.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "attention/backends/sliding_tile_attn/sta_mask.h"
#include "core/error.h"
#include "tests/test_support.h"

namespace mmgen::attention {
namespace {

using json = nlohmann::json;
using testing::scratch_dir;

fs::path write_file(const std::string& dir, const std::string& name, const std::string& text) {
  fs::path path = scratch_dir(dir) / name;
  std::ofstream(path) << text;
  return path;
}

// The Error message of `action`, or "" when it did not throw.
template <typename F>
std::string error_of(F&& action) {
  try {
    action();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

#define EXPECT_ERROR_HAS(action, ...)                                                             \
  do {                                                                                            \
    const std::string message = error_of([&] { action; });                                        \
    ASSERT_FALSE(message.empty()) << #action " did not throw";                                    \
    for (const char* part : {__VA_ARGS__})                                                        \
      EXPECT_NE(message.find(part), std::string::npos) << "'" << part << "' not in: " << message; \
    EXPECT_EQ(message.find('\n'), std::string::npos) << "one line: " << message;                  \
  } while (0)

json spec(const std::string& text) {
  return parse_backend_config_spec(json(text));
}

// ------------------------------------------------------------------ SPEC forms

TEST(BackendConfigSpec, NullAndEmptyMeanNoSettings) {
  EXPECT_EQ(parse_backend_config_spec(json()), json::object());
  EXPECT_EQ(spec("  "), json::object());
}

TEST(BackendConfigSpec, ObjectFromAConfigFilePassesThrough) {
  EXPECT_EQ(parse_backend_config_spec(json{{"sparsity", 0.5}}), json({{"sparsity", 0.5}}));
}

TEST(BackendConfigSpec, JsonFile) {
  auto path = write_file("spec-json", "vsa.json", R"({"sparsity": 0.9, "x": [1, 2]})");
  EXPECT_EQ(spec(path.string()), json({{"sparsity", 0.9}, {"x", {1, 2}}}));
}

TEST(BackendConfigSpec, YamlFilesBothExtensions) {
  auto yaml = write_file("spec-yaml", "sta.yaml", "sta_mode: STA_tuning\nskip_time_steps: 12\n");
  EXPECT_EQ(spec(yaml.string()), json({{"sta_mode", "STA_tuning"}, {"skip_time_steps", 12}}));
  auto yml =
      write_file("spec-yml", "vmoba.yml", "st_chunk_size: [4, 6, 4]\nmoba_threshold: -1e-3\n");
  EXPECT_EQ(spec(yml.string()), json({{"st_chunk_size", {4, 6, 4}}, {"moba_threshold", -1e-3}}));
  auto empty = write_file("spec-empty", "empty.yaml", "");
  EXPECT_EQ(spec(empty.string()), json::object());
}

TEST(BackendConfigSpec, FileErrors) {
  auto text = write_file("spec-txt", "settings.txt", "sparsity=0.9");
  EXPECT_ERROR_HAS(spec(text.string()), "--attention-backend-config", "settings.txt",
                   ".json, .yaml or .yml");
  EXPECT_ERROR_HAS(spec("/nonexistent/cfg.json"), "/nonexistent/cfg.json", "no such file");
  EXPECT_ERROR_HAS(spec("missing.yaml"), "no such file");
  auto list = write_file("spec-list", "list.yaml", "- 1\n- 2\n");
  EXPECT_ERROR_HAS(spec(list.string()), "list.yaml", "mapping");
  auto bad = write_file("spec-bad", "bad.json", "{\"a\": ");
  EXPECT_ERROR_HAS(spec(bad.string()), "bad.json", "malformed JSON");
}

TEST(BackendConfigSpec, JsonObjectString) {
  EXPECT_EQ(spec(R"({"sparsity": 0.9, "moba_config": {"st_topk": 3}})"),
            json({{"sparsity", 0.9}, {"moba_config", {{"st_topk", 3}}}}));
  EXPECT_ERROR_HAS(spec(R"({"sparsity": 0.9)"), "--attention-backend-config", "malformed JSON");
}

TEST(BackendConfigSpec, KeyValuePairsCoerceTypes) {
  const json parsed = spec(
      "a=true,b=FALSE,c=15,d=-3,e=+4,f=0.25,g=-1.5e-3,h=1e3,i=.5,j=2.,k=text,l=1.2.3,"
      "m=[1,2,3],n=[],o='x,y',p=\"q=r, s\",q=[a,[1,-2]],r=,s= spaced ");
  EXPECT_EQ(parsed["a"], true);
  EXPECT_EQ(parsed["b"], false);
  EXPECT_TRUE(parsed["c"].is_number_integer());
  EXPECT_EQ(parsed["c"], 15);
  EXPECT_EQ(parsed["d"], -3);
  EXPECT_EQ(parsed["e"], 4);
  EXPECT_TRUE(parsed["f"].is_number_float());
  EXPECT_DOUBLE_EQ(parsed["f"].get<double>(), 0.25);
  EXPECT_DOUBLE_EQ(parsed["g"].get<double>(), -1.5e-3);
  EXPECT_TRUE(parsed["h"].is_number_float());
  EXPECT_DOUBLE_EQ(parsed["h"].get<double>(), 1000.0);
  EXPECT_DOUBLE_EQ(parsed["i"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(parsed["j"].get<double>(), 2.0);
  EXPECT_EQ(parsed["k"], "text");
  EXPECT_EQ(parsed["l"], "1.2.3");  // not a number: stays text (validation rejects it later)
  EXPECT_EQ(parsed["m"], json({1, 2, 3}));
  EXPECT_EQ(parsed["n"], json::array());
  EXPECT_EQ(parsed["o"], "x,y");
  EXPECT_EQ(parsed["p"], "q=r, s");
  EXPECT_EQ(parsed["q"], json::parse(R"(["a", [1, -2]])"));
  EXPECT_EQ(parsed["r"], "");
  EXPECT_EQ(parsed["s"], "spaced");
}

TEST(BackendConfigSpec, DottedKeysNest) {
  EXPECT_EQ(spec("moba_config.st_topk=3,moba_config.temporal_topk=2"),
            json({{"moba_config", {{"st_topk", 3}, {"temporal_topk", 2}}}}));
}

TEST(BackendConfigSpec, KeyValueErrors) {
  EXPECT_ERROR_HAS(spec("sparsity=0.9,oops"), "'oops' is not key=value");
  EXPECT_ERROR_HAS(spec("=3"), "no key");
  EXPECT_ERROR_HAS(spec("a=1,a=2"), "'a' is given twice");
  EXPECT_ERROR_HAS(spec("a='open"), "unterminated quote");
  EXPECT_ERROR_HAS(spec("a=[1,2"), "unclosed '['");
  EXPECT_ERROR_HAS(spec("a=1]"), "unmatched ']'");
  EXPECT_ERROR_HAS(spec("a=[1,,2]"), "empty item");
  EXPECT_ERROR_HAS(parse_backend_config_spec(json(3)), "expected a file");
}

// ------------------------------------------------------------------ validation

json validate(const std::string& text, const std::string& backend) {
  return validate_backend_config(spec(text), backend);
}

TEST(BackendConfigValidation, DefaultsAreFilledIn) {
  EXPECT_EQ(validate("", "video_sparse_attn"), json({{"sparsity", 0.0}}));
  EXPECT_EQ(validate("", "torch_sdpa"), json::object());
  EXPECT_EQ(validate("", "fa"), json::object());
  const json vmoba = validate("", "vmoba_attn");
  EXPECT_EQ(vmoba["moba_threshold"], 0.25);
  EXPECT_EQ(vmoba["moba_select_mode"], "threshold");
  EXPECT_EQ(vmoba["moba_threshold_type"], "query_head");
  EXPECT_EQ(vmoba["first_full_step"], 12);
  EXPECT_EQ(vmoba["first_full_layer"], 0);
  EXPECT_EQ(vmoba["temporal_layer"], 1);
  EXPECT_EQ(vmoba["spatial_layer"], 1);
  EXPECT_EQ(vmoba["st_layer"], 1);
  EXPECT_EQ(vmoba["spatial_chunk_size"], json({3, 4}));
  const json sla = validate("", "sla_attn");
  EXPECT_DOUBLE_EQ(sla["topk"].get<double>(), 0.1);
  EXPECT_EQ(sla["feature_map"], "softmax");
  EXPECT_EQ(validate("", "sage_sla_attn")["block_q"], 128);
  const json svg2 = validate("", "sparse_video_gen_2_attn");
  EXPECT_EQ(svg2["num_q_centroids"], 300);
  EXPECT_EQ(svg2["num_k_centroids"], 1000);
  EXPECT_EQ(svg2["zero_step_kmeans_init"], false);
  EXPECT_EQ(validate("", "sage_attn")["qk_quant_gran"], "per_block");
  EXPECT_EQ(validate("", "sage_attn_3")["per_block_mean"], true);
}

// A mask file is optional since issue 51 (window_size runs without one); the search needs the file
// it writes.
TEST(BackendConfigValidation, StaNeedsAnOutputFileOnlyForSearching) {
  EXPECT_EQ(validate("", "sliding_tile_attn")["window_size"], json({3, 3, 3}));
  EXPECT_ERROR_HAS(validate("sta_mode=STA_searching", "sliding_tile_attn"), "sliding_tile_attn",
                   "sta_mode=STA_searching", "needs mask_search_output",
                   "add mask_search_output=FILE");
  const json tuning = validate("sta_mode=STA_tuning", "sliding_tile_attn");
  EXPECT_EQ(tuning, json({{"sta_mode", "STA_tuning"},
                          {"skip_time_steps", 15},
                          {"window_size", {3, 3, 3}},
                          {"mask_search_threshold", 0.05},
                          {"tile_size", {6, 8, 8}}}));
  auto mask = write_file("sta-valid", "mask.json", R"({"0_0_0": [1, 2, 3]})");
  const json inference = validate("mask_strategy_file_path=" + mask.string(), "sliding_tile_attn");
  EXPECT_EQ(inference["mask_strategy_file_path"], mask.string());
  EXPECT_EQ(inference["sta_mode"], "STA_inference");
  EXPECT_ERROR_HAS(validate("mask_strategy_file_path=/nonexistent/mask.json", "sliding_tile_attn"),
                   "mask_strategy_file_path", "no such file", "/nonexistent/mask.json");
}

TEST(BackendConfigValidation, SglangSpellingsAreAliases) {
  EXPECT_EQ(validate("VSA_sparsity=0.9", "video_sparse_attn"), json({{"sparsity", 0.9}}));
  EXPECT_EQ(validate("STA_mode=STA_searching,mask_search_output=mask.json",
                     "sliding_tile_attn")["sta_mode"],
            "STA_searching");
  const json moba =
      validate(R"({"moba_config": {"st_topk": 7, "moba_select_mode": "topk"}})", "vmoba_attn");
  EXPECT_EQ(moba["st_topk"], 7);
  EXPECT_EQ(moba["moba_select_mode"], "topk");
  EXPECT_FALSE(moba.contains("moba_config"));
  EXPECT_EQ(validate("moba_config.temporal_topk=5", "vmoba_attn")["temporal_topk"], 5);
  EXPECT_EQ(validate("svg2_num_q_centroids=64", "sparse_video_gen_2_attn")["num_q_centroids"], 64);
  EXPECT_DOUBLE_EQ(validate("topk_ratio=0.5", "sla_attn")["topk"].get<double>(), 0.5);
  EXPECT_EQ(validate("BLKQ=64,BLKK=64", "sla_attn")["block_q"], 64);
  EXPECT_EQ(
      validate("skip-time-steps=3,sta_mode=STA_tuning", "sliding_tile_attn")["skip_time_steps"], 3);
  EXPECT_ERROR_HAS(validate("sparsity=0.5,VSA_sparsity=0.6", "video_sparse_attn"),
                   "sparsity is given twice", "VSA_sparsity");
}

TEST(BackendConfigValidation, ChoicesAreCaseInsensitiveAndCanonical) {
  EXPECT_EQ(validate("sta_mode=sta_inference,mask_strategy_file_path=" +
                         write_file("sta-case", "m.json", R"({"0_0_0": [1,1,1]})").string(),
                     "sliding_tile_attn")["sta_mode"],
            "STA_inference");
  EXPECT_EQ(validate("feature_map=ELU", "sla_attn")["feature_map"], "elu");
}

TEST(BackendConfigValidation, UnknownKeysNameTheValidOnes) {
  EXPECT_ERROR_HAS(validate("sparsty=0.9", "video_sparse_attn"), "unknown key 'sparsty'",
                   "video_sparse_attn", "valid keys: sparsity", "did you mean sparsity?");
  EXPECT_ERROR_HAS(validate("moba_threshhold=0.3", "vmoba_attn"), "valid keys:", "moba_threshold",
                   "temporal_chunk_size");
  EXPECT_ERROR_HAS(validate("sparsity=0.9", "torch_sdpa"), "torch_sdpa takes no settings",
                   "'sparsity' is a setting of video_sparse_attn");
  EXPECT_ERROR_HAS(validate("sparsity=0.9", "sliding_tile_attn"), "unknown key 'sparsity'",
                   "is a setting of video_sparse_attn");
  // moba_config is a group only for V-MoBA.
  EXPECT_ERROR_HAS(validate(R"({"moba_config": {}})", "video_sparse_attn"),
                   "unknown key 'moba_config'");
}

TEST(BackendConfigValidation, WrongTypesAndRangesNameTheKeyAndWhatItAccepts) {
  struct Case {
    std::string spec, backend;
    std::vector<const char*> parts;
  };
  const std::vector<Case> cases = {
      {"sparsity=1", "video_sparse_attn", {"sparsity must be a number in [0, 1)", "got 1"}},
      {"sparsity=-0.1", "video_sparse_attn", {"a number in [0, 1)", "got -0.1"}},
      {"sparsity=high", "video_sparse_attn", {"sparsity must be a number", "\"high\""}},
      {"sparsity=1.2.3", "video_sparse_attn", {"sparsity must be a number", "\"1.2.3\""}},
      {"skip_time_steps=2.5,sta_mode=STA_tuning",
       "sliding_tile_attn",
       {"skip_time_steps must be a whole number in [0, 10000]", "got 2.5"}},
      {"skip_time_steps=-1,sta_mode=STA_tuning",
       "sliding_tile_attn",
       {"whole number in [0, 10000]"}},
      {"sta_mode=fast",
       "sliding_tile_attn",
       {"sta_mode must be one of STA_inference, STA_searching, STA_tuning, STA_tuning_cfg"}},
      {"tile_size=[6,8],sta_mode=STA_tuning",
       "sliding_tile_attn",
       {"tile_size must be a list of 3 whole numbers in [1, 4096]", "[6,8,8]", "got [6,8]"}},
      {"tile_size=[6,0,8],sta_mode=STA_tuning", "sliding_tile_attn", {"tile_size must be"}},
      {"spatial_chunk_size=3", "vmoba_attn", {"spatial_chunk_size must be a list of 2"}},
      {"moba_threshold=0", "vmoba_attn", {"moba_threshold must be a number in (0, 1]"}},
      {"moba_select_mode=best", "vmoba_attn", {"one of threshold, topk"}},
      {"moba_threshold_type=block", "vmoba_attn", {"one of query_head, head_global, overall"}},
      {"temporal_topk=0", "vmoba_attn", {"temporal_topk must be a whole number in [1, 1048576]"}},
      {"topk=0", "sla_attn", {"topk must be a number in (0, 1]"}},
      {"feature_map=hedgehog", "sla_attn", {"one of softmax, elu, relu"}},
      {"smooth_k=1", "sage_attn", {"smooth_k must be true or false", "got 1"}},
      {"zero_step_kmeans_init=yes", "sparse_video_gen_2_attn", {"true or false"}},
      {"top_p_kmeans=1.5", "sparse_video_gen_2_attn", {"top_p_kmeans must be a number in (0, 1]"}},
      {R"({"moba_config": 3})", "vmoba_attn", {"moba_config must be an object"}},
      {"mask_strategy_file_path=7",
       "sliding_tile_attn",
       {"mask_strategy_file_path must be the path of an existing file"}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.spec);
    const std::string message = error_of([&] { validate(c.spec, c.backend); });
    ASSERT_FALSE(message.empty());
    EXPECT_NE(message.find("--attention-backend-config"), std::string::npos) << message;
    for (const char* part : c.parts)
      EXPECT_NE(message.find(part), std::string::npos) << "'" << part << "' not in: " << message;
  }
}

void expect_error_parts(const std::string& spec, const std::string& backend,
                        const std::vector<std::string>& parts) {
  SCOPED_TRACE(spec);
  const std::string message = error_of([&] { validate(spec, backend); });
  for (const auto& part : parts)
    EXPECT_NE(message.find(part), std::string::npos) << "'" << part << "' not in: " << message;
}

// Every whole-number setting has both bounds, within the config-integer limit: a tile of 2^32
// tokens per axis once wrapped its volume to 0 and divided by it (SIGFPE, issue 52).
TEST(BackendConfigValidation, EveryIntegerSettingIsBounded) {
  int checked = 0;
  for (const BackendInfo& backend : backend_catalogue())
    for (const ConfigKey& key : backend.config) {
      if (key.type != ConfigType::Int && key.type != ConfigType::IntList) continue;
      SCOPED_TRACE(std::string(backend.name) + "." + std::string(key.name));
      ASSERT_TRUE(key.min.has_value());
      ASSERT_TRUE(key.max.has_value());
      EXPECT_LE(*key.max, double(int64_t(1) << 24));
      // A list's product (a tile's volume) stays far inside int64.
      if (key.type == ConfigType::IntList && key.list_length > 0) {
        EXPECT_LE(std::pow(*key.max, double(key.list_length)), 1e15);
      }
      ++checked;
    }
  EXPECT_GE(checked, 15);
  expect_error_parts("tile_size=[4294967296,4294967296,1]", "sliding_tile_attn",
                     {"tile_size must be a list of 3 whole numbers in [1, 4096]"});
  expect_error_parts("tile_size=[2097152,2097152,4194304]", "sliding_tile_attn",
                     {"tile_size must be"});
  expect_error_parts("num_q_centroids=18446744073709551615", "sparse_video_gen_2_attn",
                     {"num_q_centroids must be a whole number in [1, 1048576]"});
}

TEST(BackendConfigValidation, IntegersAreAcceptedForFloats) {
  const json config = validate("moba_threshold=1", "vmoba_attn");
  EXPECT_TRUE(config["moba_threshold"].is_number_float());
  EXPECT_DOUBLE_EQ(config["moba_threshold"].get<double>(), 1.0);
}

TEST(BackendConfigValidation, SeveralBackendsShareOneConfig) {
  const auto configs = validate_backend_configs(spec("sparsity=0.5,feature_map=relu"),
                                                {"video_sparse_attn", "sla_attn"});
  ASSERT_EQ(configs.size(), 2u);
  EXPECT_EQ(configs[0], json({{"sparsity", 0.5}}));
  EXPECT_EQ(configs[1]["feature_map"], "relu");
  EXPECT_FALSE(configs[1].contains("sparsity"));
  EXPECT_ERROR_HAS(validate_backend_configs(spec("nope=1"), {"video_sparse_attn", "sla_attn"}),
                   "unknown key 'nope'", "sparsity (video_sparse_attn)", "topk (sla_attn)");
  EXPECT_ERROR_HAS(validate_backend_configs(spec("sparsity=2"), {"video_sparse_attn", "sla_attn"}),
                   "sparsity must be a number in [0, 1)");
}

TEST(BackendConfigValidation, DescribeAccepted) {
  ConfigKey key{
      .name = "k", .type = ConfigType::Float, .min = 0.0, .max = 1.0, .max_inclusive = false};
  EXPECT_EQ(describe_accepted(key), "a number in [0, 1)");
  key.max.reset();
  key.min_inclusive = false;
  EXPECT_EQ(describe_accepted(key), "a number > 0");
}

// ------------------------------------------------------------------ STA mask strategy

std::string full_mask(int steps, int layers, int heads) {
  json mask = json::object();
  for (int t = 0; t < steps; ++t)
    for (int l = 0; l < layers; ++l)
      for (int h = 0; h < heads; ++h)
        mask[fmt::format("{}_{}_{}", t, l, h)] = {1 + t % 3, 2, 1 + h};
  return mask.dump();
}

TEST(StaMaskStrategy, LoadsWindows) {
  auto path = write_file("mask-load", "mask.json", full_mask(4, 2, 3));
  const auto mask = StaMaskStrategy::load(path);
  EXPECT_EQ(mask.steps(), 4);
  EXPECT_EQ(mask.layers(), 2);
  EXPECT_EQ(mask.heads(), 3);
  EXPECT_EQ(mask.entries(), 24u);
  ASSERT_TRUE(mask.window(2, 1, 2));
  EXPECT_EQ(*mask.window(2, 1, 2), (StaMaskStrategy::Window{3, 2, 3}));
  EXPECT_FALSE(mask.window(4, 0, 0));
  EXPECT_FALSE(mask.window(0, 2, 0));
  EXPECT_NO_THROW(mask.check(4, 2, 3, 0));
  EXPECT_NO_THROW(mask.check(3, 2, 3, 0));  // extra steps in the file are unused
}

TEST(StaMaskStrategy, CheckAgainstTheModelAndRun) {
  auto path = write_file("mask-check", "mask.json", full_mask(4, 2, 3));
  const auto mask = StaMaskStrategy::load(path);
  EXPECT_ERROR_HAS(mask.check(6, 2, 3, 0), "mask.json", "no window for \"4_0_0\"", "12 of the 36",
                   "raise skip_time_steps");
  EXPECT_NO_THROW(mask.check(6, 2, 3, 6));  // every step runs full attention
  EXPECT_ERROR_HAS(mask.check(4, 1, 3, 0), "windows for layer 1", "has 1 layers", "another model");
  EXPECT_ERROR_HAS(mask.check(4, 2, 2, 0), "windows for head 2", "has 2 heads");
  EXPECT_ERROR_HAS(mask.check(4, 3, 3, 0), "no window for \"0_2_0\"");
}

TEST(StaMaskStrategy, MalformedFiles) {
  EXPECT_ERROR_HAS(StaMaskStrategy::load(write_file("mask-key", "m.json", R"({"0-0-0": [1,1,1]})")),
                   "m.json", "key '0-0-0'", "step_layer_head");
  EXPECT_ERROR_HAS(StaMaskStrategy::load(write_file("mask-value", "m.json", R"({"0_0_0": [1,1]})")),
                   "\"0_0_0\" must be a window [wt, wh, ww]");
  EXPECT_ERROR_HAS(
      StaMaskStrategy::load(write_file("mask-zero", "m.json", R"({"0_0_0": [0,1,1]})")), ">= 1");
  EXPECT_ERROR_HAS(StaMaskStrategy::load(write_file("mask-empty", "m.json", "{}")), "no windows");
  EXPECT_ERROR_HAS(StaMaskStrategy::load(write_file("mask-list", "m.json", "[1]")), "JSON object");
}

}  // namespace
}  // namespace mmgen::attention
