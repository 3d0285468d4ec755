#include "tests/test_support.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <regex>
#include <sstream>

#include "core/error.h"
#include "core/json.h"
#include "pipeline/flux/flux_pipeline.h"
#include "pipeline/qwenimage/qwenimage_pipeline.h"
#include "pipeline/wan/wan_pipeline.h"
#include "pipeline/zimage/zimage_pipeline.h"

namespace mmgen::testing {

fs::path shared_dir() {
  fs::path path = MMGEN_SHARED_DIR;
  return fs::exists(path / "fixtures") ? path : fs::path();
}

fs::path source_dir() {
  return MMGEN_SOURCE_DIR;
}
fs::path mmgen_binary() {
  return MMGEN_BINARY;
}

double relative_error(const Tensor& actual, const Tensor& expected) {
  EXPECT_EQ(shape_string(actual.shape()), shape_string(expected.shape()));
  if (actual.shape() != expected.shape()) return INFINITY;
  Tensor a = actual.to(DType::F64), e = expected.to(DType::F64);
  const double* pa = a.data<double>();
  const double* pe = e.data<double>();
  double difference = 0, norm = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    difference += (pa[i] - pe[i]) * (pa[i] - pe[i]);
    norm += pe[i] * pe[i];
  }
  return norm == 0 ? std::sqrt(difference) : std::sqrt(difference / norm);
}

double max_abs_diff(const Tensor& actual, const Tensor& expected) {
  EXPECT_EQ(shape_string(actual.shape()), shape_string(expected.shape()));
  if (actual.shape() != expected.shape()) return INFINITY;
  Tensor a = actual.to(DType::F64), e = expected.to(DType::F64);
  double worst = 0;
  for (int64_t i = 0; i < a.numel(); ++i)
    worst = std::max(worst, std::abs(a.data<double>()[i] - e.data<double>()[i]));
  return worst;
}

