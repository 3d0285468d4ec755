#include "generate/attention_command.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <omp.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>
#include <map>
#include <optional>

#include "attention/backend.h"
#include "attention/backend_config.h"
#include "attention/backends/descriptor.h"
#include "attention/backends/video_sparse_attn/vsa_gate.h"
#include "attention/catalogue.h"
#include "attention/selector.h"
#include "core/error.h"
#include "core/npy.h"
#include "generate/options.h"
#include "generate/settings.h"

namespace mmgen::cli {

namespace {

// A value of the parsed options, or `fallback` when not given (types checked by the table).
template <typename T>
T value_or(const SettingsLayer& values, const char* name, T fallback) {
  return values.contains(name) ? values[name].get<T>() : fallback;
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

Tensor read_float_tensor(const SettingsLayer& values, const char* name) {
  check(values.contains(name), "attention: --{} is required; see `mmgen attention --help`", name);
  return read_npy(values[name].get<std::string>()).to(DType::F32);
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
      "\n";
  return text + options_help(Command::Attention);
}

int run_attention(const std::vector<std::string>& arguments) {
  const SettingsLayer values = parse_arguments(Command::Attention, arguments);
  check(values.contains("backend"), "attention: --backend is required; see `mmgen backends`");
  std::string note;
  const std::string requested = attention::resolve_backend_name(
      values["backend"].get<std::string>(),
      fmt::format("attention: --backend {}", values["backend"].get<std::string>()), &note);
  if (!note.empty()) spdlog::info("{}", note);
  const attention::BackendInfo* info = attention::find_backend(attention::Family::Dit, requested);
  check(info != nullptr, "attention: '{}' is not a DiT attention backend; see `mmgen backends`",
        requested);
  const std::string backend(info->name);
  const nlohmann::json settings = attention::parse_backend_config_spec(
      values.contains("attention-backend-config") ? values["attention-backend-config"]
                                                  : nlohmann::json());
  const nlohmann::json config = attention::validate_backend_config(settings, backend);
  if (const int64_t threads = value_or<int64_t>(values, "threads", 0); threads > 0)
    omp_set_num_threads(int(threads));

  const Tensor q = read_float_tensor(values, "q"), k = read_float_tensor(values, "k"),
               v = read_float_tensor(values, "v");
  check(values.contains("out"), "attention: --out is required");
  check(q.dim() == 4 && k.dim() == 4 && v.shape() == k.shape() && q.size(0) == k.size(0) &&
            q.size(2) == k.size(2) && q.size(3) == k.size(3),
        "attention: q {} k {} v {} must be [batch, seq, heads, head_dim] with matching batch, "
        "heads and head_dim",
        shape_string(q.shape()), shape_string(k.shape()), shape_string(v.shape()));

  attention::LayerWeights weights;
  // --gate: VSA's gate is to_gate_compress applied to the block's attention input, not to q/k/v
  // (attention/vsa_gate.h), so the command computes it from the weight and --attention-input
  // exactly as the Wan transformer does and passes the computed gate.
  check(!values.contains("attention-input") || values.contains("gate"),
        "attention: --attention-input is only used with --gate");
  if (values.contains("gate")) {
    check(attention::backend_reads_weight(backend, "to_gate_compress."),
          "attention: --gate is for {} (the backends that read to_gate_compress), not {}",
          fmt::join(attention::backends_reading_weight("to_gate_compress."), ", "), backend);
    check(values.contains("attention-input"),
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
  if (values.contains("proj")) {
    check(attention::backend_reads_weight(backend, "proj_l."),
          "attention: --proj is for {} (the backends that read proj_l), not {}",
          fmt::join(attention::backends_reading_weight("proj_l."), ", "), backend);
    add_weight(weights, "proj_l", read_float_tensor(values, "proj"), "proj");
  }
  attention::LayerState state;

  attention::AttentionContext context;
  context.step_index = value_or<int64_t>(values, "step", 0);
  context.num_steps = value_or<int64_t>(values, "num-steps", 1);
  context.timestep = float(value_or<double>(values, "timestep", 0));
  context.layer_index = value_or<int64_t>(values, "layer", 0);
  context.num_layers = value_or<int64_t>(values, "num-layers", context.layer_index + 1);
  if (values.contains("grid")) context.grid = parse_grid(values["grid"]);
  context.text_length = value_or<int64_t>(values, "text-len", 0);
  context.is_cross = value_or<bool>(values, "cross", false);
  context.weights = &weights;
  context.state = &state;
  check(context.step_index >= 0 && context.step_index < context.num_steps,
        "attention: --step {} is outside 0..{} (--num-steps)", context.step_index,
        context.num_steps - 1);
  check(context.layer_index >= 0 && context.layer_index < context.num_layers,
        "attention: --layer {} is outside 0..{} (--num-layers)", context.layer_index,
        context.num_layers - 1);
  const int64_t video = context.grid[0] * context.grid[1] * context.grid[2];
  check(!values.contains("grid") || context.is_cross || video + context.text_length == q.size(1),
        "attention: grid {}x{}x{} ({} tokens) plus {} text tokens does not match {} queries",
        context.grid[0], context.grid[1], context.grid[2], video, context.text_length, q.size(1));
  const float scale = float(value_or<double>(values, "scale", 1.0 / std::sqrt(double(q.size(3)))));
  const int64_t repeat = value_or<int64_t>(values, "repeat", 1);
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
  write_npy(values["out"].get<std::string>(), out);
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
