// LoRAs (models/lora/, --lora-path): the two layouts Wan LoRAs come in, read and merged into the
// transformer as it loads, against diffusers' load_lora_weights + set_adapters on the wan-tiny
// fixture (tests/fixtures/make_wan_tiny_lora.py); and every misfit refused in one line.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "core/file.h"
#include "core/gguf_writer.h"
#include "core/safetensors.h"
#include "generate/convert_command.h"
#include "models/dit/wan/wan_random_checkpoint.h"
#include "models/dit/wan/wan_transformer.h"
#include "models/lora/lora_file.h"
#include "models/lora/lora_merge.h"
#include "pipeline/component_loras.h"
#include "pipeline/flux/flux_pipeline.h"
#include "pipeline/model_index.h"
#include "pipeline/wan/wan_pipeline.h"
#include "tests/test_support.h"

namespace mmgen {
namespace {

fs::path wan_tiny() {
  return testing::shared_dir() / "fixtures/wan-tiny";
}
fs::path lora_fixture() {
  return testing::source_dir() / "tests/fixtures/wan-tiny-lora";
}

lora::LoraFile read(const fs::path& path) {
  return lora::read_lora_file(path, "transformer", dit::WanTransformer::lora_targets);
}

const lora::LoraLayer* find_layer(const lora::LoraFile& file, const std::string& module) {
  for (const lora::LoraLayer& layer : file.layers)
    if (layer.module == module) return &layer;
  return nullptr;
}

TEST(Lora, ReadsDiffusersAndOriginalWanNames) {
  const lora::LoraFile a = read(lora_fixture() / "a_diffusers.safetensors");
  EXPECT_EQ(a.format, "diffusers/peft");
  EXPECT_EQ(a.layers.size(), 20u);  // 2 blocks x (4 + 4 attention projections + 2 feed-forward)
  const lora::LoraLayer* q = find_layer(a, "blocks.1.attn2.to_q");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->down.shape(), (Shape{4, 48}));
  EXPECT_EQ(q->up.shape(), (Shape{48, 4}));
  EXPECT_EQ(q->alpha_over_rank, 1.0f);
  EXPECT_FALSE(q->bias_delta.defined());

  const lora::LoraFile b = read(lora_fixture() / "b_original.safetensors");
  EXPECT_EQ(b.format, "original");
  EXPECT_EQ(b.layers.size(), 17u);
  EXPECT_EQ(b.full_weight_diffs, 1);  // the zero norm diff
  for (const char* module : {"blocks.0.attn1.to_out.0", "blocks.1.attn2.to_v",
                             "blocks.0.ffn.net.0.proj", "blocks.1.ffn.net.2"}) {
    const lora::LoraLayer* layer = find_layer(b, module);
    ASSERT_NE(layer, nullptr) << module;
    EXPECT_EQ(layer->alpha_over_rank, 0.5f) << module;  // alpha 1, rank 2
    EXPECT_TRUE(layer->bias_delta.defined()) << module;
  }
  const lora::LoraLayer* head = find_layer(b, "proj_out");  // head.head, no alpha
  ASSERT_NE(head, nullptr);
  EXPECT_EQ(head->alpha_over_rank, 1.0f);
  EXPECT_EQ(head->up.shape(), (Shape{64, 2}));
}

class LoraPipelineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (testing::shared_dir().empty()) GTEST_SKIP() << "../shared not found";
    reference_ = std::make_unique<SafetensorsFile>(
        SafetensorsFile::open(lora_fixture() / "reference.safetensors"));
    noise_ = SafetensorsFile::open(wan_tiny() / "reference/reference.safetensors")
                 .tensor("pipeline.noise")
                 .clone();
  }

  WanGenerationOutput generate(const std::vector<lora::LoraUse>& loras,
                               lora::LoraMode mode = lora::LoraMode::Auto) const {
    ModelIndex index = load_model_index(wan_tiny() / "model");
    attach_loras(index, loras, mode);
    const WanPipeline pipeline(index);
    const auto settings = nlohmann::json::parse(read_text_file(lora_fixture() / "reference.json"));
    WanGenerationInput input = testing::wan_fixture_input(settings["settings"]);
    input.initial_latents = noise_.clone();
    return pipeline.generate(input, /*keep_step_latents=*/true);
  }

  std::unique_ptr<SafetensorsFile> reference_;
  Tensor noise_;
};

