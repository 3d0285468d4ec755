#include "generate/attention_command.h"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>
#include <map>
#include <optional>

#include "attention/backend.h"
#include "attention/backend_config.h"
#include "attention/backends/video_sparse_attn/vsa_gate.h"
#include "attention/catalogue.h"
#include "core/error.h"
#include "core/npy.h"

namespace mmgen::cli {

namespace {

struct Flag {
  const char* name;
  const char* value;  // nullptr: the flag takes no value
  const char* help;
};

const std::vector<Flag>& flags() {
  static const std::vector<Flag> table = {
      {"backend", "NAME", "DiT attention backend (see `mmgen backends`); required"},
      {"attention-backend-config", "SPEC", "backend settings: file, JSON object or key=value,..."},
      {"q", "Q.npy", "queries, float32 [batch, seq, heads, head_dim]; required"},
      {"k", "K.npy", "keys, float32 [batch, kv_seq, heads, head_dim]; required"},
      {"v", "V.npy", "values, float32 like the keys; required"},
      {"out", "OUT.npy", "where to write the output [batch, seq, heads, head_dim]; required"},
      {"grid", "T,H,W", "latent grid after patchify of the video tokens (first in the sequence)"},
      {"text-len", "N", "text tokens after the video tokens [default: 0]"},
      {"step", "I", "denoising step, 0-based [default: 0]"},
      {"num-steps", "N", "denoising steps [default: 1]"},
      {"timestep", "T", "the scheduler's timestep value [default: 0]"},
      {"layer", "L", "transformer block, 0-based [default: 0]"},
      {"num-layers", "N", "transformer blocks [default: layer + 1]"},
      {"cross", nullptr, "the call is cross-attention"},
      {"gate", "W.npy",
       "video_sparse_attn: to_gate_compress weight [heads*head_dim, heads*head_dim] (bias zero);\n"
       "the gate is computed from it and --attention-input"},
      {"attention-input", "X.npy",
       "video_sparse_attn with --gate: the block's attention input [batch, seq, heads*head_dim]\n"
       "(what to_q/to_k/to_v read); gate = X·Wᵀ per head"},
      {"proj", "W.npy",
       "sla_attn / sage_sla_attn: proj_l weight [head_dim, head_dim] (bias zero) of the\n"
       "linear branch"},
      {"scale", "S", "score scale [default: 1/sqrt(head_dim)]"},
      {"repeat", "N", "runs to time; the median is printed [default: 1]"},
      {"threads", "N", "OpenMP threads [default: all]"},
  };
  return table;
}

std::map<std::string, std::string> parse(const std::vector<std::string>& arguments) {
  std::map<std::string, std::string> values;
  for (size_t i = 0; i < arguments.size(); ++i) {
    const std::string& argument = arguments[i];
    check(argument.rfind("--", 0) == 0, "attention: unexpected argument '{}' (flags start with --)",
          argument);
    std::string name = argument.substr(2), value;
    if (const size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    const auto flag =
        std::find_if(flags().begin(), flags().end(), [&](const Flag& f) { return name == f.name; });
    check(flag != flags().end(), "attention: unknown option --{}; see `mmgen attention --help`",
          name);
    if (flag->value && value.empty()) {
      check(i + 1 < arguments.size(), "attention: --{} needs a value ({})", name, flag->value);
      value = arguments[++i];
    }
    values[name] = value;
  }
  return values;
}

int64_t integer(const std::map<std::string, std::string>& values, const std::string& name,
                int64_t fallback) {
  auto it = values.find(name);
  if (it == values.end()) return fallback;
  try {
    size_t used = 0;
    const int64_t value = std::stoll(it->second, &used);
    if (used == it->second.size()) return value;
  } catch (const std::exception&) {
  }
  fail("attention: --{} expects an integer, got '{}'", name, it->second);
}

double number(const std::map<std::string, std::string>& values, const std::string& name,
              double fallback) {
  auto it = values.find(name);
  if (it == values.end()) return fallback;
  try {
    size_t used = 0;
    const double value = std::stod(it->second, &used);
    if (used == it->second.size()) return value;
  } catch (const std::exception&) {
  }
  fail("attention: --{} expects a number, got '{}'", name, it->second);
}

std::array<int64_t, 3> parse_grid(const std::string& text) {
  std::array<int64_t, 3> grid = {0, 0, 0};
  size_t start = 0;
  for (int i = 0; i < 3; ++i) {
    const size_t end = text.find(',', start);
    check((i < 2) == (end != std::string::npos), "attention: --grid expects T,H,W, got '{}'", text);
    const std::string part = text.substr(start, end == std::string::npos ? end : end - start);
    try {
      size_t used = 0;
      grid[size_t(i)] = std::stoll(part, &used);
      check(used == part.size() && grid[size_t(i)] > 0, "");
    } catch (const std::exception&) {
      fail("attention: --grid expects three positive integers T,H,W, got '{}'", text);
    }
    start = end + 1;
  }
  return grid;
}

Tensor read_float_tensor(const std::map<std::string, std::string>& values, const char* name) {
  auto it = values.find(name);
  check(it != values.end(), "attention: --{} is required; see `mmgen attention --help`", name);
  return read_npy(it->second).to(DType::F32);
}

// A weight [out, in] with a zero bias [out], under the names the backends look up.
void add_weight(attention::LayerWeights& weights, const std::string& prefix, const Tensor& weight,
                const char* flag) {
  check(weight.dim() == 2, "attention: --{} must be a 2-D weight [out, in], got {}", flag,
        shape_string(weight.shape()));
  weights[prefix + ".weight"] = weight;
  weights[prefix + ".bias"] = Tensor::zeros({weight.size(0)});
}

}  // namespace

std::string attention_help() {
  std::string text =
      "Usage: mmgen attention --backend NAME --q Q.npy --k K.npy --v V.npy --out OUT.npy "
      "[options]\n\n"
      "Runs one DiT attention backend on float32 [batch, seq, heads, head_dim] inputs, prints the\n"
      "time it took and the fraction of key blocks it visited (sparse_video_gen_2_attn: of token\n"
      "pairs, its clusters differing in size), and writes the output.\n\n"
      "Options:\n";
  for (const auto& flag : flags()) {
    std::string line = "  --" + std::string(flag.name);
    if (flag.value) line += " " + std::string(flag.value);
    if (line.size() < 36) line.resize(36, ' ');
    std::string help = flag.help;  // continuation lines line up under the first
    for (size_t at = help.find('\n'); at != std::string::npos; at = help.find('\n', at + 1))
      help.insert(at + 1, std::string(37, ' '));
    text += line + " " + help + "\n";
  }
  return text;
}

int run_attention(const std::vector<std::string>& arguments) {
  const auto values = parse(arguments);
  check(values.count("backend"), "attention: --backend is required; see `mmgen backends`");
  const std::string requested = values.at("backend");
  const attention::BackendInfo* info = attention::find_backend(attention::Family::Dit, requested);
  check(info != nullptr, "attention: '{}' is not a DiT attention backend; see `mmgen backends`",
        requested);
  const std::string backend(info->name);
  const nlohmann::json settings = attention::parse_backend_config_spec(
      values.count("attention-backend-config")
          ? nlohmann::json(values.at("attention-backend-config"))
          : nlohmann::json());
  const nlohmann::json config = attention::validate_backend_config(settings, backend);
  if (values.count("threads")) omp_set_num_threads(int(integer(values, "threads", 0)));

  const Tensor q = read_float_tensor(values, "q"), k = read_float_tensor(values, "k"),
               v = read_float_tensor(values, "v");
  check(values.count("out"), "attention: --out is required");
  check(q.dim() == 4 && k.dim() == 4 && v.shape() == k.shape() && q.size(0) == k.size(0) &&
            q.size(2) == k.size(2) && q.size(3) == k.size(3),
        "attention: q {} k {} v {} must be [batch, seq, heads, head_dim] with matching batch, "
        "heads and head_dim",
        shape_string(q.shape()), shape_string(k.shape()), shape_string(v.shape()));

  attention::LayerWeights weights;
  // --gate: VSA's gate is to_gate_compress applied to the block's attention input, not to q/k/v
  // (attention/vsa_gate.h), so the command computes it from the weight and --attention-input
  // exactly as the Wan transformer does and passes the computed gate.
  check(!values.count("attention-input") || values.count("gate"),
        "attention: --attention-input is only used with --gate");
  if (values.count("gate")) {
    check(backend == "video_sparse_attn", "attention: --gate is for video_sparse_attn, not {}",
          backend);
    check(values.count("attention-input"),
          "attention: --gate needs --attention-input X.npy [batch, seq, heads*head_dim], the "
          "input the gate projection reads");
    attention::LayerWeights gate_weights;
    add_weight(gate_weights, "to_gate_compress", read_float_tensor(values, "gate"), "gate");
    const Tensor input = read_float_tensor(values, "attention-input");
    check(input.dim() == 3 && input.size(0) == q.size(0) && input.size(1) == q.size(1) &&
              input.size(2) == q.size(2) * q.size(3),
          "attention: --attention-input is {}, expected [{}, {}, {}]", shape_string(input.shape()),
          q.size(0), q.size(1), q.size(2) * q.size(3));
    weights[attention::kVsaGateKey] = attention::vsa_gate(gate_weights, input, q.size(2));
  }
  if (values.count("proj")) {
    check(backend == "sla_attn" || backend == "sage_sla_attn",
          "attention: --proj is for sla_attn and sage_sla_attn, not {}", backend);
    add_weight(weights, "proj_l", read_float_tensor(values, "proj"), "proj");
  }
  attention::LayerState state;

  attention::AttentionContext context;
  context.step_index = integer(values, "step", 0);
  context.num_steps = integer(values, "num-steps", 1);
  context.timestep = float(number(values, "timestep", 0));
  context.layer_index = integer(values, "layer", 0);
  context.num_layers = integer(values, "num-layers", context.layer_index + 1);
  if (values.count("grid")) context.grid = parse_grid(values.at("grid"));
  context.text_length = integer(values, "text-len", 0);
  context.is_cross = values.count("cross") > 0;
  context.weights = &weights;
  context.state = &state;
  check(context.step_index >= 0 && context.step_index < context.num_steps,
        "attention: --step {} is outside 0..{} (--num-steps)", context.step_index,
        context.num_steps - 1);
  check(context.layer_index >= 0 && context.layer_index < context.num_layers,
        "attention: --layer {} is outside 0..{} (--num-layers)", context.layer_index,
        context.num_layers - 1);
  const int64_t video = context.grid[0] * context.grid[1] * context.grid[2];
  check(!values.count("grid") || context.is_cross || video + context.text_length == q.size(1),
        "attention: grid {}x{}x{} ({} tokens) plus {} text tokens does not match {} queries",
        context.grid[0], context.grid[1], context.grid[2], video, context.text_length, q.size(1));
  const float scale = float(number(values, "scale", 1.0 / std::sqrt(double(q.size(3)))));
  const int64_t repeat = integer(values, "repeat", 1);
  check(repeat >= 1, "attention: --repeat must be at least 1");

  auto instance = attention::make_dit_backend(backend, config);
  Tensor out;
  attention::AttentionStats stats;
  std::vector<double> seconds;
  for (int64_t r = 0; r < repeat; ++r) {
    attention::AttentionStats run_stats;
    const auto start = std::chrono::steady_clock::now();
    out = instance->forward(q, k, v, scale, context, &run_stats);
    seconds.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    stats = run_stats;
  }
  write_npy(values.at("out"), out);
  std::sort(seconds.begin(), seconds.end());
  const double median = seconds[seconds.size() / 2];
  const double flops = 4.0 * double(q.size(0)) * double(q.size(2)) * double(q.size(1)) *
                       double(k.size(1)) * double(q.size(3));
  std::cout << fmt::format(
      "{}: {:.3f} ms ({} run{}, median), {:.1f} dense-equivalent GFLOP/s, key blocks visited "
      "{} of {} ({:.1f}%)\n",
      backend, median * 1e3, repeat, repeat == 1 ? "" : "s", flops / median * 1e-9,
      stats.visited_blocks, stats.total_blocks, 100.0 * stats.density());
  return 0;
}

}  // namespace mmgen::cli
