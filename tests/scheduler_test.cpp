#include "pipeline/schedulers/scheduler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/safetensors.h"
#include "pipeline/model_index.h"
#include "pipeline/schedulers/flow_match_euler.h"
#include "pipeline/schedulers/unipc_multistep.h"
#include "tests/test_support.h"

namespace mmgen::schedulers {
namespace {

using testing::relative_error;

fs::path wan_tiny() {
  return testing::shared_dir() / "fixtures/wan-tiny";
}

nlohmann::json wan_tiny_config() {
  return read_json_object(wan_tiny() / "model/scheduler/scheduler_config.json");
}

nlohmann::json wan_shapes_config() {
  return read_json_object(testing::source_dir() /
                          "examples/models/wan-shapes/scheduler/scheduler_config.json");
}

// Runs the fixture's 4-step trajectory: sample0, then model_output{k} → step → sample{k+1}.
void check_fixture_trajectory(Scheduler& scheduler, const std::string& prefix) {
  SafetensorsFile ref = SafetensorsFile::open(wan_tiny() / "reference/reference.safetensors");
  scheduler.set_timesteps(4);
  const Tensor expected_timesteps = ref.tensor(prefix + ".timesteps");
  const Tensor expected_sigmas = ref.tensor(prefix + ".sigmas");
  ASSERT_EQ(scheduler.timesteps().size(), 4u);
  ASSERT_EQ(scheduler.sigmas().size(), 5u);
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(scheduler.timesteps()[size_t(i)], expected_timesteps.item_f32({i})) << i;
  for (int i = 0; i < 5; ++i)
    EXPECT_EQ(scheduler.sigmas()[size_t(i)], expected_sigmas.item_f32({i})) << i;

  Tensor sample = ref.tensor(prefix + ".sample0");
  for (int k = 0; k < 4; ++k) {
    const Tensor output = ref.tensor(prefix + ".model_output" + std::to_string(k));
    sample = scheduler.step(output, k, sample);
    const Tensor expected = ref.tensor(prefix + ".sample" + std::to_string(k + 1));
    const double error = relative_error(sample, expected);
    EXPECT_LT(error, 1e-5) << prefix << " step " << k;
    std::printf("%s step %d: relative error %.3g, max abs diff %.3g\n", prefix.c_str(), k, error,
                testing::max_abs_diff(sample, expected));
  }
}

TEST(UniPC, MatchesFixtureScheduleAndTrajectory) {
  MMGEN_REQUIRE_SHARED();
  auto scheduler = make_scheduler(wan_tiny_config());
  EXPECT_EQ(scheduler->class_name(), "UniPCMultistepScheduler");
  check_fixture_trajectory(*scheduler, "scheduler.unipc");
}

TEST(UniPC, SecondRunAfterSetTimestepsIsIdentical) {
  MMGEN_REQUIRE_SHARED();
  auto scheduler = make_scheduler(wan_tiny_config());
  check_fixture_trajectory(*scheduler, "scheduler.unipc");
  check_fixture_trajectory(*scheduler, "scheduler.unipc");  // set_timesteps starts a new run
}

TEST(FlowMatchEuler, MatchesFixtureScheduleAndTrajectory) {
  MMGEN_REQUIRE_SHARED();
  auto scheduler =
      make_scheduler({{"_class_name", "FlowMatchEulerDiscreteScheduler"}, {"shift", 3.0}});
  EXPECT_EQ(scheduler->class_name(), "FlowMatchEulerDiscreteScheduler");
  check_fixture_trajectory(*scheduler, "scheduler.euler");
}

// The class comes from model_index.json, as diffusers' from_pretrained takes it: a config saved for
// another scheduler gives the settings the two share; the config's own `_class_name` is ignored.
TEST(Schedulers, TheClassNamedWinsOverTheConfigsClassName) {
  const nlohmann::json unipc = {{"_class_name", "UniPCMultistepScheduler"},
                                {"use_flow_sigmas", true},
                                {"prediction_type", "flow_prediction"},
                                {"flow_shift", 3.0},
                                {"shift", 2.0}};
  auto euler = make_scheduler("FlowMatchEulerDiscreteScheduler", unipc);
  EXPECT_EQ(euler->class_name(), "FlowMatchEulerDiscreteScheduler");
  auto reference =
      make_scheduler({{"_class_name", "FlowMatchEulerDiscreteScheduler"}, {"shift", 2.0}});
  euler->set_timesteps(4);
  reference->set_timesteps(4);
  EXPECT_EQ(euler->sigmas(), reference->sigmas());
  EXPECT_EQ(make_scheduler("UniPCMultistepScheduler", unipc)->class_name(),
            "UniPCMultistepScheduler");
  EXPECT_EQ(testing::error_message([&] { make_scheduler("DDIMScheduler", unipc); }),
            "scheduler class 'DDIMScheduler' is not supported (supported schedulers: "
            "FlowMatchEulerDiscreteScheduler, UniPCMultistepScheduler); use a model whose "
            "model_index.json names one of them");
}

// Schedules below were computed once with python diffusers 0.42.1 / torch 2.15 / numpy 2.4 (CPU):
//   s = <Scheduler>.from_config(config); s.set_timesteps(N, ...)
// and printed with '%.9g' (exact for float32).

// wan-shapes' config (flow_shift 1.0), 20 steps.
TEST(UniPC, WanShapesTwentyStepSchedule) {
  auto scheduler = make_scheduler(wan_shapes_config());
  scheduler->set_timesteps(20);
  const std::vector<float> timesteps = {999, 950, 900, 850, 800, 750, 700, 650, 600, 550,
                                        500, 450, 400, 350, 300, 250, 200, 150, 100, 50};
  const std::vector<float> sigmas = {
      0.999998987f, 0.950049996f,  0.900099993f, 0.850149989f, 0.800199986f, 0.750249982f,
      0.700299978f, 0.650349975f,  0.600399971f, 0.550450027f, 0.500500023f, 0.45054999f,
      0.400599986f, 0.350650012f,  0.300700009f, 0.250750005f, 0.200800002f, 0.150849998f,
      0.100900002f, 0.0509499982f, 0.0f};
  EXPECT_EQ(scheduler->timesteps(), timesteps);
  EXPECT_EQ(scheduler->sigmas(), sigmas);

  // --flow-shift 1.0 on the wan-tiny config (flow_shift 3.0) gives the same schedule.
  MMGEN_REQUIRE_SHARED();
  auto overridden = make_scheduler(wan_tiny_config(), 1.0);
  overridden->set_timesteps(20);
  EXPECT_EQ(overridden->timesteps(), timesteps);
  EXPECT_EQ(overridden->sigmas(), sigmas);
}

// UniPC with use_dynamic_shifting and shift_terminal 0.05 on the wan-tiny config, 6 steps, mu 0.7.
TEST(UniPC, DynamicShiftingWithTerminal) {
  MMGEN_REQUIRE_SHARED();
  nlohmann::json config = wan_tiny_config();
  config["use_dynamic_shifting"] = true;
  config["shift_terminal"] = 0.05;
  auto scheduler = make_scheduler(config);
  EXPECT_TRUE(scheduler->uses_dynamic_shifting());
  EXPECT_NE(testing::error_message([&] { scheduler->set_timesteps(6); }).find("mu"),
            std::string::npos);
  scheduler->set_timesteps(6, {.mu = 0.7});
  EXPECT_EQ(scheduler->timesteps(),
            (std::vector<float>{999.0f, 879.0f, 734.0f, 557.0f, 335.0f, 50.0f}));
  EXPECT_EQ(scheduler->sigmas(),
            (std::vector<float>{0.999998987f, 0.879530013f, 0.734797478f, 0.557651937f,
                                0.335832149f, 0.0500000007f, 0.0f}));
}

struct EulerScheduleCase {
  const char* name;
  nlohmann::json config;
  int steps;
  std::optional<double> mu;
  std::vector<double> explicit_sigmas;  // empty: none
  std::vector<float> timesteps, sigmas;
};

// FlowMatchEulerDiscreteScheduler(**config).set_timesteps(steps, **options).
TEST(FlowMatchEuler, ScheduleVariants) {
  const std::vector<EulerScheduleCase> cases = {
      {"dynamic exponential, mu 1.1",
       {{"use_dynamic_shifting", true}},
       7,
       1.1,
       {},
       {1000.0f, 937.651428f, 857.496155f, 750.634644f, 601.052246f, 376.730286f, 2.9981575f},
       {1.0f, 0.937651455f, 0.857496142f, 0.75063467f, 0.601052225f, 0.376730293f, 0.0029981574f,
        0.0f}},
      {"dynamic linear, mu 0.9",
       {{"use_dynamic_shifting", true}, {"time_shift_type", "linear"}},
       5,
       0.9,
       {},
       {1000.0f, 729.992676f, 474.182831f, 231.47934f, 0.900090039f},
       {1.0f, 0.729992688f, 0.474182844f, 0.231479347f, 0.000900090032f, 0.0f}},
      {"shift 3, shift_terminal 0.02",
       {{"shift", 3.0}, {"shift_terminal", 0.02}},
       6,
       std::nullopt,
       {},
       {1000.0f, 924.198853f, 820.946167f, 672.03186f, 438.56778f, 20.0f},
       {1.0f, 0.924198866f, 0.820946157f, 0.672031879f, 0.438567787f, 0.0199999996f, 0.0f}},
      {"FLUX style: sigmas = np.linspace(1, 1/9, 9), mu 0.8",
       {{"use_dynamic_shifting", true}, {"shift_terminal", nullptr}},
       9,
       0.8,
       {1.0, 0.8888888888888888, 0.7777777777777778, 0.6666666666666667, 0.5555555555555556,
        0.4444444444444444, 0.33333333333333337, 0.22222222222222232, 0.1111111111111111},
       {1000.0f, 946.82074f, 886.226501f, 816.550171f, 735.584473f, 640.34375f, 526.687805f,
        388.704041f, 217.645294f},
       {1.0f, 0.946820736f, 0.886226475f, 0.816550195f, 0.735584497f, 0.640343726f, 0.526687801f,
        0.388704032f, 0.217645288f, 0.0f}},
      {"shift 3, sigmas = np.linspace(1, 1/5, 5)",
       {{"shift", 3.0}},
       5,
       std::nullopt,
       {1.0, 0.8, 0.6, 0.3999999999999999, 0.2},
       {1000.0f, 923.076965f, 818.181824f, 666.666687f, 428.571472f},
       {1.0f, 0.923076987f, 0.818181813f, 0.666666687f, 0.428571463f, 0.0f}},
      {"shift 2, invert_sigmas",
       {{"shift", 2.0}, {"invert_sigmas", true}},
       4,
       std::nullopt,
       {},
       {0.0f, 199.520645f, 498.50296f, 996.011963f},
       {0.0f, 0.199520648f, 0.49850297f, 0.996011972f, 1.0f}},
  };
  for (const EulerScheduleCase& c : cases) {
    SCOPED_TRACE(c.name);
    nlohmann::json config = c.config;
    config["_class_name"] = "FlowMatchEulerDiscreteScheduler";
    auto scheduler = make_scheduler(config);
    ScheduleOptions options;
    options.mu = c.mu;
    if (!c.explicit_sigmas.empty()) options.sigmas = c.explicit_sigmas;
    scheduler->set_timesteps(c.steps, options);
    EXPECT_EQ(scheduler->timesteps(), c.timesteps);
    EXPECT_EQ(scheduler->sigmas(), c.sigmas);
  }
}

TEST(FlowMatchEuler, CalculateShift) {
  // diffusers.pipelines.flux.pipeline_flux.calculate_shift
  EXPECT_EQ(calculate_shift(4096, 256, 4096, 0.5, 1.15), 1.15);
  EXPECT_EQ(calculate_shift(1024, 256, 4096, 0.5, 1.15), 0.63);
  EXPECT_EQ(calculate_shift(6000, 256, 8192, 0.3, 1.2), 0.9514112903225806);
  FlowMatchEulerDiscreteScheduler scheduler{FlowMatchEulerConfig{}};
  EXPECT_EQ(scheduler.mu_for_image_seq_len(1024), 0.63);
}

// Synthetic trajectories on a [1, 4, 16] sample, same inputs in python and here:
//   sample0[e] = (((e·37) % 101) − 50) / 25,  model_output_k[e] = (((e·53 + k·17) % 97) − 48) / 30
// (float64, rounded to float32); set_timesteps(N); set_begin_index(0); then
// x = s.step(model_output_k, s.timesteps[k], x).prev_sample for each step; the final x printed
// with '%.9g'.
Tensor synthetic_sample() {
  std::vector<float> v(64);
  for (int e = 0; e < 64; ++e) v[size_t(e)] = float((double((e * 37) % 101) - 50) / 25.0);
  return Tensor::from_vector({1, 4, 16}, v);
}

Tensor synthetic_model_output(int k) {
  std::vector<float> v(64);
  for (int e = 0; e < 64; ++e) v[size_t(e)] = float((double((e * 53 + k * 17) % 97) - 48) / 30.0);
  return Tensor::from_vector({1, 4, 16}, v);
}

Tensor run_synthetic(Scheduler& scheduler, int steps, int stop_after) {
  scheduler.set_timesteps(steps);
  Tensor x = synthetic_sample();
  for (int k = 0; k < stop_after; ++k) x = scheduler.step(synthetic_model_output(k), k, x);
  return x;
}

const std::vector<float> kUniPCOrder3 = {
    -1.08727133f,  -1.03481448f,  1.57272899f,   -2.414814f,    0.482602477f,  0.409284234f,
    -0.89739728f,  0.467511535f,  1.5561322f,    -0.912488103f, 0.176132768f,  -1.00060463f,
    -0.948147774f, 1.65939593f,   -2.16404915f,  0.56926918f,   0.495950997f,  -0.810730517f,
    0.554178298f,  1.6427989f,    -0.825821519f, 0.518518567f,  -0.913937926f, -0.861481011f,
    1.7460624f,    -2.07738256f,  0.655935943f,  0.582618058f,  -0.930534363f, 0.640844941f,
    1.72946572f,   -0.739154756f, 0.60518539f,   -0.827270985f, -0.774814367f, 2.12260222f,
    -1.99071574f,  0.742602587f,  0.669284642f,  -0.843867779f, 0.727511644f,  -2.22386765f,
    0.593030453f,  0.691851914f,  -0.740604579f, -0.688147604f, 2.20926905f,   -1.90404892f,
    0.82926935f,   2.10944581f,   -0.757201135f, 0.814178348f,  -2.13720059f,  0.679697275f,
    0.778518558f,  -0.653937817f, -0.601480961f, 2.29593539f,   -1.81738234f,  0.915936053f,
    2.19611239f,   -0.670534492f, 0.900845051f,  -2.05053425f};

const std::vector<float> kUniPCDisableCorrector = {
    -2.16285539f,  0.171385765f,  0.497144878f,  -1.2086134f,   -0.882854879f, 1.89082289f,
    -2.26285458f,  0.438199073f,  1.78681469f,   -0.941800475f, 0.406815052f,  -2.0761888f,
    0.258052528f,  0.583811522f,  -0.682510555f, -0.796188116f, 1.97749007f,   -2.17618775f,
    0.524865746f,  1.87348127f,   -0.855133891f, 1.72471869f,   -1.98952198f,  0.344719172f,
    0.670478106f,  -0.595843434f, -0.709521413f, 2.06415677f,   -0.699852049f, 0.611532331f,
    1.96014774f,   -0.768467128f, 1.81138551f,   -1.90285528f,  0.431385815f,  0.757144868f,
    -0.50917691f,  -0.62285471f,  2.15082312f,   -0.613185227f, 0.698199093f,  -1.99318457f,
    -0.681800485f, 1.89805222f,   -1.81618857f,  0.518052638f,  0.843811572f,  -0.422509968f,
    -0.536188006f, 2.23748946f,   -0.526518703f, 0.784865737f,  -1.90651846f,  -0.595133781f,
    1.9847188f,    -1.72952199f,  0.604719341f,  0.930478215f,  -0.335843503f, -0.449521422f,
    2.324157f,     -0.439852059f, 0.87153244f,   -1.81985164f};

const std::vector<float> kUniPCOrder1 = {
    -1.6652106f,    -0.331978798f, 0.994789898f,  -1.71197855f,  -0.385209978f,  1.88908124f,
    -1.76520979f,   0.986406386f,  0.894790888f,  -0.39359349f,  -0.485209018f,  -1.57854414f,
    -0.245312095f,  1.08145642f,   -0.684252322f, -0.298543274f, 1.97574782f,    -1.67854309f,
    1.07307303f,    0.981457591f,  -0.306926727f, 1.22135425f,   -1.49187708f,   -0.158645451f,
    1.16812325f,    -0.597585917f, -0.211876571f, 2.06241441f,   -1.59187627f,   1.15973973f,
    1.06812406f,    -0.220259979f, 1.30802107f,   -1.40521049f,  -0.0719787478f, 1.25478983f,
    -0.510919273f,  -0.125209898f, 2.14908147f,   -1.50520945f,  1.24640644f,    -2.88520932f,
    -0.133593291f,  1.39468777f,   -1.31854367f,  0.0146880746f, 1.34145665f,    -0.424252272f,
    -0.0385431647f, 2.23574805f,   -1.41854286f,  1.33307326f,   -2.7985425f,    -0.0469265245f,
    1.48135459f,    -1.23187709f,  0.101354718f,  1.42812335f,   -0.337585866f,  0.0481235683f,
    2.32241464f,    -1.33187628f,  1.41973972f,   -2.71187592f};

const std::vector<float> kUniPCBh1SigmaMin = {
    -2.30002785f,  -0.394729555f, 0.472894162f,   -1.66180813f,   -0.575340688f,  1.32215786f,
    -1.84241915f,  1.15624678f,   1.79358792f,    -0.110831454f,  0.526509702f,   -2.20081425f,
    -0.295516014f, 0.572107613f,  -1.35155046f,   -0.476127148f,  1.42137134f,    -1.74320567f,
    1.25546038f,   1.89280164f,   -0.0116180405f, 1.07077575f,    -2.10160065f,   -0.196302518f,
    0.671321213f,  -1.2523371f,   -0.376913667f,  1.5205847f,     -0.780906439f,  1.35467386f,
    1.99201488f,   0.0875956193f, 1.16998935f,    -2.00238705f,   -0.0970889181f, 0.989378154f,
    -1.15312338f,  -0.277700126f, 1.61979854f,    -0.681693256f,  1.45388722f,    -1.94877136f,
    0.186809063f,  1.26920271f,   -1.90317357f,   0.00212449953f, 1.08859169f,    -1.0539099f,
    -0.178486571f, 1.7190119f,    -0.582479656f,  1.55310106f,    -1.849558f,     0.286022514f,
    1.36841619f,   -1.80395997f,  0.101338036f,   1.18780529f,    -0.954696238f,  -0.0792730749f,
    1.8182255f,    -0.483266175f, 1.65231431f,    -1.75034475f};

const std::vector<float> kUniPCBh1ZeroAfter5 = {
    -2.36942267f,  -0.317029953f,  0.403499156f,  -1.58410847f,  -0.863579273f,  1.23810434f,
    -2.13065767f,  1.08083582f,    2.21257615f,   -0.186242446f, 0.945498049f,   -2.27020907f,
    -0.217816427f, 0.502712607f,   -1.43560398f,  -0.764365792f, 1.33731782f,    -2.03144431f,
    1.18004954f,   2.31178999f,    -0.087029025f, 1.14847529f,   -2.17099547f,   -0.118602917f,
    0.601926208f,  -1.33639061f,   -0.665152311f, 1.43653119f,   -0.361918151f,  1.27926278f,
    2.41100311f,   0.0121846348f,  1.24768889f,   -2.07178187f,  -0.0193893351f, 0.701139569f,
    -1.2371769f,   -0.565938711f,  1.53574502f,   -0.262704909f, 1.37847626f,    -1.52978325f,
    0.111398071f,  1.34690237f,    -1.97256863f,  0.07982409f,   0.80035311f,    -1.13796341f,
    -0.4667252f,   1.63495839f,    -0.163491368f, 1.4776901f,    -1.43056965f,   0.210611507f,
    1.44611585f,   -1.87335491f,   0.179037631f,  0.89956671f,   -1.03874981f,   -0.36751169f,
    1.73417199f,   -0.0642778277f, 1.57690334f,   -1.33135653f};

const std::vector<float> kEulerShift3 = {
    -1.23230386f,  -1.49010134f,   1.42769611f,   -2.87010145f,  0.0476961881f,  1.70798302f,
    -1.33230376f,  1.15423465f,    1.32769608f,   -0.225765407f, -0.0523037016f, -1.14563704f,
    -1.40343475f,  1.51436293f,    -0.865350425f, 0.134362862f,  1.79464948f,    -1.24563718f,
    1.24090123f,   1.41436291f,    -0.139098763f, 0.0632319152f, -1.05897045f,   -1.31676805f,
    1.60102952f,   -0.778683603f,  0.22102955f,   1.8813163f,    -1.15897048f,   1.32756793f,
    1.50102961f,   -0.0524320491f, 0.149898544f,  -0.972303808f, -1.23010147f,   1.68769622f,
    -0.692017078f, 0.307696164f,   1.96798301f,   -1.07230377f,  1.41423464f,    -2.45230365f,
    0.0342346393f, 0.236565232f,   -0.885637224f, -1.14343464f,  1.77436292f,    -0.605350375f,
    0.394362897f,  2.05464983f,    -0.985637128f, 1.50090122f,   -2.36563706f,   0.120901272f,
    0.323231936f,  -0.798970461f,  -1.05676806f,  1.86102951f,   -0.518683732f,  0.48102954f,
    2.14131618f,   -0.898970485f,  1.58756781f,   -2.27897024f};

const std::vector<float> kUniPCNoLowerOrderFinal = {
    -1.88496304f,  -0.332099557f, 0.903975427f,  -1.58316052f,  -0.347085834f,  1.64234638f,
    -1.59814715f,  0.58415997f,   1.43334973f,   -0.666901171f, 0.182288364f,   -1.78396976f,
    -0.231106326f, 1.00496864f,   -1.04559922f,  -0.246092632f, 1.74333918f,    -1.49715388f,
    0.685153186f,  1.53434277f,   -0.565908074f, 1.12094796f,   -1.68297648f,   -0.130113184f,
    1.10596192f,   -0.944606125f, -0.145099461f, 1.84433258f,   -1.15360236f,   0.786146402f,
    1.63533604f,   -0.464914888f, 1.22194123f,   -1.58198357f,  -0.0291200727f, 1.20695519f,
    -0.843613029f, -0.044106327f, 1.94532585f,   -1.05260932f,  0.887139618f,   -2.30367064f,
    -0.363921791f, 1.32293427f,   -1.48099029f,  0.0718731433f, 1.30794835f,    -0.742619634f,
    0.0568869188f, 2.04631901f,   -0.951616347f, 0.988132775f,  -2.20267749f,   -0.262928545f,
    1.42392766f,   -1.37999713f,  0.1728663f,    1.40894127f,   -0.641626477f,  0.157880038f,
    2.14731193f,   -0.850622892f, 1.08912587f,   -2.10168386f};

struct TrajectoryCase {
  const char* name;
  nlohmann::json changes;  // applied to the wan-tiny config
  int steps, stop_after;
  const std::vector<float>* expected;
};

TEST(UniPC, SyntheticTrajectoriesOfOtherSettings) {
  MMGEN_REQUIRE_SHARED();
  const std::vector<TrajectoryCase> cases = {
      {"solver_order 3, flow_shift 5",
       {{"solver_order", 3}, {"flow_shift", 5.0}},
       8,
       8,
       &kUniPCOrder3},
      {"disable_corrector [0, 2]", {{"disable_corrector", {0, 2}}}, 5, 5, &kUniPCDisableCorrector},
      {"solver_order 1", {{"solver_order", 1}}, 4, 4, &kUniPCOrder1},
      {"bh1, final sigma_min",
       {{"solver_type", "bh1"}, {"final_sigmas_type", "sigma_min"}},
       6,
       6,
       &kUniPCBh1SigmaMin},
      {"bh1, first 5 of 6 steps", {{"solver_type", "bh1"}}, 6, 5, &kUniPCBh1ZeroAfter5},
      {"lower_order_final false, final sigma_min",
       {{"lower_order_final", false}, {"final_sigmas_type", "sigma_min"}},
       5,
       5,
       &kUniPCNoLowerOrderFinal},
  };
  for (const TrajectoryCase& c : cases) {
    SCOPED_TRACE(c.name);
    nlohmann::json config = wan_tiny_config();
    config.update(c.changes);
    auto scheduler = make_scheduler(config);
    const Tensor x = run_synthetic(*scheduler, c.steps, c.stop_after);
    const double error = relative_error(x, Tensor::from_vector({1, 4, 16}, *c.expected));
    EXPECT_LT(error, 1e-5);
    std::printf("%s: relative error %.3g\n", c.name, error);
  }
}

// diffusers returns NaN for bh1's last step to sigma 0 (B(h) = −inf times a zero residual); we
// return the limit, the data prediction x0 = x − σ·v of the step's (uncorrected) input, which is
// also exactly what bh2's last step returns.
TEST(UniPC, Bh1FinalStepToZeroIsTheDataPrediction) {
  MMGEN_REQUIRE_SHARED();
  nlohmann::json config = wan_tiny_config();
  config["solver_type"] = "bh1";
  auto scheduler = make_scheduler(config);
  const Tensor before_last = run_synthetic(*scheduler, 6, 5);
  const Tensor output = synthetic_model_output(5);
  const Tensor last = scheduler->step(output, 5, before_last);
  const float sigma = scheduler->sigmas()[5];
  for (int64_t e = 0; e < 64; ++e) {
    volatile float product = sigma * output.data<float>()[e];  // volatile: no fused multiply-add
    EXPECT_EQ(last.data<float>()[e], before_last.data<float>()[e] - product) << e;
  }
}

TEST(FlowMatchEuler, SyntheticTrajectory) {
  auto scheduler =
      make_scheduler({{"_class_name", "FlowMatchEulerDiscreteScheduler"}, {"shift", 3.0}});
  const Tensor x = run_synthetic(*scheduler, 4, 4);
  const double error = relative_error(x, Tensor::from_vector({1, 4, 16}, kEulerShift3));
  EXPECT_LT(error, 1e-5);
  std::printf("euler synthetic: relative error %.3g\n", error);
}

TEST(Schedulers, InputsAreNotModifiedAndBf16IsAccepted) {
  auto scheduler =
      make_scheduler({{"_class_name", "FlowMatchEulerDiscreteScheduler"}, {"shift", 3.0}});
  scheduler->set_timesteps(4);
  const Tensor sample = synthetic_sample();
  const Tensor copy = sample.clone();
  const Tensor out = scheduler->step(synthetic_model_output(0).to(DType::BF16), 0, sample);
  EXPECT_EQ(out.dtype(), DType::F32);
  EXPECT_EQ(testing::max_abs_diff(sample, copy), 0.0);
}

TEST(Schedulers, ClearErrors) {
  auto message = [](const nlohmann::json& config) {
    return testing::error_message([&] { make_scheduler(config); });
  };
  EXPECT_NE(message({{"_class_name", "DDIMScheduler"}}).find("UniPCMultistepScheduler"),
            std::string::npos);
  EXPECT_NE(message({{"beta_start", 0.1}}).find("_class_name"), std::string::npos);
  // UniPC's class defaults (epsilon, VP sigmas) are not implemented.
  EXPECT_NE(message({{"_class_name", "UniPCMultistepScheduler"}}).find("use_flow_sigmas"),
            std::string::npos);
  EXPECT_NE(message({{"_class_name", "UniPCMultistepScheduler"},
                     {"use_flow_sigmas", true},
                     {"use_karras_sigmas", true}})
                .find("use_karras_sigmas"),
            std::string::npos);
  EXPECT_NE(message({{"_class_name", "UniPCMultistepScheduler"},
                     {"use_flow_sigmas", true},
                     {"solver_type", "dpm"}})
                .find("bh1 or bh2"),
            std::string::npos);
  EXPECT_NE(message({{"_class_name", "UniPCMultistepScheduler"},
                     {"use_flow_sigmas", true},
                     {"lower_order_final", false}})
                .find("lower_order_final"),
            std::string::npos);
  EXPECT_NE(message({{"_class_name", "FlowMatchEulerDiscreteScheduler"}, {"shift", "three"}})
                .find("'shift' must be a number"),
            std::string::npos);
  EXPECT_NE(
      message({{"_class_name", "FlowMatchEulerDiscreteScheduler"}, {"stochastic_sampling", true}})
          .find("stochastic_sampling"),
      std::string::npos);
  EXPECT_NE(testing::error_message([] {
              make_scheduler({{"_class_name", "FlowMatchEulerDiscreteScheduler"}}, -1.0);
            }).find("--flow-shift"),
            std::string::npos);

  auto unipc = make_scheduler({{"_class_name", "UniPCMultistepScheduler"},
                               {"use_flow_sigmas", true},
                               {"prediction_type", "flow_prediction"}});
  EXPECT_NE(testing::error_message([&] {
              unipc->step(synthetic_model_output(0), 0, synthetic_sample());
            }).find("set_timesteps"),
            std::string::npos);
  unipc->set_timesteps(4);
  EXPECT_NE(testing::error_message([&] {
              unipc->step(synthetic_model_output(0), 1, synthetic_sample());
            }).find("in order"),
            std::string::npos);
}

}  // namespace
}  // namespace mmgen::schedulers
