// GGUF reading (issue 23): a file the `gguf` Python package wrote (tests/data/gguf/make_fixture.py)
// reads back with its metadata and shapes, every tensor type dequantizes to what the package's
// own dequantize gives, bit for bit, and a damaged file is refused in one line naming what is
// wrong, never read past its end.
#include "core/gguf.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <fstream>

#include "core/error.h"
#include "core/gguf_convert.h"
#include "core/gguf_writer.h"
#include "core/npy.h"
#include "core/ops.h"
#include "core/safetensors.h"
#include "generate/convert_command.h"
#include "models/dit/wan/wan_random_checkpoint.h"
#include "models/dit/wan/wan_transformer.h"
#include "pipeline/model_index.h"
#include "pipeline/model_inventory.h"
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

// mmgen's q8_0 quantization is ggml's: the bytes equal those the package wrote for the same values.
TEST(GgufWriter, Q8_0BlocksAreTheGgufPackagesBytes) {
  const gguf::GgufFile file = gguf::GgufFile::open(fixture());
  const Tensor values = file.to_f32("f32");
  const gguf::GgufTensorInfo& theirs = *file.find("q8_0");
  std::string ours(theirs.nbytes, '\0');
  gguf::quantize_q8_0(values.data<float>(), values.numel(),
                      reinterpret_cast<std::byte*>(ours.data()));
  EXPECT_EQ(std::memcmp(ours.data(), file.blocks(theirs), theirs.nbytes), 0);
}

TEST(GgufWriter, WhatItWritesReadsBackWithMetadataTypesAndShapes) {
  const fs::path path = testing::scratch_dir("gguf_test") / "written.gguf";
  const Tensor values = dit::random_tensor({2, 3, 64}, 0.0f, 1.0f, 3, DType::F32);
  const Tensor five = dit::random_tensor({4, 2, 1, 2, 2}, 0.0f, 1.0f, 4, DType::F32);
  gguf::write_gguf(path, {{"general.architecture", "wan"}, {"n", 3}, {"list", {1.5, 2.5}}},
                   {{"a", values, gguf::GgmlType::F32},
                    {"b", values, gguf::GgmlType::F16},
                    {"c", values, gguf::GgmlType::BF16},
                    {"d", values, gguf::GgmlType::Q8_0},
                    {"patch", five, gguf::GgmlType::F32}});
  const gguf::GgufFile file = gguf::GgufFile::open(path);
  EXPECT_EQ(file.metadata().at("general.architecture"), "wan");
  EXPECT_EQ(file.metadata().at("n"), 3);
  EXPECT_EQ(file.metadata().at("list"), nlohmann::json({1.5, 2.5}));
  EXPECT_EQ(std::memcmp(file.to_f32("a").raw(), values.raw(), values.nbytes()), 0);
  EXPECT_LT(testing::max_abs_diff(file.to_f32("b"), values), 2e-3);
  EXPECT_LT(testing::max_abs_diff(file.to_f32("c"), values), 2e-2);
  EXPECT_LT(testing::max_abs_diff(file.to_f32("d"), values), 3e-2);
  // Five dimensions are stored as two, and the weight store gives the shape back.
  EXPECT_EQ(file.find("patch")->shape, (Shape{4, 8}));
  const WeightStore store = WeightStore::open_file(path);
  EXPECT_EQ(store.info("patch").shape, (Shape{4, 2, 1, 2, 2}));
  EXPECT_EQ(std::memcmp(store.get_f32("patch").raw(), five.raw(), five.nbytes()), 0);
  EXPECT_THROW(gguf::write_gguf(path, nlohmann::json::object(),
                                {{"odd", Tensor::zeros({3, 20}), gguf::GgmlType::Q8_0}}),
               Error);
}