// Both layouts at once, at 0.6 and 1.3 (diffusers: set_adapters(["a", "b"], [0.6, 1.3])), merged
// at load: every step's latents and the video as diffusers computes them unfused, and as it
// computes them after fuse_lora.
class LoraModeTest : public LoraPipelineTest,
                     public ::testing::WithParamInterface<lora::LoraMode> {};

TEST_P(LoraModeTest, TwoLorasAtTwoScalesMatchDiffusers) {
  const WanGenerationOutput output = generate({{lora_fixture() / "a_diffusers.safetensors", 0.6},
                                               {lora_fixture() / "b_original.safetensors", 1.3}},
                                              GetParam());
  ASSERT_EQ(output.latents_after_step.size(), 4u);
  for (int k = 0; k < 4; ++k)
    EXPECT_LT(
        testing::relative_error(output.latents_after_step[size_t(k)],
                                reference_->tensor("both.latents_after_step" + std::to_string(k))),
        1e-5)
        << "step " << k;
  EXPECT_LT(testing::max_abs_diff(output.frames, reference_->tensor("both.video")), 1e-5);
  EXPECT_LT(testing::max_abs_diff(output.frames, reference_->tensor("both_fused.video")), 1e-5);
  // The LoRAs change the video far beyond that: a merge that did nothing would fail.
  EXPECT_GT(testing::max_abs_diff(output.frames, reference_->tensor("a.video")), 1e-2);
}

// Merged at load (the default for these float32 weights), and as low-rank updates the products
// add as they run (the base weights untouched).
INSTANTIATE_TEST_SUITE_P(Modes, LoraModeTest,
                         ::testing::Values(lora::LoraMode::Auto, lora::LoraMode::Runtime),
                         [](const auto& info) {
                           return info.param == lora::LoraMode::Auto ? "Merged" : "Runtime";
                         });

TEST_F(LoraPipelineTest, OneLoraAtItsDefaultScaleMatchesDiffusers) {
  const WanGenerationOutput output = generate({{lora_fixture() / "a_diffusers.safetensors", 1.0}});
  EXPECT_LT(testing::max_abs_diff(output.frames, reference_->tensor("a.video")), 1e-5);
}

// FLUX in diffusers/peft names: one adapter on every linear layer of the double and single blocks
// (their adaLN products and the fused single-block output projection too) at 0.8, as diffusers'
// set_adapters(["a"], [0.8]) runs it on the flux-tiny reference request.
TEST(Lora, FluxInDiffusersNamesMatchesDiffusers) {
  const fs::path tiny = testing::source_dir() / "tests/fixtures/flux-tiny";
  const fs::path fixture = testing::source_dir() / "tests/fixtures/flux-tiny-lora";
  const SafetensorsFile reference = SafetensorsFile::open(fixture / "reference.safetensors");
  const auto settings = nlohmann::json::parse(read_text_file(fixture / "reference.json"));
  for (const lora::LoraMode mode : {lora::LoraMode::Merge, lora::LoraMode::Runtime}) {
    SCOPED_TRACE(mode == lora::LoraMode::Merge ? "merged" : "runtime");
    ModelIndex index = load_model_index(tiny / "model");
    attach_loras(index, {{fixture / "lora_diffusers.safetensors", 0.8}}, mode);
    const FluxPipeline pipeline(index);
    FluxGenerationInput input = testing::flux_fixture_input(settings["settings"]);
    input.initial_latents =
        SafetensorsFile::open(tiny / "reference/reference.safetensors").tensor("pipeline.noise");
    const FluxGenerationOutput output = pipeline.generate(input, /*keep_step_latents=*/true);
    ASSERT_EQ(output.latents_after_step.size(), 4u);
    for (int k = 0; k < 4; ++k)
      EXPECT_LT(
          testing::relative_error(output.latents_after_step[size_t(k)],
                                  reference.tensor("lora.latents_after_step" + std::to_string(k))),
          1e-4)
          << "step " << k;
    EXPECT_LT(testing::max_abs_diff(output.frames, reference.tensor("lora.image")), 1e-3);
  }
}

// A diffusers file whose adapter has lora_alpha 8 at rank 4 keeps that in its metadata (no .alpha
// keys): scaled by 2, as peft scales it (read as 1, the video would be 1e-2 off).
TEST_F(LoraPipelineTest, AnAlphaInTheFilesMetadataScalesAsPeftDoes) {
  EXPECT_EQ(read(lora_fixture() / "c_alpha_metadata.safetensors").layers.front().alpha_over_rank,
            2.0f);
  const WanGenerationOutput output =
      generate({{lora_fixture() / "c_alpha_metadata.safetensors", 1.0}});
  EXPECT_LT(testing::max_abs_diff(output.frames, reference_->tensor("c.video")), 1e-5);
}

