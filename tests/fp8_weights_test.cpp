// FP8 weights (issue 23): safetensors files in ComfyUI's scaled-FP8 layout (e4m3 values, a scale
// per tensor or per output channel) read as e4m3 · scale exactly, the CPU product reads the e4m3
// rows as their values to the bit, `mmgen convert --type fp8_e4m3` writes that layout, and a Wan
// transformer runs from it (diffusers' names and the original release's) within a measured bound.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <fstream>

#include "core/error.h"
#include "core/fp8_convert.h"
#include "core/npy.h"
#include "core/ops.h"
#include "core/safetensors.h"
#include "core/scaled_fp8.h"
#include "generate/convert_command.h"
#include "models/dit/wan/wan_random_checkpoint.h"
#include "models/dit/wan/wan_transformer.h"
#include "models/dit/wan/wan_weights.h"
#include "tests/test_support.h"

namespace mmgen {
namespace {

// e4m3 bytes from a seed, every byte but the two NaNs (0x7f, 0xff).
Tensor e4m3_bytes(const Shape& shape, uint32_t seed) {
  Tensor values = Tensor::empty(shape, DType::F8E4M3);
  auto* bytes = reinterpret_cast<uint8_t*>(values.raw());
  uint32_t state = seed;
  for (int64_t i = 0; i < values.numel(); ++i) {
    state = state * 1664525u + 1013904223u;
    const uint8_t b = uint8_t(state >> 24);
    bytes[i] = (b & 0x7f) == 0x7f ? uint8_t(b - 1) : b;
  }
  return values;
}

Tensor scalar(float value) {
  Tensor t = Tensor::empty({}, DType::F32);
  *t.data<float>() = value;
  return t;
}

// A file with three e4m3 weights (a per-tensor f32 scale_weight, a per-channel bf16
// weight_scale [rows, 1], none), their input scale and ComfyUI's marker, and a bias.
fs::path write_scaled_file(const fs::path& path) {
  Tensor channel_scales = Tensor::empty({4, 1}, DType::BF16);
  for (int64_t r = 0; r < 4; ++r)
    channel_scales.data<uint16_t>()[r] = f32_to_bf16(0.01f * float(r + 1));
  write_safetensors(path, {{"scaled_fp8", Tensor::empty({0}, DType::F8E4M3)},
                           {"a.weight", e4m3_bytes({3, 40}, 1)},
                           {"a.scale_weight", scalar(0.0123f)},
                           {"a.scale_input", scalar(1.0f)},
                           {"b.weight", e4m3_bytes({4, 8}, 2)},
                           {"b.weight_scale", channel_scales},
                           {"c.weight", e4m3_bytes({2, 5}, 3)},
                           {"d.bias", Tensor::zeros({3})}});
  return path;
}

TEST(Fp8Weights, ReadsE4m3WithItsScalesExactly) {
  const fs::path path = write_scaled_file(testing::scratch_dir("fp8_read") / "w.safetensors");
  const WeightStore store = WeightStore::open_file(path);
  EXPECT_EQ(store.names(),
            (std::vector<std::string>{"a.weight", "b.weight", "c.weight", "d.bias"}));
  EXPECT_EQ(store.stored_type("a.weight"), "f8_e4m3");
  const SafetensorsFile file = SafetensorsFile::open(path);
  size_t bytes = 0;  // the scales and the marker count as stored bytes too
  for (const std::string& name : file.names()) bytes += file.info(name).end - file.info(name).begin;
  EXPECT_EQ(store.stored_bytes(), bytes);
  const auto check_weight = [&](const std::string& name, const std::vector<float>& row_scales) {
    SCOPED_TRACE(name);
    const Tensor stored = file.tensor(name);
    const auto* bytes = reinterpret_cast<const uint8_t*>(stored.raw());
    const int64_t rows = stored.size(0), cols = stored.size(1);
    const Tensor values = store.get_f32(name);
    ASSERT_EQ(values.shape(), stored.shape());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        ASSERT_EQ(values.data<float>()[r * cols + c],
                  e4m3_to_f32(bytes[r * cols + c]) * row_scales[size_t(r)]);
    const Tensor rows_scaled = store.get_for_product(name);
    ASSERT_EQ(rows_scaled.dtype(), DType::F8E4M3Rows);
    EXPECT_EQ(std::memcmp(rows_scaled.raw(), bytes, size_t(rows * cols)), 0);
    for (int64_t r = 0; r < rows; ++r)
      EXPECT_EQ(rows_scaled.row_scales()[r], row_scales[size_t(r)]);
  };
  check_weight("a.weight", {0.0123f, 0.0123f, 0.0123f});
  check_weight("b.weight", {bf16_to_f32(f32_to_bf16(0.01f)), bf16_to_f32(f32_to_bf16(0.02f)),
                            bf16_to_f32(f32_to_bf16(0.03f)), bf16_to_f32(f32_to_bf16(0.04f))});
  check_weight("c.weight", {1.0f, 1.0f});  // no scale: 1
}

// The CPU product reads e4m3 rows as they are: its result is the product with their float32
// values to the bit, for shapes with partial panels and job rows.
TEST(Fp8Weights, TheCpuProductReadsE4m3RowsAsTheirValuesToTheBit) {
  for (const auto& [m, n, k] : {std::array<int64_t, 3>{1, 48, 32}, {7, 50, 96}, {130, 97, 200}}) {
    Tensor weight = Tensor::empty({n, k}, DType::F8E4M3Rows);
    std::memcpy(weight.raw(), e4m3_bytes({n, k}, 7).raw(), size_t(n * k));
    for (int64_t r = 0; r < n; ++r) weight.row_scales()[r] = 0.003f * float(1 + r % 5);
    const Tensor x = dit::random_tensor({m, k}, 0.0f, 1.0f, 12, DType::F32);
    const Tensor bias = dit::random_tensor({n}, 0.0f, 1.0f, 13, DType::F32);
    const Tensor expected = ops::linear(x, weight.to(DType::F32), bias);
    const Tensor actual = ops::linear(x, weight, bias);
    EXPECT_EQ(std::memcmp(actual.raw(), expected.raw(), expected.nbytes()), 0) << m << "x" << n;
  }
}

std::string raw_safetensors(const std::string& header, size_t data_bytes) {
  std::string text = header;
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[size_t(i)] = char((text.size() >> (8 * i)) & 0xff);
  return bytes + text + std::string(data_bytes, '\0');
}

// What it cannot read is refused when the store opens, in one line naming the tensor.
TEST(Fp8Weights, RefusesWhatItCannotReadInOneLine) {
  const fs::path folder = testing::scratch_dir("fp8_bad");
  const auto refusal = [&](const std::string& name, const NamedTensors& tensors) {
    write_safetensors(folder / name, tensors);
    return testing::error_message([&] { WeightStore::open_file(folder / name); });
  };
  const std::string shape = refusal("shape.safetensors", {{"a.weight", e4m3_bytes({3, 40}, 1)},
                                                          {"a.scale_weight", Tensor::zeros({5})}});
  EXPECT_NE(shape.find("a.scale_weight"), std::string::npos) << shape;
  EXPECT_NE(shape.find("one per output channel"), std::string::npos) << shape;
  const std::string int8 =
      refusal("int8.safetensors",
              {{"a.weight", Tensor::zeros({3, 40}, DType::I8)}, {"a.weight_scale", scalar(0.5f)}});
  EXPECT_NE(int8.find("i8 with a scale"), std::string::npos) << int8;
  const std::string scale_type = refusal(
      "type.safetensors",
      {{"a.weight", e4m3_bytes({3, 40}, 1)}, {"a.scale_weight", Tensor::zeros({}, DType::I32)}});
  EXPECT_NE(scale_type.find("f32, bf16 or f16"), std::string::npos) << scale_type;
  // e5m2 is not read: the header's dtype is refused.
  std::ofstream(folder / "e5m2.safetensors", std::ios::binary) << raw_safetensors(
      R"({"a.weight":{"dtype":"F8_E5M2","shape":[2,2],"data_offsets":[0,4]}})", 4);
  const std::string e5m2 =
      testing::error_message([&] { WeightStore::open_file(folder / "e5m2.safetensors"); });
  EXPECT_NE(e5m2.find("F8_E5M2"), std::string::npos) << e5m2;
  for (const std::string& message : {shape, int8, scale_type, e5m2})
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
}

// A random Wan transformer 64 channels wide (ffn 128), as `mmgen convert --type fp8_e4m3` takes it.
struct ConvertedWan {
  dit::WanTransformerConfig config;
  fs::path source, out;
};

ConvertedWan convert_random_wan(const std::string& name) {
  nlohmann::json config = nlohmann::json::parse(
      read_text_file(testing::source_dir() / "examples/models/wan-tiny/transformer/config.json"));
  config["attention_head_dim"] = 32;
  config["ffn_dim"] = 128;
  config["text_dim"] = 64;
  ConvertedWan wan{dit::WanTransformerConfig::from_json(config, "test"),
                   testing::scratch_dir(name + "_source"),
                   testing::scratch_dir(name + "_out") / "wan-fp8.safetensors"};
  std::ofstream(wan.source / "config.json") << config.dump(2);
  write_safetensors(wan.source / "diffusion_pytorch_model.safetensors",
                    dit::random_checkpoint(wan.config), {{"format", "pt"}});
  EXPECT_EQ(cli::run_convert({"--input", wan.source.string(), "--out", wan.out.string(), "--type",
                              "fp8_e4m3", "--overwrite"}),
            0);
  return wan;
}

// The written file holds ComfyUI's layout: the marker, each matrix as e4m3(x / s) with its scale
// s = max |x| / 448 (0-d float32), and the rest as stored; the weight store reads it back under
// the source's names, and the forward from it is within the bound measured for FP8 weights.
TEST(Fp8Convert, WritesComfyScaledFp8AndTheTransformerRunsFromIt) {
  const ConvertedWan wan = convert_random_wan("fp8_convert");
  EXPECT_TRUE(fs::exists(wan.out.parent_path() / "config.json"));
  const SafetensorsFile file = SafetensorsFile::open(wan.out);
  EXPECT_EQ(file.info("scaled_fp8").dtype, DType::F8E4M3);
  EXPECT_EQ(file.info("scaled_fp8").shape, (Shape{0}));
  const WeightStore source = WeightStore::open_folder(wan.source);
  const WeightStore converted = WeightStore::open_file(wan.out);
  ASSERT_EQ(converted.names(), source.names());
  int64_t quantized = 0;
  for (const std::string& name : source.names()) {
    SCOPED_TRACE(name);
    const Tensor original = source.get(name);
    if (!file.has(fp8::scale_name_of(name))) {  // kept as stored, to the byte
      const Tensor kept = file.tensor(name);
      ASSERT_EQ(kept.dtype(), original.dtype());
      EXPECT_EQ(std::memcmp(kept.raw(), original.raw(), original.nbytes()), 0);
      continue;
    }
    ++quantized;
    const Tensor x = original.to(DType::F32);
    float amax = 0.0f;
    for (int64_t i = 0; i < x.numel(); ++i) amax = std::max(amax, std::fabs(x.data<float>()[i]));
    const Tensor scale = file.tensor(fp8::scale_name_of(name));
    ASSERT_EQ(scale.dim(), 0);
    ASSERT_EQ(*scale.data<float>(), amax / 448.0f);
    const Tensor values = file.tensor(name);
    ASSERT_EQ(values.dtype(), DType::F8E4M3);
    const auto* bytes = reinterpret_cast<const uint8_t*>(values.raw());
    for (int64_t i = 0; i < x.numel(); ++i)
      ASSERT_EQ(bytes[i], f32_to_e4m3(x.data<float>()[i] / (amax / 448.0f))) << i;
  }
  // Per block its 8 attention matrices and 2 ffn ones, and proj_out; the embedders stay.
  EXPECT_EQ(quantized, wan.config.num_layers * 10 + 1);
  EXPECT_EQ(converted.stored_type("blocks.0.attn1.to_q.weight"), "f8_e4m3");
  EXPECT_EQ(converted.stored_type("blocks.0.attn1.to_q.bias"), "bf16");

  const Tensor latents = dit::random_tensor({1, 16, 2, 4, 6}, 0.0f, 1.0f, 5, DType::F32);
  const Tensor text = dit::random_tensor({1, 7, 64}, 0.0f, 0.5f, 6, DType::F32);
  const Tensor expected = dit::WanTransformer(wan.config, source).forward(latents, 700.0f, text);
  const Tensor from_fp8 = dit::WanTransformer(wan.config, converted).forward(latents, 700.0f, text);
  const double error = testing::relative_error(from_fp8, expected);
  std::printf("random Wan forward from `mmgen convert` fp8_e4m3: relative error %.3e\n", error);
  EXPECT_GT(error, 0.0);
  EXPECT_LT(error, 3e-2);
  // The products read the e4m3 rows themselves, and that is exact: the forward is the one from an
  // f32 file of the scaled values to the bit.
  EXPECT_EQ(converted.get_for_product("blocks.0.attn1.to_q.weight").dtype(), DType::F8E4M3Rows);
  NamedTensors expanded;
  for (const std::string& name : converted.names())
    expanded.push_back({name, converted.get_f32(name)});
  const fs::path f32 = wan.out.parent_path() / "expanded" / "wan-f32.safetensors";
  fs::create_directories(f32.parent_path());
  write_safetensors(f32, expanded);
  const Tensor from_values =
      dit::WanTransformer(wan.config, WeightStore::open_file(f32)).forward(latents, 700.0f, text);
  EXPECT_EQ(std::memcmp(from_fp8.raw(), from_values.raw(), from_fp8.nbytes()), 0);

  // ComfyUI's Wan files keep the original release's names: the same tensors under those names
  // give the same forward to the bit.
  NamedTensors original_names;
  for (const std::string& name : file.names())
    original_names.push_back(
        {name == "scaled_fp8" ? name : testing::original_wan_name(name), file.tensor(name)});
  const fs::path comfy = wan.out.parent_path() / "comfy" / "wan_fp8_scaled.safetensors";
  fs::create_directories(comfy.parent_path());
  write_safetensors(comfy, original_names);
  const Tensor from_comfy =
      dit::WanTransformer(wan.config, dit::with_diffusers_names(WeightStore::open_file(comfy)))
          .forward(latents, 700.0f, text);
  EXPECT_EQ(std::memcmp(from_comfy.raw(), from_fp8.raw(), from_fp8.nbytes()), 0);
}

// `mmgen convert` refuses a mismatched type and extension in one line, writing nothing.
TEST(Fp8Convert, RefusesAMismatchedOutputInOneLine) {
  const fs::path out = testing::scratch_dir("fp8_convert_bad");
  const std::string source =
      (testing::source_dir() / "examples/models/wan-tiny/transformer").string();
  const std::string gguf = testing::error_message([&] {
    cli::run_convert({"--input", source, "--out", (out / "x.gguf").string(), "--type", "fp8_e4m3"});
  });
  EXPECT_NE(gguf.find("--type fp8_e4m3 writes a safetensors file"), std::string::npos) << gguf;
  const std::string st = testing::error_message([&] {
    cli::run_convert({"--input", source, "--out", (out / "x.safetensors").string()});
  });
  EXPECT_NE(st.find("should end in .gguf"), std::string::npos) << st;
  EXPECT_TRUE(fs::is_empty(out));
}

// `mmgen generate` with the wan-shapes transformer converted to FP8, on the demo's request: the
// image is within the bound measured for it (3.5e-2 relative, mean |Δ| 0.0032 of [0, 1]) from
// the bf16 checkpoint's image.
TEST(Fp8Convert, GenerateRunsFromAnFp8TransformerFolder) {
  const fs::path model = testing::source_dir() / "examples/models/wan-shapes";
  const fs::path fp8_folder = testing::scratch_dir("fp8_generate_transformer");
  ASSERT_EQ(cli::run_convert({"--input", (model / "transformer").string(), "--out",
                              (fp8_folder / "model.safetensors").string(), "--type", "fp8_e4m3",
                              "--overwrite"}),
            0);
  const fs::path out = testing::scratch_dir("fp8_generate_out");
  const std::string common = testing::mmgen_binary().string() + " generate --model-path " +
                             model.string() +
                             " --prompt \"a red circle on a blue background\" --height 128 "
                             "--width 128 --num-frames 1 --seed 1 --device cpu --quiet "
                             "--output-format npy --output-path " +
                             out.string();
  ASSERT_EQ(testing::run_command(common + " --output-file-name bf16.npy").exit_code, 0);
  const auto run = testing::run_command(common + " --output-file-name fp8.npy --transformer-path " +
                                        fp8_folder.string());
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const Tensor a = read_npy(out / "bf16.npy"), b = read_npy(out / "fp8.npy");
  ASSERT_EQ(a.shape(), b.shape());
  const double error = testing::relative_error(b, a);
  std::printf("wan-shapes demo from fp8_e4m3: image relative error %.3e\n", error);
  EXPECT_GT(error, 0.0);
  EXPECT_LT(error, 5e-2);
}

}  // namespace
}  // namespace mmgen
