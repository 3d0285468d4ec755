#include "core/safetensors.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/npy.h"
#include "tests/test_support.h"

namespace mmgen {
namespace {

using testing::scratch_dir;

// Writes a safetensors file from a raw header string and data bytes, header length as given.
fs::path write_raw(const fs::path& path, const std::string& header, size_t data_bytes,
                   int64_t length_override = -1) {
  std::ofstream out(path, std::ios::binary);
  uint64_t length = length_override >= 0 ? uint64_t(length_override) : header.size();
  for (int i = 0; i < 8; ++i) out.put(char((length >> (8 * i)) & 0xff));
  out << header;
  out << std::string(data_bytes, '\0');
  return path;
}

std::string error_of(const fs::path& path) {
  try {
    SafetensorsFile::open(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Safetensors, RoundTripKeepsValuesDtypesAndMetadata) {
  fs::path dir = scratch_dir("st-roundtrip");
  Tensor a = Tensor::from_vector({2, 3}, std::vector<float>{1, 2, 3, 4, 5, 6});
  Tensor ids = Tensor::from_vector({4}, std::vector<int64_t>{7, 8, 9, -1});
  Tensor half = a.to(DType::BF16);
  write_safetensors(dir / "x.safetensors", {{"a", a.permute({1, 0})}, {"ids", ids}, {"half", half}},
                    {{"format", "pt"}});
  SafetensorsFile file = SafetensorsFile::open(dir / "x.safetensors");
  EXPECT_EQ(file.names(), (std::vector<std::string>{"a", "half", "ids"}));
  EXPECT_EQ(file.metadata().at("format"), "pt");
  Tensor back = file.tensor("a");
  EXPECT_EQ(back.shape(), (Shape{3, 2}));
  EXPECT_EQ(back.item_f32({0, 1}), 4.0f);  // transposed on write
  EXPECT_EQ(file.tensor("ids").data<int64_t>()[3], -1);
  EXPECT_EQ(file.tensor("half").dtype(), DType::BF16);
  EXPECT_EQ(file.tensor("half").item_f32({1, 2}), 6.0f);
  EXPECT_TRUE(fs::exists(dir / "x.safetensors"));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()),
            1);  // no temp left
}

TEST(Safetensors, RejectsTruncatedFile) {
  fs::path dir = scratch_dir("st-bad1");
  std::ofstream(dir / "short.safetensors") << "abc";
  EXPECT_NE(error_of(dir / "short.safetensors").find("too short"), std::string::npos);
}

TEST(Safetensors, RejectsHeaderLengthPastEnd) {
  fs::path dir = scratch_dir("st-bad2");
  write_raw(dir / "x.safetensors", "{}", 0, 5000);
  EXPECT_NE(error_of(dir / "x.safetensors").find("runs past the end"), std::string::npos);
  write_raw(dir / "y.safetensors", "{}", 0, int64_t(1) << 40);
  EXPECT_NE(error_of(dir / "y.safetensors").find("larger than"), std::string::npos);
}

TEST(Safetensors, RejectsBadJson) {
  fs::path dir = scratch_dir("st-bad3");
  write_raw(dir / "x.safetensors", "{\"a\": ", 0);
  EXPECT_NE(error_of(dir / "x.safetensors").find("x.safetensors header: malformed JSON"),
            std::string::npos);
  // Nesting past the JSON depth bound (core/json.h) is refused like any malformed header.
  write_raw(dir / "deep.safetensors", std::string(5000, '[') + std::string(5000, ']'), 0);
  EXPECT_NE(error_of(dir / "deep.safetensors").find("nested deeper than"), std::string::npos);
  write_raw(dir / "y.safetensors", "[1, 2]", 0);
  EXPECT_NE(error_of(dir / "y.safetensors").find("not a JSON object"), std::string::npos);
}

TEST(Safetensors, RejectsOverlappingOffsets) {
  fs::path dir = scratch_dir("st-bad4");
  write_raw(
      dir / "x.safetensors",
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
      12);
  EXPECT_NE(error_of(dir / "x.safetensors").find("overlap"), std::string::npos);
}

TEST(Safetensors, RejectsOutOfRangeOffsets) {
  fs::path dir = scratch_dir("st-bad5");
  write_raw(dir / "x.safetensors", R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8);
  EXPECT_NE(error_of(dir / "x.safetensors").find("data section has only 8 bytes"),
            std::string::npos);
  write_raw(dir / "y.safetensors", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})", 8);
  EXPECT_NE(error_of(dir / "y.safetensors").find("begin after end"), std::string::npos);
}

TEST(Safetensors, RejectsUnknownDtype) {
  fs::path dir = scratch_dir("st-bad6");
  write_raw(dir / "x.safetensors", R"({"a":{"dtype":"Q4","shape":[1],"data_offsets":[0,1]}})", 1);
  EXPECT_NE(error_of(dir / "x.safetensors").find("unknown dtype 'Q4'"), std::string::npos);
}

TEST(Safetensors, RejectsSizeMismatch) {
  fs::path dir = scratch_dir("st-bad7");
  write_raw(dir / "x.safetensors", R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8);
  EXPECT_NE(error_of(dir / "x.safetensors").find("offsets span 8 bytes"), std::string::npos);
  // A shape whose byte count overflows 64 bits is refused, not wrapped around.
  write_raw(dir / "y.safetensors",
            R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}})", 0);
  EXPECT_NE(error_of(dir / "y.safetensors").find("too large"), std::string::npos);
}