// Both fixture LoRAs (0.6, 1.3) on the wan-tiny transformer from `quantized` at run time (the
// products reading the weights as stored), and merged into `values` (the same weights as float32
// values): the same forward up to float32 rounding. A merge into `quantized` itself is refused,
// and Auto picks the runtime mode for it.
void expect_runtime_is_merge_into_values(const dit::WanTransformer& reference,
                                         const WeightStore& quantized, const WeightStore& values,
                                         const fs::path& loras_folder) {
  const lora::ModuleNames names = dit::WanTransformer::lora_targets;
  const lora::LoraFile a =
      lora::read_lora_file(loras_folder / "a_diffusers.safetensors", "transformer", names);
  const lora::LoraFile b =
      lora::read_lora_file(loras_folder / "b_original.safetensors", "transformer", names);
  const std::vector<lora::ScaledLora> loras = {{&a, 0.6}, {&b, 1.3}};
  const models::ParameterList tree = [&](const models::ParameterVisitor& visit) {
    reference.list_parameters(visit);
  };
  EXPECT_EQ(lora::resolved_mode(lora::LoraMode::Auto, quantized, loras), lora::LoraMode::Runtime);
  EXPECT_EQ(lora::resolved_mode(lora::LoraMode::Auto, values, loras), lora::LoraMode::Merge);
  EXPECT_THROW(lora::merge_loras(quantized, tree, loras, "WanTransformer3DModel"), Error);

  const Tensor latents = dit::random_tensor({1, 16, 2, 4, 6}, 0.0f, 1.0f, 5, DType::F32);
  const Tensor text = dit::random_tensor({1, 7, 32}, 0.0f, 0.5f, 6, DType::F32);
  const auto forward = [&](WeightStore store) {
    return dit::WanTransformer(reference.config(), std::move(store)).forward(latents, 700.0f, text);
  };
  const Tensor runtime =
      forward(lora::with_runtime_loras(quantized, tree, loras, "WanTransformer3DModel"));
  const Tensor merged = forward(lora::merge_loras(values, tree, loras, "WanTransformer3DModel"));
  EXPECT_LT(testing::relative_error(runtime, merged), 1e-5);
  EXPECT_GT(testing::relative_error(forward(quantized), merged), 1e-2);  // the LoRAs do change it
}

// A GGUF base: the wan-tiny transformer's products in q8_0 where their inputs fill whole blocks
// (ffn.net.2's, which both LoRAs change); the values: the blocks dequantized, written as float32.
TEST_F(LoraPipelineTest, RuntimeOnGgufBlocksIsTheMergeIntoTheirValues) {
  const dit::WanTransformer reference = dit::WanTransformer::load(wan_tiny() / "model/transformer");
  const WeightStore& weights = reference.weights();
  std::vector<gguf::TensorToWrite> blocks, values;
  for (const std::string& name : weights.names()) {
    const Tensor value = weights.get_f32(name);
    if (value.dim() == 2 && value.size(1) % 32 == 0) {
      Tensor q8 = Tensor::empty({value.size(0), value.size(1) / 32}, DType::Q8_0);
      gguf::quantize_q8_0(value.data<float>(), value.numel(), q8.raw());
      blocks.push_back({name, value, gguf::GgmlType::Q8_0});
      values.push_back({name, q8.to(DType::F32), gguf::GgmlType::F32});
    } else {
      blocks.push_back({name, value, gguf::GgmlType::F32});
      values.push_back({name, value, gguf::GgmlType::F32});
    }
  }
  const fs::path folder = testing::scratch_dir("lora_gguf");
  gguf::write_gguf(folder / "q8.gguf", {{"general.architecture", "wan"}}, blocks);
  gguf::write_gguf(folder / "values.gguf", {{"general.architecture", "wan"}}, values);
  const WeightStore q8 = WeightStore::open_file(folder / "q8.gguf");
  ASSERT_EQ(q8.product_dtype("blocks.0.ffn.net.2.weight"), DType::Q8_0);
  expect_runtime_is_merge_into_values(reference, q8, WeightStore::open_file(folder / "values.gguf"),
                                      lora_fixture());
}

