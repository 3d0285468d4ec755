// The attention-backend selector: the four levels in every combination, the forced guard,
// component overrides in their three forms, the allowed sets per layer and their fallbacks, the
// environment variable, auto choice per platform, the catalogue's statuses on this CPU-only build,
// the generated docs, and the plan the dry-run prints for the wan-tiny example.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "attention/catalogue.h"
#include "attention/selector.h"
#include "core/error.h"
#include "generate/backends_command.h"
#include "pipeline/attention_plan.h"
#include "tests/test_support.h"

namespace mmgen::attention {
namespace {

using json = nlohmann::json;

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

// These tests are written against a CPU build whose only kernels are the references torch_sdpa
// (DiT) and torch_native (paged), so that they keep their meaning as kernels land; ThisBuild*
// tests check the real build.
Machine bare_cpu() {
  Machine machine = this_machine();
  std::erase_if(machine.kernels, [](const KernelBuild& kernel) {
    return kernel.backend != (kernel.family == Family::Dit ? "torch_sdpa" : "torch_native");
  });
  return machine;
}

// The selection on the reference-only CPU build unless a machine is given.
ComponentChoice choose(const ComponentAttention& component, const SelectionLevels& levels,
                       const Machine& machine = bare_cpu()) {
  return select_component(component, levels, machine);
}

// A CPU machine with extra kernels registered, as later issues will.
Machine cpu_with(std::vector<std::string_view> dit_kernels,
                 std::vector<std::string_view> paged_kernels = {}) {
  Machine machine = bare_cpu();
  for (auto name : dit_kernels)
    machine.kernels.push_back(
        {.family = Family::Dit, .backend = name, .platform = Platform::Cpu, .dtypes = {"fp32"}});
  for (auto name : paged_kernels)
    machine.kernels.push_back(
        {.family = Family::Paged, .backend = name, .platform = Platform::Cpu, .dtypes = {"fp32"}});
  return machine;
}

// An H100-like CUDA build.
Machine cuda(int sm, std::string dtype = "bf16") {
  Machine machine;
  machine.platform = Platform::Cuda;
  machine.sm = sm;
  machine.dtype = dtype;
  machine.description = fmt::format("cuda sm{}", sm);
  const std::vector<int> fa_heads = {32, 64, 96, 128, 160, 192, 224, 256};
  machine.kernels = {
      {.family = Family::Dit,
       .backend = "fa",
       .platform = Platform::Cuda,
       .dtypes = {"bf16", "fp16"},
       .head_sizes = fa_heads,
       .min_sm = 80,
       .max_sm = 109},
      {.family = Family::Dit,
       .backend = "torch_sdpa",
       .platform = Platform::Cuda,
       .dtypes = {"bf16", "fp16", "fp32"}},
      {.family = Family::Dit,
       .backend = "sliding_tile_attn",
       .platform = Platform::Cuda,
       .dtypes = {"bf16"},
       .head_sizes = {128},
       .min_sm = 90,
       .max_sm = 90},
      {.family = Family::Paged,
       .backend = "fa3",
       .platform = Platform::Cuda,
       .dtypes = {"bf16", "fp16"},
       .min_sm = 90,
       .max_sm = 90},
      {.family = Family::Paged,
       .backend = "torch_native",
       .platform = Platform::Cuda,
       .dtypes = {"bf16", "fp16", "fp32"}},
  };
  return machine;
}

const ComponentAttention kTransformer{"transformer", ComponentRole::Dit, 128};
const ComponentAttention kTextEncoder{"text_encoder", ComponentRole::TextEncoder, 64};
const ComponentAttention kVae{"vae", ComponentRole::Dense, 0};

SelectionLevels levels(ComponentOverrides overrides = {}, std::optional<std::string> cli = {},
                       std::optional<std::string> env = {}) {
  return selection_levels(overrides, cli, env);
}

// Every test starts and ends with nothing forced.
class Selection : public ::testing::Test {
 protected:
  void SetUp() override { clear_forced_attention_backend(); }
  void TearDown() override { clear_forced_attention_backend(); }
};

// ------------------------------------------------------------------ priority

TEST_F(Selection, PriorityOrderInEveryCombinationOfLevels) {
  // Distinct, runnable backends per level, so the winner is visible in the result.
  const Machine machine =
      cpu_with({"fa", "sage_attn", "sla_attn", "video_sparse_attn", "sparse_video_gen_2_attn"});
  for (int mask = 0; mask < 16; ++mask) {
    const bool forced = mask & 1, component = mask & 2, cli = mask & 4, env = mask & 8;
    SCOPED_TRACE(fmt::format("forced={} component={} cli={} env={}", forced, component, cli, env));
    std::optional<ForcedAttentionBackend> guard;
    if (forced) guard.emplace("sage_attn");
    ComponentOverrides overrides;
    if (component) overrides["transformer"] = "sla_attn";
    const ComponentChoice choice = choose(
        kTransformer,
        levels(overrides, cli ? std::optional<std::string>("video_sparse_attn") : std::nullopt,
               env ? std::optional<std::string>("sparse_video_gen_2_attn") : std::nullopt),
        machine);
    std::string backend = "fa";
    Source source = Source::Auto;
    if (forced) {
      backend = "sage_attn", source = Source::Forced;
    } else if (component) {
      backend = "sla_attn", source = Source::Component;
    } else if (cli) {
      backend = "video_sparse_attn", source = Source::Cli;
    } else if (env) {
      backend = "sparse_video_gen_2_attn", source = Source::Env;
    }
    EXPECT_EQ(choice.primary().backend, backend);
    EXPECT_EQ(choice.source, source);
    EXPECT_EQ(choice.primary().fallback, "");
    EXPECT_EQ(choice.requested, source == Source::Auto ? "" : backend);
  }
}

TEST_F(Selection, SourceNames) {
  EXPECT_EQ(source_name(Source::Forced), "forced");
  EXPECT_EQ(source_name(Source::Component), "component");
  EXPECT_EQ(source_name(Source::Cli), "cli");
  EXPECT_EQ(source_name(Source::Env), "env");
  EXPECT_EQ(source_name(Source::Auto), "auto");
}

// ------------------------------------------------------------------ level 1: force

TEST_F(Selection, ForceAndClear) {
  EXPECT_FALSE(forced_attention_backend());
  force_attention_backend("FA3");
  EXPECT_EQ(forced_attention_backend(), "fa3");
  const ComponentChoice choice = choose(kTransformer, levels({}, "sage_attn"));
  EXPECT_EQ(choice.source, Source::Forced);
  EXPECT_EQ(choice.primary().backend, "torch_sdpa");  // fa3 is fa, which falls back on this build
  clear_forced_attention_backend();
  EXPECT_FALSE(forced_attention_backend());
  EXPECT_ERROR_HAS(force_attention_backend("blaze"), "force_attention_backend",
                   "unknown attention backend 'blaze'");
  EXPECT_FALSE(forced_attention_backend());
}

// Names from diffusers' attention dispatcher and from habit mean one of ours, with a note saying
// which; the ones mmgen has no counterpart for say what to use.
TEST_F(Selection, OtherToolsNamesResolveToOurs) {
  const std::vector<std::pair<std::string, std::string>> mapped = {
      {"native", "torch_sdpa"},
      {"_native_flash", "torch_sdpa"},
      {"_native_cudnn", "torch_sdpa"},
      {"_native_math", "torch_sdpa"},
      {"sdpa", "torch_sdpa"},
      {"flash", "fa"},
      {"flash_varlen", "fa"},
      {"_flash_3", "fa"},
      {"_flash_3_hub", "fa"},
      {"flash_attn", "fa"},
      {"Flash-Attn", "fa"},
      {"flash_attention_2", "fa"},
      {"sage", "sage_attn"},
      {"_sage_qk_int8_pv_fp16_triton", "sage_attn"}};
  for (const auto& [name, ours] : mapped) {
    std::string note;
    EXPECT_EQ(resolve_backend_name(name, "--attention-backend " + name, &note), ours) << name;
    EXPECT_NE(note.find("is " + ours + " here"), std::string::npos) << note;
  }
  std::string note;
  EXPECT_EQ(resolve_backend_name(" FA3 ", "x", &note), "fa3");  // our own names pass
  EXPECT_EQ(note, "");
  EXPECT_ERROR_HAS(resolve_backend_name("xformers", "--attention-backend xformers"),
                   "--attention-backend xformers: diffusers' xformers", "fa computes the same");
  EXPECT_ERROR_HAS(resolve_backend_name("flash_atn", "w"),
                   "unknown attention backend 'flash_atn' (did you mean flash_attn, which is fa "
                   "here?)");
  // The levels resolve the cli and env names and keep the notes.
  const SelectionLevels resolved = selection_levels({}, std::string("sdpa"), std::string("sage"));
  EXPECT_EQ(resolved.cli, "torch_sdpa");
  EXPECT_EQ(resolved.env, "sage_attn");
  EXPECT_EQ(resolved.notes.size(), 2u);
  std::vector<std::string> notes;
  EXPECT_EQ(parse_component_attention_backends(json("transformer=flash"),
                                               "--component-attention-backends", &notes),
            ComponentOverrides({{"transformer", "fa"}}));
  EXPECT_EQ(notes.size(), 1u);
}

TEST_F(Selection, GuardRestoresThePreviousStateNested) {
  {
    ForcedAttentionBackend outer("torch_sdpa");
    EXPECT_EQ(forced_attention_backend(), "torch_sdpa");
    {
      ForcedAttentionBackend inner("fa");
      EXPECT_EQ(forced_attention_backend(), "fa");
      {
        ForcedAttentionBackend innermost("sage_attn");
        EXPECT_EQ(forced_attention_backend(), "sage_attn");
      }
      EXPECT_EQ(forced_attention_backend(), "fa");
    }
    EXPECT_EQ(forced_attention_backend(), "torch_sdpa");
  }
  EXPECT_FALSE(forced_attention_backend());
  // Over a plain force, the guard restores that force.
  force_attention_backend("fa");
  { ForcedAttentionBackend guard("torch_sdpa"); }
  EXPECT_EQ(forced_attention_backend(), "fa");
}

TEST_F(Selection, GuardRestoresWhenAnExceptionPassesThrough) {
  ForcedAttentionBackend outer("fa");
  try {
    ForcedAttentionBackend inner("torch_sdpa");
    ForcedAttentionBackend innermost("sage_attn");
    throw std::runtime_error("calibration failed");
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(forced_attention_backend(), "fa");
  // A guard with a bad name throws before changing anything.
  EXPECT_ERROR_HAS(ForcedAttentionBackend bad("nope"), "unknown attention backend 'nope'");
  EXPECT_EQ(forced_attention_backend(), "fa");
}

// ------------------------------------------------------------------ level 2: overrides

TEST_F(Selection, OverrideStringForm) {
  const auto overrides =
      parse_component_attention_backends(json("text-encoder=torch_native, transformer=FA3"));
  EXPECT_EQ(overrides,
            (ComponentOverrides{{"text_encoder", "torch_native"}, {"transformer", "fa3"}}));
  // The DiT family normalises fa3 to fa (then this build falls back to torch_sdpa).
  const auto choice = choose(kTransformer, levels(overrides));
  EXPECT_EQ(choice.source, Source::Component);
  EXPECT_EQ(choice.requested, "fa3");
  EXPECT_EQ(choice.primary().backend, "torch_sdpa");
  EXPECT_NE(choice.primary().fallback.find("fa cannot run here"), std::string::npos);
  const auto with_fa = choose(kTransformer, levels(overrides), cpu_with({"fa"}));
  EXPECT_EQ(with_fa.primary().backend, "fa");
}

TEST_F(Selection, OverrideJsonAndObjectForms) {
  const ComponentOverrides expected = {{"text_encoder", "torch_native"}, {"vae", "torch_sdpa"}};
  EXPECT_EQ(parse_component_attention_backends(
                json(R"({"text-encoder": "torch_native", "vae": "torch_sdpa"})")),
            expected);
  // The dotted flags (--component-attention-backends.text_encoder NAME) arrive as an object.
  EXPECT_EQ(parse_component_attention_backends(
                json{{"text_encoder", "torch_native"}, {"vae", "TORCH_SDPA"}}),
            expected);
  EXPECT_TRUE(parse_component_attention_backends(json()).empty());
  EXPECT_TRUE(parse_component_attention_backends(json("")).empty());
}

TEST_F(Selection, OverrideParseErrors) {
  const char* flag = "--component-attention-backends";
  EXPECT_ERROR_HAS(parse_component_attention_backends(json("transformer")), flag,
                   "'transformer' is not component=backend");
  EXPECT_ERROR_HAS(parse_component_attention_backends(json("transformer=blaze")), flag,
                   "unknown attention backend 'blaze'", "DiT backends:", "paged backends");
  EXPECT_ERROR_HAS(parse_component_attention_backends(json("transformer=torch_sdp")),
                   "did you mean torch_sdpa?");
  EXPECT_ERROR_HAS(parse_component_attention_backends(json("=fa")), "no component name");
  EXPECT_ERROR_HAS(parse_component_attention_backends(json("vae=")), "no backend");
  EXPECT_ERROR_HAS(parse_component_attention_backends(json("vae=fa,vae=torch_sdpa")),
                   "'vae' is given twice");
  EXPECT_ERROR_HAS(parse_component_attention_backends(json(R"({"vae": 3})")),
                   "vae must be a backend name");
  EXPECT_ERROR_HAS(parse_component_attention_backends(json(R"({"vae": )")), "malformed JSON");
}

TEST_F(Selection, OverrideComponentsAreCheckedAgainstTheModel) {
  const std::vector<std::string> with = {"text_encoder", "transformer", "vae"};
  const std::vector<std::string> without = {"scheduler", "tokenizer"};
  const std::vector<std::string> absent = {"transformer_2"};
  EXPECT_NO_THROW(check_override_components({{"vae", "fa"}}, with, without, absent));
  EXPECT_ERROR_HAS(check_override_components({{"transfomer", "fa"}}, with, without, absent),
                   "--component-attention-backends", "unknown component 'transfomer'",
                   "did you mean transformer?", "text_encoder, transformer, vae");
  EXPECT_ERROR_HAS(check_override_components({{"tokenizer", "fa"}}, with, without, absent),
                   "tokenizer has no attention layers");
  EXPECT_ERROR_HAS(check_override_components({{"transformer_2", "fa"}}, with, without, absent),
                   "transformer_2 is not part of this model", "[null, null]");
}

TEST_F(Selection, NumberedComponentUsesItsBaseOverride) {
  const ComponentAttention second{"transformer_2", ComponentRole::Dit, 128};
  const auto machine = cpu_with({"fa"});
  auto choice = choose(second, levels({{"transformer", "fa"}}, "torch_sdpa"), machine);
  EXPECT_EQ(choice.source, Source::Component);
  EXPECT_EQ(choice.override_key, "transformer");
  EXPECT_EQ(choice.primary().backend, "fa");
  choice =
      choose(second, levels({{"transformer", "fa"}, {"transformer_2", "torch_sdpa"}}), machine);
  EXPECT_EQ(choice.override_key, "transformer_2");
  EXPECT_EQ(choice.primary().backend, "torch_sdpa");
}

// ------------------------------------------------------------------ level 3: cli and env

TEST_F(Selection, EnvironmentVariableWhenTheFlagIsAbsent) {
  const auto machine = cpu_with({"fa"});
  auto choice = choose(kTransformer, levels({}, std::nullopt, "torch_sdpa"), machine);
  EXPECT_EQ(choice.source, Source::Env);
  EXPECT_EQ(choice.primary().backend, "torch_sdpa");
  choice = choose(kTransformer, levels({}, "fa", "torch_sdpa"), machine);
  EXPECT_EQ(choice.source, Source::Cli);
  EXPECT_EQ(choice.primary().backend, "fa");
  choice = choose(kTransformer, levels({}, std::nullopt, "  "), machine);
  EXPECT_EQ(choice.source, Source::Auto);
  EXPECT_ERROR_HAS(choose(kTransformer, levels({}, std::nullopt, "bogus")),
                   "MMGEN_ATTENTION_BACKEND=bogus", "unknown attention backend");
}

TEST_F(Selection, PlanReadsTheEnvironmentVariable) {
  const ModelIndex index = load_model_index(testing::source_dir() / "examples/models/wan-tiny");
  Request request;
  request.num_inference_steps = 2;
  ::setenv("MMGEN_ATTENTION_BACKEND", "fa", 1);
  AttentionPlan plan = plan_attention(index, request, cpu_with({"fa"}));
  ::unsetenv("MMGEN_ATTENTION_BACKEND");
  EXPECT_EQ(plan.components["transformer"].source, Source::Env);
  EXPECT_EQ(plan.components["transformer"].primary().backend, "fa");
  plan = plan_attention(index, request, cpu_with({"fa"}));
  EXPECT_EQ(plan.components["transformer"].source, Source::Auto);
}

TEST_F(Selection, UnknownNamesAtEveryLevel) {
  EXPECT_ERROR_HAS(choose(kTransformer, levels({}, "flashattn")), "--attention-backend flashattn",
                   "unknown attention backend");
  EXPECT_ERROR_HAS(choose(kVae, levels({{"vae", "zzz"}})),
                   "--component-attention-backends vae=zzz");
}

// ------------------------------------------------------------------ level 4: auto

TEST_F(Selection, ThisBuildRunsFaOnTheCpu) {
  // This build registers a CPU fa kernel: auto picks it for diffusion transformers (and the
  // dense VAE), fa3 / fa4 run it, and `mmgen backends` says it is available.
  EXPECT_EQ(select_component(kTransformer, levels()).primary().backend, "fa");
  EXPECT_EQ(select_component(kTransformer, levels({}, "fa3")).primary().fallback, "");
  EXPECT_EQ(select_component(kVae, levels()).primary().backend, "fa");
  EXPECT_EQ(cli::backends_json(this_machine())["auto"]["dit"], "fa");
  EXPECT_EQ(cli::backend_status(this_machine(), *find_backend(Family::Dit, "fa")).state,
            "available");
}

TEST_F(Selection, ThisBuildsTextEncodersTakeTriton) {
  // Every paged CPU design is built; auto takes the catalogue's first, triton (fastest or tied
  // in bench/paged_attention_bench), ahead of flashinfer, and `mmgen backends` says so.
  EXPECT_EQ(select_component(kTextEncoder, levels()).primary().backend, "triton");
  EXPECT_EQ(select_component(kTextEncoder, levels()).source, Source::Auto);
  EXPECT_EQ(auto_backend(this_machine(), Family::Paged, "fp32", 64), "triton");
  EXPECT_EQ(cli::backends_json(this_machine())["auto"]["paged"], "triton");
  // The order, one kernel at a time: triton, then flashinfer, then torch_native.
  EXPECT_EQ(
      choose(kTextEncoder, levels(), cpu_with({}, {"flashinfer", "triton"})).primary().backend,
      "triton");
  EXPECT_EQ(choose(kTextEncoder, levels(), cpu_with({}, {"flashinfer", "fa3"})).primary().backend,
            "flashinfer");
  EXPECT_EQ(choose(kTextEncoder, levels(), cpu_with({}, {"fa3"})).primary().backend,
            "torch_native");
}

TEST_F(Selection, AutoOnTheTorchSdpaOnlyCpuBuild) {
  // Without a CPU fa kernel auto is torch_sdpa; it flips to fa once one is registered.
  EXPECT_EQ(choose(kTransformer, levels()).primary().backend, "torch_sdpa");
  EXPECT_EQ(choose(kTransformer, levels(), cpu_with({"fa"})).primary().backend, "fa");
  EXPECT_EQ(choose(kTextEncoder, levels()).primary().backend, "torch_native");
  EXPECT_EQ(choose(kVae, levels()).primary().backend, "torch_sdpa");
  EXPECT_EQ(choose(kTextEncoder, levels(), cpu_with({}, {"triton"})).primary().backend, "triton");
  const auto auto_choice = choose(kTransformer, levels());
  EXPECT_EQ(auto_choice.source, Source::Auto);
  EXPECT_EQ(auto_choice.primary().fallback, "");
}

TEST_F(Selection, AutoOnCudaByArchDtypeAndHeadSize) {
  EXPECT_EQ(auto_backend(cuda(90), Family::Dit, "bf16", 128), "fa");
  EXPECT_EQ(auto_backend(cuda(90), Family::Dit, "fp16", 32), "fa");
  EXPECT_EQ(auto_backend(cuda(90), Family::Dit, "bf16", 256), "fa");
  EXPECT_EQ(auto_backend(cuda(90), Family::Dit, "bf16", 24), "torch_sdpa");    // head size
  EXPECT_EQ(auto_backend(cuda(90), Family::Dit, "bf16", 512), "torch_sdpa");   // head size
  EXPECT_EQ(auto_backend(cuda(90), Family::Dit, "fp32", 128), "torch_sdpa");   // dtype
  EXPECT_EQ(auto_backend(cuda(75), Family::Dit, "bf16", 128), "torch_sdpa");   // too old
  EXPECT_EQ(auto_backend(cuda(120), Family::Dit, "bf16", 128), "torch_sdpa");  // consumer Blackwell
  EXPECT_EQ(auto_backend(cuda(90), Family::Paged, "bf16", 128), "fa3");
  EXPECT_EQ(auto_backend(cuda(80), Family::Paged, "bf16", 128), "torch_native");
  // Through the selector, with the machine's dtype.
  EXPECT_EQ(choose(kTransformer, levels(), cuda(90)).primary().backend, "fa");
  EXPECT_EQ(choose(kTransformer, levels(), cuda(90, "fp32")).primary().backend, "torch_sdpa");
}

TEST_F(Selection, ExplicitChoiceOnCudaFollowsFallbacksOrFails) {
  // fa on a head size the kernel lacks: the catalogue's fallback, recorded.
  const ComponentAttention odd{"transformer", ComponentRole::Dit, 24};
  auto choice = choose(odd, levels({}, "fa"), cuda(90));
  EXPECT_EQ(choice.primary().backend, "torch_sdpa");
  EXPECT_NE(choice.primary().fallback.find("head sizes 32, 64"), std::string::npos)
      << choice.primary().fallback;
  // STA has no fallback: on the wrong GPU the explicit choice is an error with the reason.
  EXPECT_ERROR_HAS(choose(kTransformer, levels({}, "sliding_tile_attn"), cuda(80)),
                   "--attention-backend sliding_tile_attn", "transformer cannot use it",
                   "needs sm90 or newer", "mmgen backends");
  EXPECT_ERROR_HAS(choose(kTransformer, levels({}, "sliding_tile_attn"), cuda(100)),
                   "supports up to sm90");
  choice = choose(kTransformer, levels({}, "sliding_tile_attn"), cuda(90));
  EXPECT_EQ(choice.layers[0].backend, "sliding_tile_attn");
  EXPECT_EQ(choice.layers[1].backend, "fa");  // cross-attention is dense
}

// ------------------------------------------------------------------ allowed sets

TEST_F(Selection, SparseChoiceUsesFaOnDenseLayers) {
  const auto machine = cpu_with({"fa", "sliding_tile_attn"});
  const auto transformer = choose(kTransformer, levels({}, "sliding_tile_attn"), machine);
  ASSERT_EQ(transformer.layers.size(), 2u);
  EXPECT_EQ(transformer.layers[0].kind, LayerKind::SelfAttention);
  EXPECT_EQ(transformer.layers[0].backend, "sliding_tile_attn");
  EXPECT_EQ(transformer.layers[0].fallback, "");
  EXPECT_EQ(transformer.layers[1].kind, LayerKind::CrossAttention);
  EXPECT_EQ(transformer.layers[1].backend, "fa");
  EXPECT_EQ(transformer.layers[1].fallback,
            "sliding_tile_attn is sparse and cross-attention is dense, so fa is used");
  const auto vae = choose(kVae, levels({}, "sliding_tile_attn"), machine);
  EXPECT_EQ(vae.primary().backend, "fa");
  EXPECT_EQ(vae.source, Source::Cli);
  EXPECT_EQ(vae.primary().fallback,
            "sliding_tile_attn is sparse and vae's attention is dense, so fa is used");
}

TEST_F(Selection, SparseChoiceUsesTorchSdpaWhereFaCannotRun) {
  const auto machine = cpu_with({"sliding_tile_attn"});
  const auto transformer = choose(kTransformer, levels({}, "sliding_tile_attn"), machine);
  EXPECT_EQ(transformer.layers[0].backend, "sliding_tile_attn");
  EXPECT_EQ(transformer.layers[1].backend, "torch_sdpa");
  EXPECT_EQ(transformer.layers[1].fallback,
            "sliding_tile_attn is sparse and cross-attention is dense, so fa is used; fa cannot "
            "run here (this build has no cpu kernel for it yet), so its fallback torch_sdpa is "
            "used");
  EXPECT_EQ(choose(kVae, levels({}, "video_sparse_attn"), machine).primary().backend, "torch_sdpa");
}

TEST_F(Selection, TextEncodersMapDitNamesToPagedCounterparts) {
  auto choice = choose(kTextEncoder, levels({}, "torch_sdpa"));
  EXPECT_EQ(choice.primary().backend, "torch_native");
  EXPECT_EQ(choice.primary().fallback, "");
  EXPECT_EQ(choice.source, Source::Cli);
  // fa -> fa3, which this build lacks: auto, with the reason.
  choice = choose(kTextEncoder, levels({}, "fa"));
  EXPECT_EQ(choice.primary().backend, "torch_native");
  EXPECT_EQ(choice.primary().fallback,
            "fa maps to fa3 for text encoders; fa3 cannot run here (this build has no cpu kernel "
            "for it yet); text encoders use auto: torch_native");
  choice = choose(kTextEncoder, levels({}, "fa"), cpu_with({}, {"fa3"}));
  EXPECT_EQ(choice.primary().backend, "fa3");
  EXPECT_EQ(choice.primary().fallback, "");
  // A paged name given globally is taken as is by text encoders.
  choice = choose(kTextEncoder, levels({}, "fa4"), cpu_with({}, {"fa3"}));
  EXPECT_EQ(choice.primary().backend, "torch_native");
  EXPECT_NE(choice.primary().fallback.find("fa4 cannot run here (it runs on cuda only"),
            std::string::npos);
  // A sparse DiT name has no counterpart.
  choice = choose(kTextEncoder, levels({}, "sliding_tile_attn"));
  EXPECT_EQ(choice.primary().backend, "torch_native");
  EXPECT_EQ(choice.primary().fallback,
            "sliding_tile_attn is a DiT backend without a paged counterpart; text encoders use "
            "auto: torch_native");
  // The forced level adapts the same way.
  ForcedAttentionBackend guard("torch_sdpa");
  choice = choose(kTextEncoder, levels({{"text_encoder", "triton"}}));
  EXPECT_EQ(choice.source, Source::Forced);
  EXPECT_EQ(choice.primary().backend, "torch_native");
}

// Dual chunk and MLA backends run only their kind of model, and such a model runs only them.
TEST_F(Selection, PagedBackendsRunOnlyTheirKindOfModel) {
  const Machine machine = cpu_with({}, {"triton", "dual_chunk_flash_attn"});
  EXPECT_ERROR_HAS(
      choose(kTextEncoder, levels({{"text_encoder", "dual_chunk_flash_attn"}}), machine),
      "--component-attention-backends text_encoder=dual_chunk_flash_attn",
      "dual_chunk_flash_attn runs only models with dual chunk attention and "
      "text_encoder's is plain");
  EXPECT_ERROR_HAS(choose(kTextEncoder, levels({{"text_encoder", "flashmla"}}), machine),
                   "flashmla runs only models with MLA attention");
  // Globally: auto, with the reason.
  auto choice = choose(kTextEncoder, levels({}, "dual_chunk_flash_attn"), machine);
  EXPECT_EQ(choice.primary().backend, "triton");
  EXPECT_EQ(choice.primary().fallback,
            "dual_chunk_flash_attn runs only models with dual chunk attention and text_encoder's "
            "is plain; text encoders use auto: triton");
  ComponentAttention dual = kTextEncoder;
  dual.model_attention = ModelAttention::DualChunk;
  EXPECT_EQ(choose(dual, levels(), machine).primary().backend, "dual_chunk_flash_attn");
  choice = choose(dual, levels({}, "fa"), machine);
  EXPECT_EQ(choice.primary().backend, "dual_chunk_flash_attn");
  EXPECT_NE(choice.primary().fallback.find("fa3 runs only models with plain attention"),
            std::string::npos)
      << choice.primary().fallback;
  EXPECT_ERROR_HAS(choose(dual, levels({{"text_encoder", "triton"}}), machine),
                   "triton runs only models with plain attention and text_encoder's is dual chunk");
  EXPECT_ERROR_HAS(choose(dual, levels(), cpu_with({}, {"triton"})),
                   "text_encoder has dual chunk attention, and no backend for it runs here");
}

TEST_F(Selection, ExplicitOverrideThatDoesNotFitIsAnError) {
  EXPECT_ERROR_HAS(choose(kTextEncoder, levels({{"text_encoder", "torch_sdpa"}})),
                   "--component-attention-backends text_encoder=torch_sdpa",
                   "text_encoder is a text encoder and takes a paged backend",
                   "its paged counterpart is torch_native: use text_encoder=torch_native");
  EXPECT_ERROR_HAS(choose(kTextEncoder, levels({{"text_encoder", "sage_attn"}})),
                   "sage_attn is a DiT backend");
  EXPECT_ERROR_HAS(choose(kTextEncoder, levels({{"text_encoder", "flashinfer"}})),
                   "text_encoder=flashinfer", "flashinfer cannot run here",
                   "no cpu kernel for it yet");
  EXPECT_ERROR_HAS(choose(kVae, levels({{"vae", "sliding_tile_attn"}})),
                   "--component-attention-backends vae=sliding_tile_attn",
                   "sliding_tile_attn is sparse but vae's attention is dense", "torch_sdpa");
  EXPECT_ERROR_HAS(choose(kVae, levels({{"vae", "triton"}})), "triton is a paged backend");
  EXPECT_ERROR_HAS(choose(kVae, levels({{"vae", "aiter"}})), "vae=aiter", "runs on rocm only");
  EXPECT_ERROR_HAS(choose(kTransformer, levels({{"transformer", "torch_native"}})),
                   "transformer=torch_native", "is a paged backend",
                   "transformer is a diffusion transformer");
  // A global paged name cannot drive a DiT either; the message says how to target encoders.
  EXPECT_ERROR_HAS(choose(kTransformer, levels({}, "triton")), "--attention-backend triton",
                   "is a paged backend", "--component-attention-backends text_encoder=NAME");
}

TEST_F(Selection, GlobalChoiceThatCannotRunOnAuxiliaryLayersFallsBackToAuto) {
  const auto vae = choose(kVae, levels({}, "aiter"));
  EXPECT_EQ(vae.primary().backend, "torch_sdpa");
  EXPECT_EQ(vae.primary().fallback,
            "aiter cannot run here (it runs on rocm only; this machine is cpu); using auto: "
            "torch_sdpa");
  EXPECT_ERROR_HAS(choose(kTransformer, levels({}, "aiter")), "transformer cannot use it",
                   "rocm only");
}

TEST_F(Selection, CatalogueFallbackChains) {
  auto choice = choose(kTransformer, levels({}, "sage_attn"));
  EXPECT_EQ(choice.primary().backend, "torch_sdpa");
  EXPECT_EQ(choice.primary().fallback,
            "sage_attn cannot run here (this build has no cpu kernel for it yet), so its fallback "
            "fa is used; fa cannot run here (this build has no cpu kernel for it yet), so its "
            "fallback torch_sdpa is used");
  choice = choose(kTransformer, levels({}, "sage_attn"), cpu_with({"fa"}));
  EXPECT_EQ(choice.primary().backend, "fa");
  choice = choose(kTransformer, levels({}, "sage_attn_3"), cpu_with({"fa"}));
  EXPECT_EQ(choice.primary().backend, "torch_sdpa");  // sage_attn_3 falls back to torch_sdpa
  EXPECT_ERROR_HAS(choose(kTransformer, levels({}, "sliding_tile_attn")),
                   "--attention-backend sliding_tile_attn", "transformer cannot use it",
                   "this build has no cpu kernel for it yet");
}

TEST_F(Selection, ComponentsWithoutAttention) {
  EXPECT_EQ(component_role("tokenizer", "T5Tokenizer"), ComponentRole::None);
  EXPECT_EQ(component_role("scheduler", "UniPCMultistepScheduler"), ComponentRole::None);
  EXPECT_EQ(component_role("transformer_2", "WanTransformer3DModel"), ComponentRole::Dit);
  EXPECT_EQ(component_role("text_encoder_2", "CLIPTextModel"), ComponentRole::TextEncoder);
  EXPECT_EQ(component_role("vae", "AutoencoderKLWan"), ComponentRole::Dense);
  EXPECT_EQ(component_role("image_encoder", "CLIPVisionModel"), ComponentRole::Dense);
  const auto choice =
      choose({"tokenizer", ComponentRole::None, 0}, levels({}, "sliding_tile_attn"));
  EXPECT_FALSE(choice.has_attention());
}

// ------------------------------------------------------------------ catalogue

TEST(Catalogue, KnowsEveryNameOfTheIssue) {
  for (const char* name : {"fa", "torch_sdpa", "sliding_tile_attn", "sage_attn", "sage_attn_3",
                           "video_sparse_attn", "vmoba_attn", "sla_attn", "sage_sla_attn",
                           "sparse_video_gen_2_attn", "aiter", "aiter_sage"})
    EXPECT_TRUE(find_backend(Family::Dit, name)) << name;
  for (const char* name :
       {"torch_native", "triton", "flashinfer", "fa3", "fa4", "flex_attention", "trtllm_mha",
        "dual_chunk_flash_attn", "aiter", "wave", "ascend", "intel_xpu", "intel_amx",
        "flashinfer_mla", "flashmla", "cutlass_mla", "trtllm_mla"})
    EXPECT_TRUE(find_backend(Family::Paged, name)) << name;
  EXPECT_EQ(find_backend(Family::Dit, "fa3")->name, "fa");
  EXPECT_EQ(find_backend(Family::Dit, "FA4")->name, "fa");
  EXPECT_EQ(find_backend(Family::Paged, "fa3")->name, "fa3");
  EXPECT_EQ(normalize_backend_name(Family::Dit, " Fa3 "), "fa");
  EXPECT_EQ(find_backend(Family::Dit, "sage_attn")->fallback, "fa");
  EXPECT_EQ(find_backend(Family::Dit, "sage_attn_3")->fallback, "torch_sdpa");
  EXPECT_EQ(find_backend(Family::Dit, "fa")->fallback, "torch_sdpa");
  EXPECT_FALSE(find_backend(Family::Dit, "triton"));
}

TEST(Catalogue, EntriesAreComplete) {
  std::set<std::pair<Family, std::string>> seen;
  for (const auto& b : backend_catalogue()) {
    SCOPED_TRACE(std::string(b.name));
    EXPECT_TRUE(seen.insert({b.family, std::string(b.name)}).second) << "duplicate";
    EXPECT_FALSE(b.summary.empty());
    EXPECT_FALSE(b.platforms.empty());
    EXPECT_FALSE(b.build_needs.empty());
    EXPECT_FALSE(b.dtypes.empty());
    EXPECT_FALSE(b.head_sizes.empty());
    EXPECT_EQ(b.family == Family::Paged, !b.page_sizes.empty());
    if (!b.fallback.empty()) {
      EXPECT_TRUE(find_backend(b.family, b.fallback));
    }
    if (!b.paged_counterpart.empty()) {
      EXPECT_TRUE(find_backend(Family::Paged, b.paged_counterpart));
    }
    for (const auto& key : b.config) {
      if (key.default_value.is_null()) continue;
      // Every default passes its own validation (STA's inference mode also needs a mask file,
      // which has no default, so the other STA keys are checked in tuning mode).
      json settings = {{std::string(key.name), key.default_value}};
      if (b.name == "sliding_tile_attn" && key.name != "sta_mode")
        settings["sta_mode"] = "STA_tuning";
      if (b.name == "sliding_tile_attn" && key.name == "sta_mode") continue;
      EXPECT_NO_THROW(validate_backend_config(settings, b.name, "test")) << key.name;
    }
  }
  for (const auto& kernel : compiled_kernels())
    EXPECT_TRUE(find_backend(kernel.family, kernel.backend)) << kernel.backend;
}

TEST(Catalogue, StatusesOnATorchSdpaOnlyCpuBuild) {
  const json info = cli::backends_json(bare_cpu());
  std::map<std::string, json> dit, paged;
  for (const auto& b : info["backends"])
    (b["family"] == "dit" ? dit : paged)[b["name"].get<std::string>()] = b;
  EXPECT_EQ(dit.size(), 12u);
  EXPECT_EQ(paged.size(), 17u);
  EXPECT_EQ(dit["torch_sdpa"]["status"], "available");
  EXPECT_EQ(paged["torch_native"]["status"], "available");
  for (const char* name : {"fa", "sage_attn", "sage_attn_3"}) {
    EXPECT_EQ(dit[name]["status"], "fallback") << name;
    EXPECT_EQ(dit[name]["falls_back_to"], "torch_sdpa") << name;
  }
  EXPECT_EQ(dit["fa"]["reason"], "fa: this build has no cpu kernel for it yet");
  EXPECT_EQ(dit["sage_attn"]["reason"],
            "sage_attn: this build has no cpu kernel for it yet; fa: this build has no cpu kernel "
            "for it yet");
  for (const char* name : {"sliding_tile_attn", "video_sparse_attn", "vmoba_attn", "sla_attn",
                           "sage_sla_attn", "sparse_video_gen_2_attn"}) {
    EXPECT_EQ(dit[name]["status"], "unavailable") << name;
    EXPECT_EQ(dit[name]["reason"], std::string(name) + ": this build has no cpu kernel for it yet");
  }
  EXPECT_EQ(dit["aiter"]["status"], "unavailable");
  EXPECT_EQ(dit["aiter"]["reason"], "aiter: it runs on rocm only; this machine is cpu");
  EXPECT_EQ(paged["fa4"]["reason"], "fa4: it runs on cuda only; this machine is cpu");
  EXPECT_EQ(paged["ascend"]["reason"], "ascend: it runs on npu only; this machine is cpu");
  EXPECT_EQ(paged["triton"]["status"], "unavailable");
  EXPECT_EQ(info["auto"]["dit"], "torch_sdpa");
  EXPECT_EQ(info["auto"]["paged"], "torch_native");
  EXPECT_EQ(info["machine"], "cpu");

  const std::string text = cli::backends_text(bare_cpu());
  EXPECT_NE(text.find("torch_sdpa                available"), std::string::npos) << text;
  EXPECT_NE(text.find("fa                        falls back to torch_sdpa"), std::string::npos);
  EXPECT_NE(text.find("sliding_tile_attn         unavailable (sliding_tile_attn: this build has "
                      "no cpu kernel for it yet)"),
            std::string::npos);
  EXPECT_NE(text.find("Auto choice here: torch_sdpa for diffusion transformers, torch_native for "
                      "text encoders"),
            std::string::npos);
}

TEST(Catalogue, StatusFlipsWhenAKernelIsRegistered) {
  const Machine machine = cpu_with({"fa"});
  EXPECT_EQ(cli::backend_status(machine, *find_backend(Family::Dit, "fa")).state, "available");
  const auto sage = cli::backend_status(machine, *find_backend(Family::Dit, "sage_attn"));
  EXPECT_EQ(sage.state, "fallback");
  EXPECT_EQ(sage.fallback_to, "fa");
  EXPECT_EQ(cli::backends_json(machine)["auto"]["dit"], "fa");
}

TEST(Catalogue, RunBackendsArguments) {
  EXPECT_ERROR_HAS(cli::run_backends({"--yaml"}), "backends: unknown argument '--yaml'");
  EXPECT_ERROR_HAS(cli::run_backends({"--json", "--markdown"}), "not both");
}

// The committed docs/attention-backends.md is the generator's output; MMGEN_UPDATE_DOCS=1
// rewrites it.
TEST(Catalogue, DocsFileIsGeneratedFromTheTable) {
  const fs::path path = testing::source_dir() / "docs/attention-backends.md";
  const std::string generated = cli::backends_markdown();
  if (const char* update = std::getenv("MMGEN_UPDATE_DOCS"); update && std::string(update) == "1")
    std::ofstream(path) << generated;
  std::ifstream in(path);
  ASSERT_TRUE(in) << path << " is missing; run `mmgen backends --markdown > " << path << "`";
  std::stringstream committed;
  committed << in.rdbuf();
  EXPECT_EQ(committed.str(), generated)
      << path << " is stale; run `mmgen backends --markdown > docs/attention-backends.md`";
  for (const auto& b : backend_catalogue())
    EXPECT_NE(generated.find(fmt::format("`{}`", b.name)), std::string::npos) << b.name;
}

// ------------------------------------------------------------------ the plan on wan-tiny

class WanTinyPlan : public Selection {
 protected:
  ModelIndex index = load_model_index(testing::source_dir() / "examples/models/wan-tiny");
  Request request = [] {
    Request r;
    r.num_inference_steps = 4;
    return r;
  }();
  AttentionPlan plan(const Machine& machine = bare_cpu()) {
    return plan_attention(index, request, machine, std::nullopt);
  }
};

TEST_F(WanTinyPlan, DefaultsAreAutoEverywhere) {
  const AttentionPlan p = plan();
  EXPECT_EQ(p.main_backend, "torch_sdpa");
  EXPECT_EQ(p.config_json(), json::object());
  const json transformer = p.component_json("transformer");
  EXPECT_EQ(transformer["attention_backend"], "torch_sdpa");
  EXPECT_EQ(transformer["attention_backend_source"], "auto");
  EXPECT_TRUE(transformer["attention_backend_fallback"].is_null());
  EXPECT_EQ(transformer["attention_layers"]["cross_attention"]["backend"], "torch_sdpa");
  EXPECT_EQ(p.component_json("text_encoder")["attention_backend"], "torch_native");
  EXPECT_EQ(p.component_json("vae")["attention_backend"], "torch_sdpa");
  for (const char* none : {"tokenizer", "scheduler"}) {
    const json fields = p.component_json(none);
    for (const char* key : {"attention_backend", "attention_backend_source",
                            "attention_backend_fallback", "attention_layers"})
      EXPECT_TRUE(fields[key].is_null()) << none << "." << key;
  }
}

TEST_F(WanTinyPlan, HeadSizesComeFromComponentConfigs) {
  // wan-tiny's head size 24 is outside a CUDA fa kernel's sizes: auto picks torch_sdpa there.
  EXPECT_EQ(plan(cuda(90)).components["transformer"].primary().backend, "torch_sdpa");
}

// plan() defaults to bare_cpu(), a build with the reference kernels only: there the issue's
// fixture (STA for the transformer, torch_native for the text encoder) fails when the plan is
// made, naming the transformer and the missing kernel; the text encoder's override does not
// hide the transformer's error. The real build has a CPU STA kernel: tests/sta_dry_run_test.cpp
// runs the same fixture through `mmgen generate --dry-run`.
TEST_F(WanTinyPlan, StaOnABuildWithoutItsKernelFailsWhenThePlanIsMade) {
  request.attention_backend = "sliding_tile_attn";
  request.component_attention_backends = "text_encoder=torch_native";
  EXPECT_ERROR_HAS(plan(), "--attention-backend sliding_tile_attn", "transformer cannot use it",
                   "this build has no cpu kernel for it yet");
}

// Without a mask file STA runs window_size everywhere (issue 51), and the plan's note says so.
TEST_F(WanTinyPlan, StaWithoutAMaskFileRunsWindowSize) {
  request.attention_backend = "sliding_tile_attn";
  request.component_attention_backends = "text_encoder=torch_native";
  request.num_inference_steps = 20;
  const AttentionPlan p = plan(cpu_with({"fa", "sliding_tile_attn"}));
  EXPECT_FALSE(p.resources.sta_mask);
  ASSERT_FALSE(p.notes.empty());
  EXPECT_NE(p.notes.back().find("window_size [3, 3, 3] tiles"), std::string::npos)
      << p.notes.back();
  EXPECT_NE(p.notes.back().find("steps 15..19"), std::string::npos) << p.notes.back();
}

TEST_F(WanTinyPlan, StaDryRunFieldsOnceTheKernelExists) {
  json mask = json::object();
  for (int t = 2; t < 4; ++t)  // skip_time_steps=2: steps 0 and 1 are dense
    for (int l = 0; l < 2; ++l)
      for (int h = 0; h < 2; ++h) mask[fmt::format("{}_{}_{}", t, l, h)] = {1, 1, 1};
  const fs::path mask_path = testing::scratch_dir("plan-sta") / "mask.json";
  std::ofstream(mask_path) << mask.dump();
  request.attention_backend = "sliding_tile_attn";
  request.component_attention_backends = "text_encoder=torch_native";
  request.attention_backend_config =
      "mask_strategy_file_path=" + mask_path.string() + ",skip_time_steps=2";
  const AttentionPlan p = plan(cpu_with({"fa", "sliding_tile_attn"}));
  ASSERT_TRUE(p.resources.sta_mask);
  EXPECT_EQ(p.config_json(), json({{"mask_strategy_file_path", mask_path.string()},
                                   {"sta_mode", "STA_inference"},
                                   {"skip_time_steps", 2},
                                   {"window_size", {3, 3, 3}},
                                   {"mask_search_threshold", 0.05},
                                   {"tile_size", {6, 8, 8}}}));
  EXPECT_EQ(p.component_json("transformer"), json::parse(R"({
              "attention_backend": "sliding_tile_attn",
              "attention_backend_source": "cli",
              "attention_backend_fallback": null,
              "attention_backend_requested": "sliding_tile_attn",
              "attention_layers": {
                "self_attention": {"backend": "sliding_tile_attn", "fallback": null},
                "cross_attention": {"backend": "fa", "fallback":
                  "sliding_tile_attn is sparse and cross-attention is dense, so fa is used"}}})"));
  EXPECT_EQ(p.component_json("text_encoder"), json::parse(R"({
              "attention_backend": "torch_native",
              "attention_backend_source": "component",
              "attention_backend_fallback": null,
              "attention_backend_requested": "torch_native",
              "attention_layers": {"attention": {"backend": "torch_native", "fallback": null}}})"));
  const json vae = p.component_json("vae");
  EXPECT_EQ(vae["attention_backend"], "fa");
  EXPECT_EQ(vae["attention_backend_source"], "cli");
  EXPECT_EQ(vae["attention_backend_fallback"],
            "sliding_tile_attn is sparse and vae's attention is dense, so fa is used");
  EXPECT_TRUE(p.component_json("tokenizer")["attention_backend"].is_null());

  // The mask is checked against the run: more steps than it covers is an error now, not later.
  request.num_inference_steps = 5;
  EXPECT_ERROR_HAS(plan(cpu_with({"fa", "sliding_tile_attn"})), "mask.json",
                   "no window for \"4_0_0\"");
}

TEST_F(WanTinyPlan, OverrideErrorsNameTheModelsComponents) {
  request.component_attention_backends = json{{"transfomer", "fa"}};
  EXPECT_ERROR_HAS(plan(), "unknown component 'transfomer'", "text_encoder, transformer, vae");
  request.component_attention_backends = "transformer_2=fa";
  EXPECT_ERROR_HAS(plan(), "transformer_2 is not part of this model");
  request.component_attention_backends = "scheduler=fa";
  EXPECT_ERROR_HAS(plan(), "scheduler has no attention layers");
}

TEST_F(WanTinyPlan, ConfigForABackendWithoutSettings) {
  request.attention_backend_config = "sparsity=0.9";
  EXPECT_ERROR_HAS(plan(), "torch_sdpa takes no settings", "video_sparse_attn");
  // Settings of the requested backend stay valid when it falls back.
  request.attention_backend = "sage_attn";
  request.attention_backend_config = "qk_quant_gran=per_warp";
  const AttentionPlan p = plan();
  EXPECT_EQ(p.main_backend, "torch_sdpa");
  EXPECT_EQ(p.backend_configs.at("sage_attn")["qk_quant_gran"], "per_warp");
}

}  // namespace
}  // namespace mmgen::attention