// The wan-tiny transformer from GGUF files: in f32 (diffusers' names, and the original release's
// with the 5-D patch embedding flattened) its forward is the safetensors forward to the bit; in
// q8_0 (products' weights quantized, the rest f32) within the bound measured for it.
TEST(GgufWeights, WanTransformerFromGgufMatchesItsSafetensors) {
  const fs::path folder = testing::source_dir() / "examples/models/wan-tiny/transformer";
  const dit::WanTransformer reference = dit::WanTransformer::load(folder);
  const WeightStore& weights = reference.weights();
  const Tensor latents = dit::random_tensor({1, 16, 2, 4, 6}, 0.0f, 1.0f, 5, DType::F32);
  const Tensor text =
      dit::random_tensor({1, 7, reference.config().text_dim}, 0.0f, 0.5f, 6, DType::F32);
  const Tensor expected = reference.forward(latents, 700.0f, text);
  const auto forward_from = [&](const std::string& file, bool original, bool q8) {
    std::vector<gguf::TensorToWrite> tensors;
    for (const std::string& name : weights.names()) {
      const Tensor value = weights.get_f32(name);
      const bool product = q8 && value.dim() == 2 && value.size(1) % 32 == 0;
      tensors.push_back({original ? testing::original_wan_name(name) : name, value,
                         product ? gguf::GgmlType::Q8_0 : gguf::GgmlType::F32});
    }
    const fs::path path = testing::scratch_dir("gguf_test") / file;
    gguf::write_gguf(path, {{"general.architecture", "wan"}}, tensors);
    const dit::WanTransformer model(reference.config(), WeightStore::open_file(path));
    return model.forward(latents, 700.0f, text);
  };
  const Tensor diffusers_names = forward_from("wan-f32.gguf", false, false);
  EXPECT_EQ(std::memcmp(diffusers_names.raw(), expected.raw(), expected.nbytes()), 0);
  const Tensor original_names = forward_from("wan-original-f32.gguf", true, false);
  EXPECT_EQ(std::memcmp(original_names.raw(), expected.raw(), expected.nbytes()), 0);
  const double q8_error =
      testing::relative_error(forward_from("wan-q8.gguf", true, true), expected);
  EXPECT_GT(q8_error, 0.0);
  EXPECT_LT(q8_error, 1e-2) << q8_error;
  std::printf("wan-tiny forward from q8_0 weights: relative error %.3e\n", q8_error);
}

// `mmgen generate` with a transformer folder that holds config.json and an f32 GGUF file: the video
// is the safetensors folder's to the bit.
TEST(GgufWeights, GenerateRunsFromATransformerFolderWithAGgufFile) {
  const fs::path model = testing::copy_of_wan_tiny("gguf_test_model");
  const fs::path transformer = model / "transformer";
  const WeightStore weights = WeightStore::open_folder(transformer);
  std::vector<gguf::TensorToWrite> tensors;
  for (const std::string& name : weights.names())
    tensors.push_back({name, weights.get_f32(name), gguf::GgmlType::F32});
  const fs::path gguf_folder = testing::scratch_dir("gguf_test_transformer");
  fs::copy_file(transformer / "config.json", gguf_folder / "config.json");
  gguf::write_gguf(gguf_folder / "model.gguf", {{"general.architecture", "wan"}}, tensors);
  const fs::path out = testing::scratch_dir("gguf_test_out");
  const std::string common = testing::mmgen_binary().string() + " generate --model-path " +
                             model.string() +
                             " --prompt x --height 32 --width 48 --num-frames 5 "
                             "--num-inference-steps 2 --device cpu --quiet --output-format npy "
                             "--output-path " +
                             out.string();
  ASSERT_EQ(testing::run_command(common + " --output-file-name st.npy").exit_code, 0);
  const auto gguf_run = testing::run_command(
      common + " --output-file-name gguf.npy --transformer-path " + gguf_folder.string());
  ASSERT_EQ(gguf_run.exit_code, 0) << gguf_run.err;
  const Tensor a = read_npy(out / "st.npy"), b = read_npy(out / "gguf.npy");
  ASSERT_EQ(a.shape(), b.shape());
  EXPECT_EQ(std::memcmp(a.raw(), b.raw(), a.nbytes()), 0);
}