// An FP8 checkpoint (`mmgen convert --type fp8_e4m3`: ComfyUI's scaled e4m3, the products read
// as e4m3 rows); the values: what the store reads of it as float32, written as float32.
TEST_F(LoraPipelineTest, RuntimeOnFp8WeightsIsTheMergeIntoTheirValues) {
  const fs::path folder = testing::scratch_dir("lora_fp8");
  const fs::path fp8 = folder / "fp8" / "wan-fp8.safetensors";
  ASSERT_EQ(cli::run_convert({"--input", (wan_tiny() / "model/transformer").string(), "--out",
                              fp8.string(), "--type", "fp8_e4m3", "--overwrite"}),
            0);
  const WeightStore quantized = WeightStore::open_file(fp8);
  ASSERT_EQ(quantized.product_dtype("blocks.0.attn1.to_q.weight"), DType::F8E4M3Rows);
  NamedTensors values;
  for (const std::string& name : quantized.names())
    values.emplace_back(name, quantized.get_f32(name));
  write_safetensors(folder / "values.safetensors", values);
  const dit::WanTransformer reference = dit::WanTransformer::load(wan_tiny() / "model/transformer");
  expect_runtime_is_merge_into_values(
      reference, quantized, WeightStore::open_file(folder / "values.safetensors"), lora_fixture());
}

// A LoRA file for testing refusals: `tensors` written to `name` in a scratch folder.
fs::path lora_file(const std::string& name, const NamedTensors& tensors,
                   const std::map<std::string, std::string>& metadata = {}) {
  const fs::path path = testing::scratch_dir("lora_" + name) / (name + ".safetensors");
  write_safetensors(path, tensors, metadata);
  return path;
}

Tensor zeros(Shape shape) {
  return Tensor::zeros(std::move(shape));
}