TEST(Safetensors, ShardedFolderThroughIndex) {
  fs::path dir = scratch_dir("st-sharded");
  write_safetensors(dir / "model-00001-of-00002.safetensors", {{"x", Tensor::full({2}, 1.0f)}});
  write_safetensors(dir / "model-00002-of-00002.safetensors", {{"y", Tensor::full({3}, 2.0f)}});
  nlohmann::json index = {
      {"metadata", {{"total_size", 20}}},
      {"weight_map",
       {{"x", "model-00001-of-00002.safetensors"}, {"y", "model-00002-of-00002.safetensors"}}}};
  std::ofstream(dir / "model.safetensors.index.json") << index.dump();
  WeightStore store = WeightStore::open_folder(dir);
  EXPECT_EQ(store.names(), (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(store.get_f32("y").item_f32({2}), 2.0f);
  EXPECT_EQ(store.stored_bytes(), 20u);
  EXPECT_THROW(store.get("z"), Error);
  EXPECT_THROW(store.get_f32("y", {4}), Error);

  // An index may not point outside the folder.
  index["weight_map"]["y"] = "../elsewhere.safetensors";
  std::ofstream(dir / "model.safetensors.index.json") << index.dump();
  EXPECT_THROW(WeightStore::open_folder(dir), Error);
}

TEST(Safetensors, FixtureWeightsLoad) {
  MMGEN_REQUIRE_SHARED();
  WeightStore store =
      WeightStore::open_folder(testing::shared_dir() / "fixtures/wan-tiny/model/transformer");
  EXPECT_EQ(store.info("patch_embedding.weight").shape, (Shape{48, 16, 1, 2, 2}));
  WeightStore shapes =
      WeightStore::open_folder(testing::source_dir() / "examples/models/wan-shapes/transformer");
  EXPECT_EQ(shapes.get("patch_embedding.weight").dtype(), DType::BF16);
}

TEST(Npy, RoundTripAndRejectsGarbage) {
  fs::path dir = scratch_dir("npy");
  Tensor t = Tensor::from_vector({2, 2}, std::vector<float>{1, 2, 3, 4});
  write_npy(dir / "t.npy", t);
  Tensor back = read_npy(dir / "t.npy");
  EXPECT_EQ(back.shape(), (Shape{2, 2}));
  EXPECT_EQ(back.item_f32({1, 0}), 3.0f);
  write_npy(dir / "v.npy", Tensor::full({5}, 2.0f));
  EXPECT_EQ(read_npy(dir / "v.npy").shape(), (Shape{5}));
  std::ofstream(dir / "bad.npy") << "not numpy at all";
  EXPECT_THROW(read_npy(dir / "bad.npy"), Error);
}

// A version-1 .npy file with the given header dictionary and data bytes.
fs::path write_raw_npy(const fs::path& path, const std::string& dictionary, size_t data_bytes) {
  std::string header = dictionary;
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::ofstream out(path, std::ios::binary);
  out.write("\x93NUMPY\x01\x00", 8);
  out.put(char(header.size() & 0xff));
  out.put(char(header.size() >> 8));
  out << header << std::string(data_bytes, '\0');
  return path;
}

// The shape tuple is read entry by entry: a 0-d array, a 1-tuple with its trailing comma, and
// entries that are not non-negative integers ('-3' was read as 3, '1e5' as the two extents 1 and
// 5).
TEST(Npy, ShapeTupleEntriesAreNonNegativeIntegers) {
  fs::path dir = scratch_dir("npy-shapes");
  auto dictionary = [](const std::string& shape) {
    return "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape + ", }";
  };
  EXPECT_EQ(read_npy(write_raw_npy(dir / "scalar.npy", dictionary("()"), 4)).shape(), Shape{});
  EXPECT_EQ(read_npy(write_raw_npy(dir / "one.npy", dictionary("(3,)"), 12)).shape(), Shape{3});
  EXPECT_EQ(read_npy(write_raw_npy(dir / "two.npy", dictionary("(2, 3)"), 24)).shape(),
            (Shape{2, 3}));
  EXPECT_EQ(read_npy(write_raw_npy(dir / "empty.npy", dictionary("(0, 4)"), 0)).shape(),
            (Shape{0, 4}));
  // Each with data sized for what the digits alone would give ((3), (1, 5), (5, 2), (2), (),
  // (3, 0)), so only the shape check can refuse it.
  const std::vector<std::pair<std::string, size_t>> bad = {
      {"(-3,)", 12}, {"(1e5,)", 20}, {"(5,,2)", 40}, {"(2, x)", 8}, {"(,)", 4}, {"(3.0,)", 0}};
  for (const auto& [shape, bytes] : bad) {
    SCOPED_TRACE(shape);
    EXPECT_THROW(read_npy(write_raw_npy(dir / "bad.npy", dictionary(shape), bytes)), Error);
  }
}

}  // namespace
}  // namespace mmgen