// The CPU product reads q8_0 blocks as they are: its result is the product with the dequantized
// float32 weights to the bit (one rounding per value, d · q, in both), for shapes with partial
// panels and job rows.
TEST(GgufProduct, Q8_0WeightsGiveTheDequantizedProductToTheBit) {
  for (const auto& [m, n, k] : {std::array<int64_t, 3>{1, 48, 32}, {7, 50, 96}, {130, 97, 256}}) {
    const Tensor values = dit::random_tensor({n, k}, 0.0f, 1.0f, 11, DType::F32);
    Tensor blocks = Tensor::empty({n, k / 32}, DType::Q8_0);
    gguf::quantize_q8_0(values.data<float>(), n * k, blocks.raw());
    const Tensor dequantized = blocks.to(DType::F32);
    ASSERT_EQ(dequantized.shape(), (Shape{n, k}));
    const Tensor x = dit::random_tensor({m, k}, 0.0f, 1.0f, 12, DType::F32);
    const Tensor bias = dit::random_tensor({n}, 0.0f, 1.0f, 13, DType::F32);
    const Tensor ours = ops::linear(x, blocks, bias), expected = ops::linear(x, dequantized, bias);
    ASSERT_EQ(ours.shape(), expected.shape());
    EXPECT_EQ(std::memcmp(ours.raw(), expected.raw(), ours.nbytes()), 0)
        << m << "x" << n << "x" << k << ": max diff " << testing::max_abs_diff(ours, expected);
  }
  // Blocks are not values: element access and safetensors refuse them.
  const Tensor blocks = Tensor::zeros({2, 1}, DType::Q8_0);
  EXPECT_THROW(
      write_safetensors(testing::scratch_dir("gguf_product") / "q.safetensors", {{"q", blocks}}),
      Error);
  EXPECT_THROW(Tensor::zeros({2, 32}).to(DType::Q8_0), Error);
}

// Every quantized type the `gguf` package wrote (tests/data/gguf/types.gguf) read as mapped blocks
// by the CPU product: the product is the one from the package's own dequantized values to the bit
// (the 4- and 5-bit types and the K-quants go through gguf::dequantize per panel row, q8_0 through
// the packing loads). The legacy types' [2, 3, 64] are 6 rows of 64 inputs; the K-quants' [3, 512]
// are 3 rows of two 256-value super-blocks. Each weight row is used several times over so the
// product has more than one panel.
TEST(GgufProduct, EveryQuantizedTypeGivesThePackagesDequantizedProductToTheBit) {
  const gguf::GgufFile file = gguf::GgufFile::open(fixture());
  for (const char* name : {"q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q4_k", "q5_k", "q6_k"}) {
    SCOPED_TRACE(name);
    const Tensor blocks = file.quantized_blocks(name);
    const Tensor expected_values = file.to_f32(std::string(name) + ".expected");
    const int64_t k = expected_values.size(-1), rows = expected_values.numel() / k;
    EXPECT_EQ(blocks.numel() * dtype_block_values(blocks.dtype()), rows * k);
    EXPECT_EQ(dtype_name(blocks.dtype()), name);
    // 40 output rows (three panels' worth of the 16-wide AVX-512 kernel at least), cycling
    // through the stored rows: blocks and values stacked the same way.
    const int64_t n = 40, row_bytes = int64_t(blocks.nbytes()) / rows;
    Tensor weight = Tensor::empty({n, k / dtype_block_values(blocks.dtype())}, blocks.dtype());
    Tensor values = Tensor::empty({n, k});
    for (int64_t j = 0; j < n; ++j) {
      std::memcpy(static_cast<std::byte*>(weight.raw()) + j * row_bytes,
                  static_cast<const std::byte*>(blocks.raw()) + (j % rows) * row_bytes,
                  size_t(row_bytes));
      std::memcpy(values.data<float>() + j * k, expected_values.data<float>() + (j % rows) * k,
                  size_t(k) * sizeof(float));
    }
    EXPECT_EQ(std::memcmp(weight.to(DType::F32).raw(), values.raw(), values.nbytes()), 0);
    for (int64_t m : {1, 5, 33}) {
      const Tensor x = dit::random_tensor({m, k}, 0.0f, 1.0f, 21, DType::F32);
      const Tensor bias = dit::random_tensor({n}, 0.0f, 1.0f, 22, DType::F32);
      const Tensor ours = ops::linear(x, weight, bias), expected = ops::linear(x, values, bias);
      ASSERT_EQ(ours.shape(), expected.shape());
      EXPECT_EQ(std::memcmp(ours.raw(), expected.raw(), ours.nbytes()), 0)
          << m << " rows: max diff " << testing::max_abs_diff(ours, expected);
    }
  }
  // The weight store hands the product a 2-D quantized matrix as its mapped blocks, and
  // everything else (a 3-D one, f16) as values.
  const WeightStore store = WeightStore::open_file(fixture());
  EXPECT_EQ(store.get_for_product("q4_k").dtype(), DType::Q4_K);
  EXPECT_EQ(store.get_for_product("q6_k").shape(), (Shape{3, 2}));
  EXPECT_EQ(store.get_for_product("q5_0").dtype(), DType::F32);  // [2, 3, 64]
  EXPECT_EQ(store.stored_type("q4_k"), "q4_k");
  // Not blocks, or not whole ones: refused in one line.
  EXPECT_THROW(file.quantized_blocks("f16"), Error);
  EXPECT_THROW(file.quantized_blocks("absent"), Error);
  EXPECT_THROW(Tensor::zeros({2, 32}).to(DType::Q4_K), Error);
}