std::string error_message(const std::function<void()>& action) {
  try {
    action();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

fs::path scratch_dir(const std::string& name) {
  fs::path path = fs::temp_directory_path() / ("mmgen-test-" + std::to_string(::getpid())) / name;
  fs::remove_all(path);
  fs::create_directories(path);
  static struct Cleanup {
    ~Cleanup() {
      std::error_code ignored;
      fs::remove_all(fs::temp_directory_path() / ("mmgen-test-" + std::to_string(::getpid())),
                     ignored);
    }
  } cleanup;
  return path;
}

CommandResult run_command(const std::string& command) {
  fs::path dir = scratch_dir("command-" + std::to_string(std::rand()));
  const std::string full = command + " >" + (dir / "out").string() + " 2>" + (dir / "err").string();
  int status = std::system(full.c_str());
  auto slurp = [](const fs::path& path) {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  };
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(dir / "out"), slurp(dir / "err")};
}

void expect_one_line_error(const CommandResult& result, const std::string& expected,
                           const std::string& what) {
  EXPECT_EQ(result.exit_code, 1) << what;
  EXPECT_EQ(result.err.find("mmgen: error: "), 0u) << what << " -> " << result.err;
  EXPECT_NE(result.err.find(expected), std::string::npos) << what << " -> " << result.err;
  EXPECT_EQ(std::count(result.err.begin(), result.err.end(), '\n'), 1) << what << result.err;
  EXPECT_EQ(result.out, "") << what;
}

fs::path copy_of_wan_tiny(const std::string& name) {
  const fs::path copy = scratch_dir(name) / "model";
  fs::copy(source_dir() / "examples/models/wan-tiny", copy, fs::copy_options::recursive);
  return copy;
}

void write_json_file(const fs::path& path, const nlohmann::json& value) {
  std::ofstream(path, std::ios::trunc) << value.dump(2);
}

void set_component_class(const fs::path& model, const std::string& component,
                         const std::string& library, const std::string& class_name) {
  const fs::path path = model / "model_index.json";
  nlohmann::json index = read_json_object(path);
  index[component] = {library, class_name};
  write_json_file(path, index);
}

// The original Wan release's names, as the community's Wan GGUF files keep them.
std::string original_wan_name(const std::string& name) {
  static const std::pair<const char*, const char*> kBack[] = {
      {"condition_embedder.time_embedder.linear_1.", "time_embedding.0."},
      {"condition_embedder.time_embedder.linear_2.", "time_embedding.2."},
      {"condition_embedder.text_embedder.linear_1.", "text_embedding.0."},
      {"condition_embedder.text_embedder.linear_2.", "text_embedding.2."},
      {"condition_embedder.time_proj.", "time_projection.1."},
      {"proj_out.", "head.head."},
      {"attn1.to_out.0.", "self_attn.o."},
      {"attn2.to_out.0.", "cross_attn.o."},
      {"attn1.to_", "self_attn."},
      {"attn2.to_", "cross_attn."},
      {"attn1.", "self_attn."},
      {"attn2.", "cross_attn."},
      {"ffn.net.0.proj.", "ffn.0."},
      {"ffn.net.2.", "ffn.2."},
      {"norm2.", "norm3."},
  };
  if (name == "scale_shift_table") return "head.modulation";
  size_t start = name.rfind("blocks.", 0) == 0 ? name.find('.', 7) + 1 : 0;
  const std::string head = name.substr(0, start), rest = name.substr(start);
  if (rest == "scale_shift_table") return head + "modulation";
  for (const auto& [from, to] : kBack)
    if (rest.rfind(from, 0) == 0) return head + to + rest.substr(std::string(from).size());
  return name;
}

PeakAndInspection measure_peak_and_inspect(const std::string& model, const std::string& flags,
                                           const fs::path& out) {
  PeakAndInspection result;
  const auto run = run_command(
      mmgen_binary().string() + " generate --model-path " + model + flags +
      " --prompt fox --num-inference-steps 2 --output-format npy --overwrite --output-path " +
      out.string());
  EXPECT_EQ(run.exit_code, 0) << run.err;
  std::smatch match;
  EXPECT_TRUE(std::regex_search(run.err, match, std::regex(R"(peak memory ([0-9.]+) MiB)")))
      << run.err;
  if (!match.empty()) result.peak_mib = std::stod(match[1]);
  const auto inspect =
      run_command(mmgen_binary().string() + " inspect --json --model-path " + model + flags);
  EXPECT_EQ(inspect.exit_code, 0) << inspect.err;
  if (inspect.exit_code == 0) result.inspection = nlohmann::json::parse(inspect.out);
  return result;
}

WanGenerationInput wan_fixture_input(const nlohmann::json& p) {
  WanGenerationInput input;
  input.prompt = p["prompt"];
  input.negative_prompt = p["negative_prompt"];
  input.height = p["height"];
  input.width = p["width"];
  input.num_frames = p["num_frames"];
  input.num_inference_steps = p["num_inference_steps"];
  input.guidance_scale = p["guidance_scale"];
  input.max_sequence_length = p["max_sequence_length"];
  return input;
}

FluxGenerationInput flux_fixture_input(const nlohmann::json& p) {
  FluxGenerationInput input;
  input.prompt = p["prompt"];
  input.height = p["height"];
  input.width = p["width"];
  input.num_inference_steps = p["num_inference_steps"];
  input.guidance_scale = p["guidance_scale"];
  input.max_sequence_length = p["max_sequence_length"];
  return input;
}

ZImageGenerationInput zimage_fixture_input(const nlohmann::json& p) {
  ZImageGenerationInput input;
  input.prompt = p["prompt"];
  input.negative_prompt = p["negative_prompt"];
  input.height = p["height"];
  input.width = p["width"];
  input.num_inference_steps = p["num_inference_steps"];
  input.guidance.scale = p["guidance_scale"];
  input.guidance.truncation = p["cfg_truncation"];
  input.max_sequence_length = p["max_sequence_length"];
  return input;
}

QwenImageGenerationInput qwenimage_fixture_input(const nlohmann::json& p) {
  QwenImageGenerationInput input;
  input.prompt = p["prompt"];
  input.negative_prompt = p["negative_prompt"];
  input.true_cfg_scale = p["true_cfg_scale"];
  input.height = p["height"];
  input.width = p["width"];
  input.num_inference_steps = p["num_inference_steps"];
  input.max_sequence_length = 512;  // diffusers' default
  return input;
}

}  // namespace mmgen::testing
