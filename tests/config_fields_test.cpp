// core/config_fields.h, the one reader of every model config's fields: absent or null keys take
// the default, every wrong type or range is one line naming the key and the file.
#include "core/config_fields.h"

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/test_support.h"

namespace mmgen {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;
using testing::error_message;

const std::string kWhere = "model/transformer/config.json";

void expect_refusal(const std::function<void()>& read, const std::string& key,
                    const std::string& part) {
  const std::string message = error_message(read);
  EXPECT_NE(message.find(kWhere), std::string::npos) << message;
  EXPECT_NE(message.find("\"" + key + "\""), std::string::npos) << message;
  EXPECT_NE(message.find(part), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
}

TEST(ConfigFields, AbsentAndNullKeysTakeTheDefault) {
  const json config = {{"present", nullptr}};
  EXPECT_TRUE(config_boolean(config, "present", true, kWhere));
  EXPECT_FALSE(config_boolean(config, "absent", false, kWhere));
  EXPECT_EQ(config_number(config, "present", 2.5, kWhere), 2.5);
  EXPECT_EQ(config_float(config, "absent", 1e-6f, kWhere), 1e-6f);
  std::array<int64_t, 3> axes = {16, 56, 56};
  config_integers(config, "present", axes, kWhere, "one per RoPE axis");
  EXPECT_EQ(axes, (std::array<int64_t, 3>{16, 56, 56}));
}

TEST(ConfigFields, ReadsValuesOfTheRightType) {
  const json config = {
      {"flag", true}, {"eps", 1e-5}, {"theta", 10000}, {"axes", {8, 12, 12}}, {"big", 3.0e38}};
  EXPECT_TRUE(config_boolean(config, "flag", false, kWhere));
  EXPECT_EQ(config_float(config, "eps", 0.0f, kWhere, NumberRule::Positive), 1e-5f);
  EXPECT_EQ(config_number(config, "theta", 0.0, kWhere, NumberRule::Positive), 10000.0);
  EXPECT_EQ(config_float(config, "big", 0.0f, kWhere), 3.0e38f);
  std::array<int64_t, 3> axes{};
  config_integers(config, "axes", axes, kWhere, "one per RoPE axis", 1);
  EXPECT_EQ(axes, (std::array<int64_t, 3>{8, 12, 12}));
}

TEST(ConfigFields, RefusesWrongTypesAndRangesNamingKeyAndFile) {
  std::array<int64_t, 3> axes{};
  const json config = {
      {"flag", 1},     {"text", "1e-5"},  {"negative", -1.0},        {"huge", 1e39},
      {"tiny", 1e-50}, {"short", {1, 2}}, {"fraction", {1, 2.5, 3}}, {"past", {1, 2, 1 << 30}}};
  expect_refusal([&] { config_boolean(config, "flag", false, kWhere); }, "flag",
                 "must be true or false, got 1");
  expect_refusal([&] { config_number(config, "text", 0.0, kWhere); }, "text",
                 "must be a finite number, got \"1e-5\"");
  expect_refusal([&] { config_number(config, "negative", 1.0, kWhere, NumberRule::Positive); },
                 "negative", "must be a positive number, got -1");
  expect_refusal([&] { config_float(config, "huge", 0.0f, kWhere); }, "huge",
                 "must be a float32 number");
  // 1e-50 is positive as a double but 0 as a float32: an epsilon of 0 would divide by zero.
  expect_refusal([&] { config_float(config, "tiny", 1.0f, kWhere, NumberRule::Positive); }, "tiny",
                 "must be a float32 number above 0");
  expect_refusal([&] { config_integers(config, "short", axes, kWhere, "one per RoPE axis"); },
                 "short", "must be a list of 3 integers");
  expect_refusal(
      [&] { config_integers(config, "fraction", axes, kWhere, "frames, rows, columns"); },
      "fraction", "(frames, rows, columns), got [1,2.5,3]");
  expect_refusal([&] { config_integers(config, "past", axes, kWhere, "one per RoPE axis"); },
                 "past", "from 0 to 16777216");
  EXPECT_EQ(axes, (std::array<int64_t, 3>{}));  // nothing read from a refused list
}

TEST(ConfigFields, ChecksTheClassNameWhereOneIsGiven) {
  check_config_class(json{{"dim", 4}}, "ZImageTransformer2DModel", kWhere);
  check_config_class(json{{"_class_name", "ZImageTransformer2DModel"}}, "ZImageTransformer2DModel",
                     kWhere);
  const std::string wrong = error_message([&] {
    check_config_class(json{{"_class_name", "WanTransformer3DModel"}}, "ZImageTransformer2DModel",
                       kWhere);
  });
  EXPECT_NE(wrong.find("_class_name is \"WanTransformer3DModel\", expected "
                       "\"ZImageTransformer2DModel\""),
            std::string::npos)
      << wrong;
  const std::string array = error_message([&] { check_config_class(json::array(), "X", kWhere); });
  EXPECT_NE(array.find("expected a JSON object"), std::string::npos) << array;
}

TEST(ConfigFields, AConfigFileMustHoldAnObject) {
  const fs::path file = fs::temp_directory_path() / "mmgen_config_fields_test.json";
  std::ofstream(file) << "[1, 2]";
  const std::string message =
      error_message([&] { (void)read_config_file(file, "re-download the VAE's config.json"); });
  fs::remove(file);
  EXPECT_NE(message.find(file.string() + ": expected a JSON object; re-download the VAE's"),
            std::string::npos)
      << message;
}

}  // namespace
}  // namespace mmgen