// q4_k written by mmgen: every value within half a step of its sub-block (its range / 15, plus the
// scale's rounding up to a multiple of d) plus half of dmin (the min's rounding), as read back
// by the dequantizer the `gguf` package agrees with; a row of constant values and one of zeros
// come back exactly; the converter's q4_k policy falls back to q8_0 for rows of whole 32-blocks.
TEST(GgufWriter, Q4_KValuesAreWithinHalfAStepOfTheirSubBlock) {
  const int64_t count = 4 * 256;
  Tensor values = dit::random_tensor({count}, 0.0f, 0.05f, 31, DType::F32);
  float* x = values.data<float>();
  for (int64_t i = 256; i < 512; ++i) x[i] += 0.2f;    // all positive: min clamps to 0
  for (int64_t i = 512; i < 768; ++i) x[i] = 0.0f;     // zeros
  for (int64_t i = 768; i < 800; ++i) x[i] = -0.125f;  // one constant sub-block
  std::vector<std::byte> bytes(static_cast<size_t>(count / 256 * 144));
  gguf::quantize_q4_k(x, count, bytes.data());
  std::vector<float> y(static_cast<size_t>(count));
  gguf::dequantize(gguf::GgmlType::Q4_K, bytes.data(), y.data(), count);
  double worst = 0, sum2 = 0, ref2 = 0;
  for (int64_t b = 0; b < count / 256; ++b) {
    uint16_t d_bits, dmin_bits;
    std::memcpy(&d_bits, bytes.data() + b * 144, 2);
    std::memcpy(&dmin_bits, bytes.data() + b * 144 + 2, 2);
    const float d = f16_to_f32(d_bits), dmin = f16_to_f32(dmin_bits);
    for (int64_t s = 0; s < 8; ++s) {
      const float* sub = x + b * 256 + s * 32;
      const float lo = std::min(0.0f, *std::min_element(sub, sub + 32)),
                  hi = *std::max_element(sub, sub + 32);
      const double bound = 0.5 * ((hi - lo) / 15.0 + d + dmin) + 1e-7;
      for (int64_t l = 0; l < 32; ++l) {
        const int64_t i = b * 256 + s * 32 + l;
        const double error = std::fabs(double(x[i]) - y[size_t(i)]);
        EXPECT_LE(error, bound) << "value " << i;
        worst = std::max(worst, error / bound);
        sum2 += error * error;
        ref2 += double(x[i]) * x[i];
      }
    }
  }
  for (int64_t i = 512; i < 768; ++i) EXPECT_EQ(y[size_t(i)], 0.0f);
  for (int64_t i = 768; i < 800; ++i) EXPECT_NEAR(y[size_t(i)], -0.125f, 2e-4);
  std::printf("q4_k: relative rms error %.3g, worst error %.2f of its bound\n",
              std::sqrt(sum2 / ref2), worst);
  EXPECT_THROW(gguf::quantize_q4_k(x, 100, bytes.data()), Error);
  EXPECT_EQ(gguf::converted_type("blocks.0.ffn.net.0.proj.weight", {64, 512}, gguf::GgmlType::Q4_K),
            gguf::GgmlType::Q4_K);
  EXPECT_EQ(gguf::converted_type("blocks.0.ffn.net.0.proj.weight", {64, 96}, gguf::GgmlType::Q4_K),
            gguf::GgmlType::Q8_0);
  EXPECT_EQ(gguf::converted_type("blocks.0.ffn.net.0.proj.weight", {64, 40}, gguf::GgmlType::Q4_K),
            gguf::GgmlType::F32);
  EXPECT_EQ(gguf::parse_convert_type("q4_k"), gguf::GgmlType::Q4_K);
}

