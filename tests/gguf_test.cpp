// GGUF reading (issue 23): a file the `gguf` Python package wrote (tests/data/gguf/make_fixture.py)
// reads back with its metadata and shapes, every tensor type dequantizes to what the package's
// own dequantize gives, bit for bit, and a damaged file is refused in one line naming what is
// wrong, never read past its end.
#include "core/gguf.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>

#include "core/error.h"
#include "tests/test_support.h"

namespace mmgen {
namespace {

fs::path fixture() {
  return testing::source_dir() / "tests/data/gguf/types.gguf";
}

std::string bytes_of(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

fs::path write_bytes(const std::string& name, const std::string& bytes) {
  const fs::path path = testing::scratch_dir("gguf_test") / name;
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

TEST(Gguf, ReadsTheMetadataAndTheTensorTable) {
  const gguf::GgufFile file = gguf::GgufFile::open(fixture());
  EXPECT_EQ(file.version(), 3u);
  EXPECT_EQ(file.metadata().at("general.architecture"), "mmgen-test");
  EXPECT_EQ(file.metadata().at("mmgen.test.count"), 7);
  EXPECT_EQ(file.metadata().at("mmgen.test.list"), nlohmann::json({1, 2, 3}));
  EXPECT_EQ(file.metadata().at("mmgen.test.text"), "grüße");
  ASSERT_EQ(file.tensors().size(), 22u);
  const gguf::GgufTensorInfo* q8 = file.find("q8_0");
  ASSERT_NE(q8, nullptr);
  EXPECT_EQ(q8->type, gguf::GgmlType::Q8_0);
  EXPECT_EQ(q8->shape, (Shape{2, 3, 64}));  // row-major: GGUF's innermost dimension last
  EXPECT_EQ(q8->nbytes, 6u * 2 * 34);       // 6 rows of two 34-byte blocks
  EXPECT_EQ(file.find("q6_k")->shape, (Shape{3, 512}));
  EXPECT_EQ(file.find("absent"), nullptr);
  EXPECT_THROW(file.to_f32("absent"), Error);
}

TEST(Gguf, EveryTypeDequantizesAsTheGgufPackageDoesBitForBit) {
  const gguf::GgufFile file = gguf::GgufFile::open(fixture());
  for (const char* name :
       {"f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q4_k", "q5_k", "q6_k"}) {
    SCOPED_TRACE(name);
    const Tensor ours = file.to_f32(name);
    const Tensor expected = file.to_f32(std::string(name) + ".expected");
    ASSERT_EQ(ours.shape(), expected.shape());
    EXPECT_EQ(std::memcmp(ours.raw(), expected.raw(), ours.nbytes()), 0)
        << "max diff " << testing::max_abs_diff(ours, expected);
  }
  // The quantized values are near the stored ones (the package quantized f32's values).
  EXPECT_LT(testing::max_abs_diff(file.to_f32("q8_0"), file.to_f32("f32")), 0.02);
  EXPECT_LT(testing::max_abs_diff(file.to_f32("q4_0"), file.to_f32("f32")), 0.4);
}

TEST(Gguf, ADamagedFileIsRefusedInOneLine) {
  const std::string good = bytes_of(fixture());
  const auto refusal = [](const fs::path& path) {
    return testing::error_message([&] { gguf::GgufFile::open(path); });
  };
  std::string bad_magic = good;
  bad_magic[0] = 'X';
  EXPECT_NE(refusal(write_bytes("magic.gguf", bad_magic)).find("does not start with \"GGUF\""),
            std::string::npos);
  // Cut inside the header, then inside the last tensor's data.
  EXPECT_NE(refusal(write_bytes("header.gguf", good.substr(0, 100))).find("the file ends inside"),
            std::string::npos);
  EXPECT_NE(refusal(write_bytes("data.gguf", good.substr(0, good.size() - 10))).find("truncated"),
            std::string::npos);
  // A tensor count far beyond the file.
  std::string many = good;
  const uint64_t count = uint64_t(1) << 40;
  std::memcpy(many.data() + 8, &count, 8);
  EXPECT_NE(refusal(write_bytes("count.gguf", many)).find("tensors"), std::string::npos);
  // An unknown tensor type: the first tensor's type field, after its name and dimensions.
  std::string unknown = good;
  const size_t name_at = unknown.find("f32\x03", 24);  // "f32", then n_dims = 3
  ASSERT_NE(name_at, std::string::npos);
  const uint32_t type = 99;
  std::memcpy(unknown.data() + name_at + 3 + 4 + 3 * 8, &type, 4);
  const std::string message = refusal(write_bytes("type.gguf", unknown));
  EXPECT_NE(message.find("ggml type 99"), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
}

}  // namespace
}  // namespace mmgen