// `action` throws one line that holds `expected`.
void expect_one_line_refusal(const std::function<void()>& action, const std::string& expected) {
  const std::string message = testing::error_message(action);
  EXPECT_NE(message.find(expected), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
}

TEST(Lora, MalformedFilesAreRefusedInOneLine) {
  const std::string q = "transformer.blocks.0.attn1.to_q.";
  const struct {
    const char* name;
    NamedTensors tensors;
    const char* expected;
  } cases[] = {
      {"kohya_no_up",
       {{"lora_unet_blocks_0_q.lora_down.weight", zeros({2, 48})}},
       "has no up matrix"},
      {"not_lora", {{q + "weight", zeros({48, 48})}}, "is not a LoRA tensor"},
      {"no_up", {{q + "lora_A.weight", zeros({2, 48})}}, "has no up matrix"},
      {"ranks",
       {{q + "lora_A.weight", zeros({2, 48})}, {q + "lora_B.weight", zeros({48, 3})}},
       "their ranks differ"},
      {"conv", {{q + "lora_A.weight", zeros({2, 48, 1, 1})}}, "convolution LoRAs"},
      {"alpha",
       {{q + "lora_A.weight", zeros({2, 48})},
        {q + "lora_B.weight", zeros({48, 2})},
        {q + "alpha", Tensor::full({1}, -1.0f)}},
       "an alpha is above 0"},
      {"empty", {{"text_encoder.x.lora_A.weight", zeros({2, 4})}}, "no LoRA tensor for the"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    expect_one_line_refusal([&] { read(lora_file(c.name, c.tensors)); }, c.expected);
  }
  // Adapter settings in the metadata that mmgen cannot honour.
  const NamedTensors pair = {{q + "lora_A.weight", zeros({2, 48})},
                             {q + "lora_B.weight", zeros({48, 2})}};
  for (const auto& [settings, expected] : std::vector<std::pair<std::string, std::string>>{
           {R"({"transformer.use_dora": true})", "is a DoRA"},
           {R"({"transformer.alpha_pattern": {"to_q": 4}})", "their own alpha"},
           {R"({"transformer.lora_alpha": -2})", "an alpha is a number above 0"},
           {"{not json", "malformed JSON"}}) {
    SCOPED_TRACE(settings);
    expect_one_line_refusal(
        [&] {
          read(lora_file("metadata", pair, {{"lora_adapter_metadata", settings}}));
        },
        expected);
  }
}

// A LoRA made for another model (a layer this one lacks) or another size (a layer of another
// shape) changes nothing: refused in one line naming the key and the model's tensor.
TEST(Lora, ALoraForAnotherModelIsRefusedBeforeAnyMerge) {
  MMGEN_REQUIRE_SHARED();
  const auto model = dit::WanTransformer::load(wan_tiny() / "model/transformer");
  const auto tree = [&](const models::ParameterVisitor& v) { model.list_parameters(v); };
  const std::string q = "transformer.blocks.0.attn1.to_q.";
  const struct {
    const char* name;
    NamedTensors tensors;
    const char* expected;
  } cases[] = {
      {"size",
       {{q + "lora_A.weight", zeros({2, 64})}, {q + "lora_B.weight", zeros({48, 2})}},
       "makes a [48, 64] change for 'blocks.0.attn1.to_q.weight', which is [48, 48]"},
      {"layer",
       {{"transformer.blocks.0.attn1.to_qkv.lora_A.weight", zeros({2, 48})},
        {"transformer.blocks.0.attn1.to_qkv.lora_B.weight", zeros({48, 2})}},
       "does not have as a linear layer"},
      {"norm",  // a norm is a tensor of the model, not a linear layer
       {{"transformer.blocks.0.norm2.lora_A.weight", zeros({2, 48})},
        {"transformer.blocks.0.norm2.lora_B.weight", zeros({48, 2})}},
       "does not have as a linear layer"},
      {"bias", {{q + "lora_B.bias", zeros({47})}}, "has shape [47], the bias"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const lora::LoraFile file = read(lora_file(c.name, c.tensors));
    const std::string message = testing::error_message([&] {
      lora::merge_loras(model.weights(), tree, {{&file, 1.0}}, "WanTransformer3DModel");
    });
    EXPECT_NE(message.find(c.expected), std::string::npos) << message;
    EXPECT_NE(message.find(c.name), std::string::npos) << message;  // the file
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

// From the command line: a misfit LoRA stops the run in one line (after the run's info lines, as
// every load-time refusal: --quiet keeps the error alone) and writes nothing.
TEST(Lora, TheCliRefusesAMisfitLoraAndWritesNothing) {
  MMGEN_REQUIRE_SHARED();
  const fs::path bad =
      lora_file("cli_misfit", {{"transformer.blocks.0.attn1.to_q.lora_A.weight", zeros({2, 64})},
                               {"transformer.blocks.0.attn1.to_q.lora_B.weight", zeros({48, 2})}});
  const fs::path out = testing::scratch_dir("lora_cli_out");
  const auto result = testing::run_command(
      testing::mmgen_binary().string() + " generate --model-path " +
      (wan_tiny() / "model").string() +
      " --quiet --prompt fox --height 32 --width 48 --num-frames 1 --num-inference-steps 1 "
      "--lora-path " +
      bad.string() + " --output-path " + out.string());
  testing::expect_one_line_error(result, "makes a [48, 64] change", "misfit LoRA");
  EXPECT_TRUE(fs::is_empty(out));
  const auto scales = testing::run_command(
      testing::mmgen_binary().string() + " generate --model-path " +
      (wan_tiny() / "model").string() + " --prompt fox --lora-scale 0.5 --dry-run");
  testing::expect_one_line_error(scales, "--lora-scale without --lora-path", "scale alone");
}

// What ran is recorded: the dry run lists each LoRA (its format, layers, ranks, scale, mode and
// SHA-256), and the output's settings each file's name, SHA-256 and scale. The hashes are
// sha256sum's of the committed fixture files.
TEST(Lora, TheDryRunAndTheOutputsMetadataNameEachLoraByItsHash) {
  MMGEN_REQUIRE_SHARED();
  const std::string a_hash = "dbb13cdceed5dacc979295352a6c9f4cb9b9f300490dc46a2a09a96eaf7ecb19",
                    b_hash = "74efa712441bf2e634c2e2083cdc6de91251dfe4dc8650a24c3eef7d4227c55a";
  const fs::path out = testing::scratch_dir("lora_metadata");
  const std::string command =
      testing::mmgen_binary().string() + " generate --model-path " +
      (wan_tiny() / "model").string() + " --quiet --prompt fox --height 32 --width 48 " +
      "--num-frames 1 --num-inference-steps 1 --lora-path " +
      (lora_fixture() / "a_diffusers.safetensors").string() + " --lora-scale 0.6 --lora-path " +
      (lora_fixture() / "b_original.safetensors").string() + " --lora-scale 1.3 ";
  const auto dry = testing::run_command(command + "--lora-mode runtime --dry-run");
  ASSERT_EQ(dry.exit_code, 0) << dry.err;
  const nlohmann::json listed =
      nlohmann::json::parse(dry.out)["components"]["transformer"]["loras"];
  ASSERT_EQ(listed.size(), 2u);
  EXPECT_EQ(listed[0]["format"], "diffusers/peft");
  EXPECT_EQ(listed[0]["ranks"], nlohmann::json::array({4}));
  EXPECT_EQ(listed[0]["layers"], 20);
  EXPECT_EQ(listed[0]["sha256"], a_hash);
  EXPECT_EQ(listed[1]["format"], "original");
  EXPECT_EQ(listed[1]["ranks"], nlohmann::json::array({2}));
  EXPECT_EQ(listed[1]["bias_deltas"], 17);
  EXPECT_EQ(listed[1]["full_weight_diffs_left_out"], 1);
  EXPECT_EQ(listed[1]["scale"], 1.3);
  EXPECT_EQ(listed[1]["mode"], "runtime");
  EXPECT_EQ(listed[1]["sha256"], b_hash);

  const auto run = testing::run_command(command + "--output-format npy --output-file-name v " +
                                        "--output-path " + out.string());
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const nlohmann::json settings = nlohmann::json::parse(read_text_file(out / "v.npy.json"));
  EXPECT_EQ(settings["loras"],
            nlohmann::json::array(
                {{{"file", "a_diffusers.safetensors"}, {"sha256", a_hash}, {"scale", 0.6}},
                 {{"file", "b_original.safetensors"}, {"sha256", b_hash}, {"scale", 1.3}}}));
}

// Keys for a component the pipeline applies no LoRA to (Wan's text encoder, as diffusers' Wan
// loader) are left out with a warning the dry run shows; the transformer's keys still apply.
TEST(Lora, KeysForAComponentThePipelineTakesNoLoraOnAreLeftOutWithAWarning) {
  MMGEN_REQUIRE_SHARED();
  NamedTensors tensors = {
      {"text_encoder.encoder.block.0.layer.0.SelfAttention.q.lora_A.weight", zeros({2, 32})},
      {"text_encoder.encoder.block.0.layer.0.SelfAttention.q.lora_B.weight", zeros({32, 2})}};
  const SafetensorsFile a = SafetensorsFile::open(lora_fixture() / "a_diffusers.safetensors");
  for (const std::string& name : a.names()) tensors.emplace_back(name, a.tensor(name).clone());
  const fs::path file = lora_file("with_text_encoder", tensors);
  const auto dry = testing::run_command(
      testing::mmgen_binary().string() + " generate --model-path " +
      (wan_tiny() / "model").string() + " --prompt fox --dry-run --lora-path " + file.string());
  ASSERT_EQ(dry.exit_code, 0) << dry.err;
  const nlohmann::json plan = nlohmann::json::parse(dry.out);
  ASSERT_EQ(plan["warnings"].size(), 1u) << plan["warnings"].dump();
  EXPECT_NE(plan["warnings"][0].get<std::string>().find(
                "has keys for the text_encoder, which WanPipeline applies no LoRA to"),
            std::string::npos);
  EXPECT_EQ(plan["components"]["transformer"]["loras"][0]["layers"], 20);
  EXPECT_FALSE(plan["components"]["text_encoder"].contains("loras"));
}

// FIPS 180-2's two one-block and two-block examples.
TEST(FileSha256, MatchesTheStandardsExamples) {
  const fs::path dir = testing::scratch_dir("sha256");
  const auto hash_of = [&](const std::string& text) {
    std::ofstream(dir / "f", std::ios::binary | std::ios::trunc) << text;
    return file_sha256(dir / "f");
  };
  EXPECT_EQ(hash_of("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(hash_of("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(hash_of(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_THROW(file_sha256(dir / "missing"), Error);
}

TEST(WeightStore, ReplacedTensorsAreReadInsteadOfTheStoredOnes) {
  const fs::path path = lora_file("store", {{"w", Tensor::full({2, 3}, 1.0f)}});
  const WeightStore store = WeightStore::open_file(path);
  const WeightStore replaced = store.with_replaced({{"w", Tensor::full({2, 3}, 5.0f)}});
  EXPECT_EQ(replaced.get("w").data<float>()[4], 5.0f);
  EXPECT_EQ(replaced.get_for_product("w").data<float>()[0], 5.0f);
  EXPECT_EQ(store.get("w").data<float>()[4], 1.0f);  // the original store is unchanged
  EXPECT_NE(testing::error_message([&] {
              store.with_replaced({{"w", Tensor::zeros({3, 2})}});
            }).find("shape [2, 3]"),
            std::string::npos);
  EXPECT_NE(testing::error_message([&] {
              store.with_replaced({{"x", Tensor::zeros({1})}});
            }).find("no weight named 'x'"),
            std::string::npos);
}

}  // namespace
}  // namespace mmgen