// `mmgen convert` on a random Wan transformer folder wide enough for q8_0 rows (64 channels, ffn
// 128): the matrices are q8_0, what the model reads at high precision stays f32 to the bit, the
// file reads back, and the forward from it is within the q8_0 bound of the safetensors forward.
TEST(GgufConvert, WritesMatricesAsQ8_0AndKeepsTheRestExact) {
  nlohmann::json config = nlohmann::json::parse(
      read_text_file(testing::source_dir() / "examples/models/wan-tiny/transformer/config.json"));
  config["attention_head_dim"] = 32;
  config["ffn_dim"] = 128;
  config["text_dim"] = 64;
  const dit::WanTransformerConfig wan = dit::WanTransformerConfig::from_json(config, "test");
  const fs::path source = testing::scratch_dir("gguf_convert_source");
  std::ofstream(source / "config.json") << config.dump(2);
  write_safetensors(source / "diffusion_pytorch_model.safetensors", dit::random_checkpoint(wan),
                    {{"format", "pt"}});
  const fs::path out = testing::scratch_dir("gguf_convert_out") / "wan-q8_0.gguf";
  ASSERT_EQ(cli::run_convert({"--input", source.string(), "--out", out.string(), "--overwrite"}),
            0);
  EXPECT_TRUE(fs::exists(out.parent_path() / "config.json"));  // copied beside the file

  const gguf::GgufFile file = gguf::GgufFile::open(out);
  const auto type_of = [&](const std::string& name) {
    const gguf::GgufTensorInfo* info = file.find(name);
    return info ? info->type : gguf::GgmlType(999);
  };
  EXPECT_EQ(type_of("blocks.0.attn1.to_q.weight"), gguf::GgmlType::Q8_0);
  EXPECT_EQ(type_of("blocks.1.ffn.net.2.weight"), gguf::GgmlType::Q8_0);
  for (const char* kept :
       {"blocks.0.attn1.to_q.bias", "blocks.0.attn1.norm_q.weight", "blocks.0.scale_shift_table",
        "blocks.0.norm2.weight", "condition_embedder.time_embedder.linear_2.weight",
        "condition_embedder.text_embedder.linear_1.weight", "patch_embedding.weight",
        "scale_shift_table"})
    EXPECT_EQ(type_of(kept), gguf::GgmlType::F32) << kept;
  EXPECT_EQ(file.metadata().at("general.architecture"), "wan");

  const WeightStore original = WeightStore::open_folder(source);
  const WeightStore converted = WeightStore::open_file(out);
  ASSERT_EQ(converted.names(), original.names());
  for (const std::string& name : original.names()) {
    const Tensor a = original.get_f32(name), b = converted.get_f32(name);
    ASSERT_EQ(a.shape(), b.shape()) << name;
    if (type_of(name) == gguf::GgmlType::F32)
      EXPECT_EQ(std::memcmp(a.raw(), b.raw(), a.nbytes()), 0) << name;
    else {  // q8_0: within half a step d = max |x| / 127 of its block, plus the error of storing d
      // in f16 (half an ulp, 2^-11 relative) times |q| <= 127.
      float largest = 0;
      for (int64_t i = 0; i < a.numel(); ++i)
        largest = std::max(largest, std::abs(a.data<float>()[i]));
      EXPECT_LE(testing::max_abs_diff(a, b), (0.5 + 127.0 / 2048.0) * largest / 127.0) << name;
    }
  }
  const Tensor latents = dit::random_tensor({1, 16, 2, 4, 6}, 0.0f, 1.0f, 5, DType::F32);
  const Tensor text = dit::random_tensor({1, 7, 64}, 0.0f, 0.5f, 6, DType::F32);
  const Tensor expected = dit::WanTransformer(wan, original).forward(latents, 700.0f, text);
  const double error = testing::relative_error(
      dit::WanTransformer(wan, converted).forward(latents, 700.0f, text), expected);
  std::printf("random Wan forward from `mmgen convert` q8_0: relative error %.3e\n", error);
  // The CPU read the q8_0 blocks themselves (get_for_product), and that is exact: the forward is
  // the one from an f32 file of the dequantized values to the bit.
  EXPECT_EQ(converted.get_for_product("blocks.0.attn1.to_q.weight").dtype(), DType::Q8_0);
  std::vector<gguf::TensorToWrite> expanded;
  for (const std::string& name : converted.names())
    expanded.push_back({name, converted.get_f32(name), gguf::GgmlType::F32});
  const fs::path f32 = out.parent_path() / "expanded" / "wan-f32.gguf";
  fs::create_directories(f32.parent_path());
  gguf::write_gguf(f32, {{"general.architecture", "wan"}}, expanded);
  const Tensor from_blocks = dit::WanTransformer(wan, converted).forward(latents, 700.0f, text);
  const Tensor from_values =
      dit::WanTransformer(wan, WeightStore::open_file(f32)).forward(latents, 700.0f, text);
  EXPECT_EQ(std::memcmp(from_blocks.raw(), from_values.raw(), from_blocks.nbytes()), 0);
  EXPECT_GT(error, 0.0);
  EXPECT_LT(error, 1e-2);
}

// inspect and the memory estimate read a GGUF component from its header: its parameters, its
// stored types (q8_0 beside the f32 it keeps) and the bytes a mapping touches.
TEST(GgufConvert, TheInventoryKnowsAGgufComponent) {
  const fs::path source = testing::source_dir() / "examples/models/wan-shapes";
  const fs::path out = testing::scratch_dir("gguf_inventory") / "transformer" / "model.gguf";
  ASSERT_EQ(cli::run_convert({"--input", (source / "transformer").string(), "--out", out.string(),
                              "--overwrite"}),
            0);
  const ModelInventory plain = take_inventory(load_model_index(source));
  const ModelInventory gguf =
      take_inventory(load_model_index(source, {{"transformer", out.parent_path()}}));
  const ComponentInventory* a = plain.find("transformer");
  const ComponentInventory* b = gguf.find("transformer");
  ASSERT_TRUE(a && b);
  EXPECT_EQ(b->parameters, a->parameters);
  EXPECT_EQ(b->weight_files, std::vector<fs::path>{out});
  EXPECT_GT(b->dtype_parameters.at("q8_0"), 0);
  EXPECT_EQ(b->dtype_parameters.at("q8_0") + b->dtype_parameters.at("f32"), b->parameters);
  uint64_t stored = 0;
  const gguf::GgufFile file = gguf::GgufFile::open(out);
  for (const gguf::GgufTensorInfo& tensor : file.tensors()) stored += tensor.nbytes;
  EXPECT_EQ(b->tensor_bytes, stored);
}

// Bad input: one line each, nothing written.
TEST(GgufConvert, RefusesBadInputInOneLine) {
  const fs::path out = testing::scratch_dir("gguf_convert_bad") / "x.gguf";
  const std::string source =
      (testing::source_dir() / "examples/models/wan-tiny/transformer").string();
  EXPECT_THROW(cli::run_convert({"--input", "/nonexistent", "--out", out.string()}), Error);
  EXPECT_THROW(cli::run_convert({"--input", source, "--out", out.string(), "--type", "q6_k"}),
               Error);
  EXPECT_THROW(cli::run_convert({"--input", source, "--out", out.string() + ".bin"}), Error);
  EXPECT_THROW(cli::run_convert({"--out", out.string()}), Error);
  EXPECT_FALSE(fs::exists(out));
  ASSERT_EQ(cli::run_convert({"--input", source, "--out", out.string()}), 0);
  EXPECT_THROW(cli::run_convert({"--input", source, "--out", out.string()}), Error);  // exists
}

}  // namespace
}  // namespace mmgen
