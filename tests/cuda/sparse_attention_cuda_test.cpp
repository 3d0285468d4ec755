// The GPU sliding_tile_attn, video_sparse_attn and vmoba_attn backends against their CPU oracles
// (attention/backends/) on small video grids whose edges are partial tiles/cubes/chunks, from the
// same bf16 inputs: relative error < 1e-2. STA with different windows per head, the default 6x8x8
// tile and a small custom one, skipped steps (dense); VSA with and without the gate; V-MoBA's three
// chunk kinds in threshold and top-k mode, the host-chosen head_global and overall thresholds and
// a dense first step, with the chosen (query, chunk) pairs counted against the CPU's choice;
// sage_attn (three granularities, K smoothed or not) and sage_sla_attn, whose INT8 levels are
// also checked against the CPU quantisers' integer for integer; sage_attn's FP8 P·V against the
// CPU backend on the same e4m3 values of V (its quantiser checked byte for byte), within what
// e4m3 probabilities cost.
#include <cuda_runtime.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include "attention/backend.h"
#include "attention/backend_config.h"
#include "attention/backends/video_sparse_attn/vsa_coarse.h"
#include "attention/backends/video_sparse_attn/vsa_gate.h"
#include "attention/backends/vmoba_attn/vmoba_settings.h"
#include "attention/cuda/fp8_values.h"
#include "attention/cuda/int8_quantize.h"
#include "attention/kernels/block_sparse.h"
#include "attention/kernels/sage_quant.h"
#include "attention/kernels/sla_quant.h"
#include "attention/kernels/sta_tiling.h"
#include "attention/sparse_self_attention_cuda.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/device_memory.h"
#include "cuda_test_support.h"

using namespace mmgen;
using namespace mmgen::cuda;
using namespace mmgen::cuda_testing;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

struct Case {
  std::string backend;
  json config;
  int64_t batch, heads, head_dim;
  std::array<int64_t, 3> grid;
  int64_t step = 0;
  bool gate = false;
  std::string label;
  int64_t layer = 0;
  bool projection = false;  // SLA: the layer has proj_l weights (the linear branch runs)
  bool portable = false;    // run the portable kernel (and the steps it needs) on any GPU
};

// VSA's kept query-key pairs by the CPU's own choice (vsa_coarse on the same values): each query
// cube's tokens times the tokens of its chosen key cubes.
double vsa_cpu_kept_pairs(const Case& c, const json& config, const Tensor& q, const Tensor& k,
                          const Tensor& v) {
  const attention::BoxTiling tiling =
      attention::tile_video({c.grid[0], c.grid[1], c.grid[2]}, {4, 4, 4}, 0);
  const int64_t cubes = tiling.box_count();
  const int64_t topk = attention::vsa_topk(config.at("sparsity").get<double>(), cubes);
  const auto coarse = attention::vsa_coarse(
      attention::gather_tokens(q, tiling.order), attention::gather_tokens(k, tiling.order),
      attention::gather_tokens(v, tiling.order), 1.0f / std::sqrt(float(c.head_dim)), tiling, topk,
      64, false);
  double kept = 0;
  for (const auto& pattern : coarse.patterns)
    for (int64_t i = 0; i < cubes; ++i)
      for (int64_t e = pattern.indptr[size_t(i)]; e < pattern.indptr[size_t(i) + 1]; ++e)
        kept += double(tiling.video_blocks.length[size_t(i)]) *
                double(pattern.kv_blocks.length[size_t(pattern.indices[size_t(e)])]);
  return kept;
}

// V-MoBA's kept query-key pairs by the CPU's own choice (select_chunks on the same values): each
// chunk's queries attend the chunk, and each (query, chosen chunk) adds the chunk's keys.
double vmoba_cpu_kept_pairs(const Case& c, const json& config, const Tensor& q, const Tensor& k) {
  const auto settings = attention::vmoba_attn::VmobaSettings::from_json(config);
  const auto kind = settings.kind_of_layer(c.layer);
  const auto layout = settings.layout(kind, c.grid);
  const auto selections = attention::vmoba::select_chunks(
      attention::gather_tokens(q, layout.order), attention::gather_tokens(k, layout.order),
      layout.chunks, settings.select_options(kind));
  double kept = 0;
  for (const auto& selection : selections)
    for (int64_t chunk = 0; chunk < layout.chunks.size(); ++chunk) {
      const double length = double(layout.chunks.length[size_t(chunk)]);
      kept +=
          length *
          (length + double(selection.indptr[size_t(chunk) + 1] - selection.indptr[size_t(chunk)]));
    }
  return kept;
}

// What fp8_values.h specifies for [B, S, H, D] values: the scales, the e4m3 bytes in the
// transposed, permuted layout, and the values those bytes stand for in the input's layout.
struct Fp8Reference {
  std::vector<float> scales;
  std::vector<uint8_t> bytes;
  std::vector<float> dequantized;
};
Fp8Reference fp8_reference(const std::vector<float>& v, int64_t B, int64_t S, int64_t H,
                           int64_t D) {
  const int64_t keys = fp8_value_keys(S);
  Fp8Reference ref;
  ref.scales.resize(size_t(B * H * D));
  ref.bytes.assign(size_t(B * H * D * keys), 0);
  ref.dequantized.resize(v.size());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t d = 0; d < D; ++d) {
        auto at = [&](int64_t t) { return size_t(((b * S + t) * H + h) * D + d); };
        float largest = 0.0f;
        for (int64_t t = 0; t < S; ++t) largest = std::max(largest, std::fabs(v[at(t)]));
        const float scale = largest > 0.0f ? largest / kFp8ValueMax : 1.0f;
        const size_t channel = size_t((b * H + h) * D + d);
        ref.scales[channel] = scale;
        for (int64_t position = 0; position < keys; ++position) {
          const int64_t t = position / 32 * 32 + fp8_value_key_at(int(position % 32));
          if (t >= S) continue;
          const uint8_t bits = f32_to_e4m3(v[at(t)] / scale);
          ref.bytes[channel * size_t(keys) + size_t(position)] = bits;
          ref.dequantized[at(t)] = e4m3_to_f32(bits) * scale;
        }
      }
  return ref;
}

// fp8_quantize_values against fp8_reference, byte for byte and scale for scale: two head sizes,
// partial last tiles, an outlier channel, an all-zero channel and a strided (packed qkv) input.
void check_fp8_values(std::mt19937& generator) {
  const int64_t B = 2, S = 777, H = 3;
  for (const int64_t D : {int64_t(64), int64_t(128)}) {
    const int64_t count = B * S * H * D;
    Bf16Values x = random_bf16(size_t(count), generator);
    for (int64_t i = 0; i < count; i += D) {  // channel 3 large, channel 5 of head 1 zero
      x.values[size_t(i + 3)] = bf16_to_f32(f32_to_bf16(x.values[size_t(i + 3)] * 40.0f));
      if ((i / D) % H == 1) x.values[size_t(i + 5)] = 0.0f;
      x.bits[size_t(i + 3)] = f32_to_bf16(x.values[size_t(i + 3)]);
      x.bits[size_t(i + 5)] = f32_to_bf16(x.values[size_t(i + 5)]);
    }
    // The values as the middle third of a packed [B, S, 3·H·D] buffer (q, k, v side by side).
    std::vector<uint16_t> packed(size_t(3 * count), 0);
    for (int64_t row = 0; row < B * S; ++row)
      for (int64_t c = 0; c < H * D; ++c)
        packed[size_t(row * 3 * H * D + H * D + c)] = x.bits[size_t(row * H * D + c)];
    DeviceBuffer dv(packed.size() * 2), out(size_t(B * H * D * fp8_value_keys(S))),
        scales(size_t(B * H * D) * 4);
    dv.upload(packed.data(), packed.size() * 2);
    out.fill_bytes(0xff);
    Fp8ValuesArgs args;
    args.v = static_cast<const uint16_t*>(dv.data()) + H * D;
    args.strides = {S * 3 * H * D, 3 * H * D, D};
    args.batch = B, args.seq = S, args.heads = H, args.head_dim = D;
    args.out = out.as<uint8_t>(), args.scales = scales.as<float>();
    fp8_quantize_values(args);
    MMGEN_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<uint8_t> bytes(size_t(B * H * D * fp8_value_keys(S)));
    std::vector<float> got_scales(size_t(B * H * D));
    out.download(bytes.data(), bytes.size());
    scales.download(got_scales.data(), got_scales.size() * 4);
    const Fp8Reference ref = fp8_reference(x.values, B, S, H, D);
    int64_t wrong = 0, wrong_scales = 0;
    for (size_t i = 0; i < bytes.size(); ++i) wrong += bytes[i] != ref.bytes[i];
    for (size_t i = 0; i < got_scales.size(); ++i) wrong_scales += got_scales[i] != ref.scales[i];
    expect(wrong == 0 && wrong_scales == 0,
           fmt::format("fp8_quantize_values D={}: {} of {} bytes and {} of {} scales differ from "
                       "the reference",
                       D, wrong, bytes.size(), wrong_scales, got_scales.size()));
  }
}

void run_case(const Case& c, std::mt19937& generator) {
  const int64_t B = c.batch, H = c.heads, D = c.head_dim;
  const int64_t S = c.grid[0] * c.grid[1] * c.grid[2], count = B * S * H * D;
  const Bf16Values q = random_bf16(size_t(count), generator),
                   k = random_bf16(size_t(count), generator),
                   v = random_bf16(size_t(count), generator),
                   g = random_bf16(size_t(count), generator);
  const float scale = 1.0f / std::sqrt(float(D));
  const json config = attention::validate_backend_config(c.config, c.backend);

  // CPU oracle on the same (bf16-rounded) values, in float32.
  auto host = [&](const Bf16Values& x) { return Tensor::from_vector({B, S, H, D}, x.values); };
  attention::AttentionContext context;
  context.step_index = c.step;
  context.num_steps = c.step + 1;
  context.layer_index = c.layer;
  context.grid = {c.grid[0], c.grid[1], c.grid[2]};
  attention::LayerWeights weights, device_weights;
  if (c.gate) weights[attention::kVsaGateKey] = host(g);
  if (c.projection) {  // SLA's proj_l: a bf16-exact weight (the GPU's product reads it in bf16)
    const Bf16Values w = random_bf16(size_t(D * D), generator);
    std::vector<float> scaled(w.values.size()), b(static_cast<size_t>(D));
    for (size_t i = 0; i < scaled.size(); ++i) scaled[i] = w.values[i] * 0.125f;
    for (auto& x : b) x = float(std::normal_distribution<float>(0.0f, 0.1f)(generator));
    weights["proj_l.weight"] = Tensor::from_vector({D, D}, scaled);
    weights["proj_l.bias"] = Tensor::from_vector({D}, b);
    device_weights["proj_l.weight"] = weights["proj_l.weight"].to(Device::CUDA);
    device_weights["proj_l.bias"] = weights["proj_l.bias"].to(Device::CUDA);
  }
  context.weights = &weights;
  // sage_attn's FP8 P·V: the CPU oracle (float32 P·V) gets V's e4m3 values, so what remains is
  // the e4m3 probabilities' rounding. Their 3 mantissa bits round each one by up to 2^-4
  // (about 2.4% root mean square, uniform in the last place); on random inputs the output is
  // itself a sum of many such terms of random sign, so its relative error is about that much.
  const bool fp8_values = c.backend == "sage_attn" && config.at("pv_dtype") == "fp8";
  const Tensor oracle_v =
      fp8_values
          ? Tensor::from_vector({B, S, H, D}, fp8_reference(v.values, B, S, H, D).dequantized)
          : host(v);
  const double bound = fp8_values ? 3e-2 : 1e-2;
  const Tensor expected_tensor = attention::make_dit_backend(c.backend, config)
                                     ->forward(host(q), host(k), oracle_v, scale, context, nullptr);
  std::vector<double> expected(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) expected[size_t(i)] = expected_tensor.data<float>()[i];

  auto upload = [](const std::vector<uint16_t>& bits) {
    DeviceBuffer buffer(bits.size() * 2);
    buffer.upload(bits.data(), bits.size() * 2);
    return buffer;
  };
  const DeviceBuffer dq = upload(q.bits), dk = upload(k.bits), dv = upload(v.bits);
  DeviceBuffer gate(size_t(count) * 4), out(size_t(count) * 2);
  gate.upload(g.values.data(), size_t(count) * 4);
  out.fill_bytes(0xff);  // NaN: an unwritten element cannot pass
  SelfAttentionCall call;
  call.q = dq.data(), call.k = dk.data(), call.v = dv.data(), call.out = out.data();
  call.batch = B, call.tokens = S, call.heads = H, call.head_dim = D, call.grid = c.grid;
  call.step = c.step, call.layer = c.layer, call.scale = scale,
  call.gate = c.gate ? gate.as<float>() : nullptr;
  call.weights = c.projection ? &device_weights : nullptr;
  auto backend = make_sparse_self_attention_cuda(c.backend, config);
  backend->use_portable_kernel(c.portable);
  backend->count_pairs(true);
  backend->run(call);
  MMGEN_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<uint16_t> bits(static_cast<size_t>(count));
  out.download(bits.data(), bits.size() * 2);
  std::vector<double> actual(bits.size());
  bool finite = true;
  for (size_t i = 0; i < bits.size(); ++i) {
    actual[i] = bf16_to_f32(bits[i]);
    finite = finite && std::isfinite(actual[i]);
  }
  const double error = relative_error(actual, expected);
  const std::string name =
      fmt::format("{} {}{} B={} H={} D={} grid {}x{}x{} (density {:.3f})", c.backend, c.label,
                  c.portable ? " (portable kernel)" : "", B, H, D, c.grid[0], c.grid[1], c.grid[2],
                  backend->stats().density());
  expect(finite, name + ": every output element written and finite");
  expect(error < bound,
         fmt::format("{}: relative error {:.2e} vs the CPU backend < {:.0e}", name, error, bound));
  if (fp8_values) {  // what the FP8 values cost on top, for the record
    const Tensor unquantized = attention::make_dit_backend(c.backend, config)
                                   ->forward(host(q), host(k), host(v), scale, context, nullptr);
    std::vector<double> plain(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) plain[size_t(i)] = unquantized.data<float>()[i];
    std::printf("  %s: %.2e from the CPU on the e4m3 V, %.2e from it on bf16 V\n", name.c_str(),
                error, relative_error(actual, plain));
  }
  if (c.backend == "vmoba_attn" && c.step >= config.at("first_full_step").get<int64_t>()) {
    const double kept = vmoba_cpu_kept_pairs(c, config, host(q), host(k));
    expect(backend->stats().kept_pairs == kept,
           fmt::format("{}: the GPU keeps {} query-key pairs, the CPU's choice {}", name,
                       backend->stats().kept_pairs, kept));
    expect(backend->stats().density() < 0.95, name + ": the choice is sparse");
  }
  if (c.backend == "video_sparse_attn") {
    const double kept = vsa_cpu_kept_pairs(c, config, host(q), host(k), host(v));
    expect(backend->stats().kept_pairs == kept,
           fmt::format("{}: the GPU keeps {} query-key pairs, the CPU's choice {}", name,
                       backend->stats().kept_pairs, kept));
  }
}

// The GPU quantiser's levels and scales against the CPU's, value for value: sage_quant.h's
// quantize_int8 (after sage_attention.cpp's smoothing) at each granularity, and sla_quant.h's
// int8_round_trip (levels times steps) for SageSLA's q·scale and smoothed k.
void check_levels(std::mt19937& generator) {
  const int64_t B = 2, S = 777, H = 3;
  for (const int64_t D : {int64_t(64), int64_t(128)}) {
    const int64_t count = B * S * H * D;
    Bf16Values x = random_bf16(size_t(count), generator);
    // An outlier channel, as real keys have (what smoothing is for), and one all-zero row group.
    for (int64_t i = 0; i < count; i += D) {
      x.values[size_t(i + 3)] = bf16_to_f32(f32_to_bf16(x.values[size_t(i + 3)] + 6.0f));
      x.bits[size_t(i + 3)] = f32_to_bf16(x.values[size_t(i + 3)]);
    }
    for (int64_t t = 128; t < 256; ++t)
      for (int64_t c = 0; c < H * D; ++c) {
        x.values[size_t(t * H * D + c)] = 0.0f;
        x.bits[size_t(t * H * D + c)] = 0;
      }
    DeviceBuffer dx(size_t(count) * 2), levels(size_t(B * S * H) * kInt8Width),
        row_scales(size_t(B * H * S) * 4), block_scales(size_t(B * H * ((S + 63) / 64) * 4) * 4);
    dx.upload(x.bits.data(), size_t(count) * 2);
    auto run = [&](Int8QuantizeArgs args, bool keys) {
      args.x = dx.data(), args.row_stride = H * D;
      args.batch = B, args.seq = S, args.heads = H, args.head_dim = D;
      args.out = levels.as<int8_t>();
      (keys ? args.block_scales : args.row_scales) =
          keys ? block_scales.as<float>() : row_scales.as<float>();
      int8_quantize(args);
      MMGEN_CUDA_CHECK(cudaDeviceSynchronize());
      std::vector<int8_t> out(size_t(B * S * H) * kInt8Width);
      levels.download(out.data(), out.size());
      std::vector<float> scales(keys ? size_t(B * H * ((S + 63) / 64) * 4) : size_t(B * H * S));
      (keys ? block_scales : row_scales).download(scales.data(), scales.size() * 4);
      return std::make_pair(out, scales);
    };
    const Tensor host = Tensor::from_vector({B, S, H, D}, x.values);
    using attention::sage::Granularity;
    for (const Granularity granularity :
         {Granularity::PerBlock, Granularity::PerWarp, Granularity::PerThread})
      for (const bool keys : {false, true}) {
        Int8QuantizeArgs args;
        args.smooth = keys;
        if (granularity == Granularity::PerThread)
          args.groups = keys ? Int8Groups::KeyThread : Int8Groups::QueryThread;
        else
          args.run = keys ? 64 : granularity == Granularity::PerBlock ? 128 : 32;
        const auto [out, scales] = run(args, keys);
        int64_t wrong = 0, wrong_scales = 0;
        for (int64_t b = 0; b < B; ++b)
          for (int64_t h = 0; h < H; ++h) {
            std::vector<float> rows(size_t(S * D));
            for (int64_t t = 0; t < S; ++t)
              for (int64_t d = 0; d < D; ++d)
                rows[size_t(t * D + d)] = x.values[size_t(((b * S + t) * H + h) * D + d)];
            if (keys) {  // sage_attention.cpp's subtract_token_mean
              std::vector<double> mean(size_t(D), 0.0);
              for (int64_t t = 0; t < S; ++t)
                for (int64_t d = 0; d < D; ++d) mean[size_t(d)] += rows[size_t(t * D + d)];
              for (auto& m : mean) m /= double(S);
              for (int64_t t = 0; t < S; ++t)
                for (int64_t d = 0; d < D; ++d) rows[size_t(t * D + d)] -= float(mean[size_t(d)]);
            }
            std::vector<float> values(rows.size()), row_scale(static_cast<size_t>(S));
            attention::sage::quantize_int8(rows.data(), S, D, D, granularity, !keys, values.data(),
                                           row_scale.data());
            for (int64_t t = 0; t < S; ++t) {
              for (int64_t d = 0; d < kInt8Width; ++d) {
                const float expected = d < D ? values[size_t(t * D + d)] : 0.0f;
                wrong += float(out[size_t(((b * S + t) * H + h) * kInt8Width + d)]) != expected;
              }
              const float scale =
                  keys ? scales[size_t(((b * H + h) * ((S + 63) / 64) + t / 64) * 4 + (t % 8) / 2)]
                       : scales[size_t((b * H + h) * S + t)];
              wrong_scales += scale != row_scale[size_t(t)];
            }
          }
        expect(wrong == 0 && wrong_scales == 0,
               fmt::format("int8_quantize D={} sage granularity {} {}: {} levels and {} scales "
                           "differ from the CPU's",
                           D, int(granularity), keys ? "keys (smoothed)" : "queries", wrong,
                           wrong_scales));
      }
    // SageSLA: q·scale per 32 rows, smoothed k per 128-key block; the CPU round trip gives
    // level · step, which must be the GPU's level times its scale exactly.
    const float scale = 1.0f / std::sqrt(float(D));
    for (const bool keys : {false, true}) {
      Int8QuantizeArgs args;
      args.arithmetic = Int8Arithmetic::Sla;
      args.smooth = keys, args.run = keys ? 128 : 32, args.multiplier = keys ? 1.0f : scale;
      const auto [out, scales] = run(args, keys);
      attention::BlockLayout blocks;
      for (int64_t start = 0; start < S; start += 128) {
        blocks.start.push_back(start);
        blocks.length.push_back(std::min<int64_t>(128, S - start));
      }
      const Tensor expected = keys ? attention::sla::int8_round_trip(
                                         attention::sla::smooth_keys(host), blocks, 128, 1.0f)
                                   : attention::sla::int8_round_trip(host, blocks, 32, scale);
      int64_t wrong = 0;
      for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < S; ++t)
          for (int64_t h = 0; h < H; ++h) {
            const float step =
                keys ? scales[size_t(((b * H + h) * ((S + 63) / 64) + t / 64) * 4 + (t % 8) / 2)]
                     : scales[size_t((b * H + h) * S + t)];
            for (int64_t d = 0; d < D; ++d)
              wrong += float(out[size_t(((b * S + t) * H + h) * kInt8Width + d)]) * step !=
                       expected.data<float>()[((b * S + t) * H + h) * D + d];
          }
      expect(wrong == 0, fmt::format("int8_quantize D={} SLA {}: {} values differ from the CPU's",
                                     D, keys ? "keys (smoothed)" : "queries·scale", wrong));
    }
  }
}

// A mask file giving head h of layer 0 at `step` the window windows[h % size].
fs::path write_mask(const std::vector<std::array<int, 3>>& windows, int64_t heads, int64_t step) {
  json mask = json::object();
  for (int64_t h = 0; h < heads; ++h) {
    const auto& w = windows[size_t(h) % windows.size()];
    mask[fmt::format("{}_0_{}", step, h)] = {w[0], w[1], w[2]};
  }
  const fs::path path =
      fs::temp_directory_path() / fmt::format("mmgen_sta_mask_{}_{}.json", windows.size(), heads);
  std::ofstream(path) << mask.dump();
  return path;
}

}  // namespace

int main() {
  std::mt19937 generator(20261124);
  const fs::path mask = write_mask({{1, 2, 2}, {2, 1, 3}, {1, 1, 1}}, 3, 0);
  const json sta_small = {
      {"mask_strategy_file_path", mask.string()}, {"skip_time_steps", 0}, {"tile_size", {3, 4, 4}}};
  const json sta_default = {{"mask_strategy_file_path", mask.string()}, {"skip_time_steps", 0}};
  const json sta_skip = {{"mask_strategy_file_path", mask.string()}, {"skip_time_steps", 1}};
  const Case cases[] = {
      // 7x10x13 in 3x4x4 tiles: every axis ends in a partial tile (48-token tiles, 1 block).
      {"sliding_tile_attn", sta_small, 2, 3, 128, {7, 10, 13}, 0, false, "tile 3x4x4"},
      {"sliding_tile_attn", sta_small, 1, 3, 64, {7, 10, 13}, 0, false, "tile 3x4x4"},
      // 8x12x20 in 6x8x8 tiles (2x2x3 tiles, partial on every axis).
      {"sliding_tile_attn", sta_default, 1, 3, 128, {8, 12, 20}, 0, false, "tile 6x8x8"},
      {"sliding_tile_attn", sta_skip, 1, 3, 64, {8, 12, 20}, 0, false, "skipped step (dense)"},
      // 6x9x10 in 4x4x4 cubes (2x3x3 cubes, partial on every axis): 18 cubes, an odd row of
      // query blocks; top-k 6 and 2.
      {"video_sparse_attn", {{"sparsity", 0.7}}, 2, 2, 128, {6, 9, 10}, 0, false, "sparsity 0.7"},
      {"video_sparse_attn", {{"sparsity", 0.9}}, 1, 3, 64, {6, 9, 10}, 0, false, "sparsity 0.9"},
      {"video_sparse_attn", {{"sparsity", 0.9}}, 1, 2, 128, {5, 13, 11}, 0, true, "gated"},
      {"video_sparse_attn",
       {{"sparsity", 0.5}},
       2,
       2,
       64,
       {4, 8, 8},
       0,
       true,
       "gated, whole cubes"},
      // The portable kernel's path on any GPU: q, k and v regrouped into cube slots first (on
      // Hopper the kernel reads the cubes in place).
      {"video_sparse_attn",
       {{"sparsity", 0.7}},
       2,
       2,
       128,
       {6, 9, 10},
       0,
       false,
       "sparsity 0.7",
       0,
       false,
       true},
      {"video_sparse_attn",
       {{"sparsity", 0.9}},
       1,
       2,
       128,
       {5, 13, 11},
       0,
       true,
       "gated",
       0,
       false,
       true},
  };
  for (const Case& c : cases) run_case(c, generator);

  // V-MoBA on 6x9x10: temporal chunks of 2 frames (3 chunks of 180 tokens), spatial 3x4 (9
  // chunks, the last column 2 wide), spatio-temporal 2x4x4 (27 chunks, partial on two axes).
  const json moba = {{"temporal_chunk_size", 2},
                     {"spatial_chunk_size", {3, 4}},
                     {"st_chunk_size", {2, 4, 4}},
                     {"first_full_step", 0},
                     {"temporal_topk", 2},
                     {"spatial_topk", 3},
                     {"st_topk", 5}};
  auto with = [&](json extra) {
    json config = moba;
    for (auto& [key, value] : extra.items()) config[key] = value;
    return config;
  };
  const Case moba_cases[] = {
      {"vmoba_attn", moba, 2, 2, 128, {6, 9, 10}, 0, false, "temporal, threshold", 0},
      {"vmoba_attn", moba, 1, 3, 64, {6, 9, 10}, 0, false, "spatial, threshold", 1},
      {"vmoba_attn", moba, 2, 2, 128, {6, 9, 10}, 0, false, "spatio-temporal, threshold", 2},
      {"vmoba_attn",
       with({{"moba_threshold", 0.6}}),
       1,
       2,
       128,
       {5, 13, 11},
       0,
       false,
       "spatio-temporal, threshold 0.6",
       2},
      {"vmoba_attn",
       with({{"moba_select_mode", "topk"}}),
       1,
       2,
       128,
       {6, 9, 10},
       0,
       false,
       "spatial, top-3",
       1},
      {"vmoba_attn",
       with({{"moba_select_mode", "topk"}}),
       2,
       2,
       64,
       {6, 9, 10},
       0,
       false,
       "spatio-temporal, top-5",
       5},
      {"vmoba_attn",
       with({{"moba_threshold_type", "head_global"}}),
       1,
       2,
       128,
       {6, 9, 10},
       0,
       false,
       "spatial, head_global (host choice)",
       4},
      {"vmoba_attn",
       with({{"moba_threshold_type", "overall"}}),
       2,
       2,
       64,
       {6, 9, 10},
       0,
       false,
       "temporal, overall (host choice)",
       3},
      {"vmoba_attn",
       with({{"first_full_step", 1}}),
       1,
       2,
       128,
       {6, 9, 10},
       0,
       false,
       "before first_full_step (dense)",
       2},
  };
  for (const Case& c : moba_cases) run_case(c, generator);

  // SLA on 7x10x13 (910 tokens: partial last query and key blocks): the default blocks (128 / 64)
  // at top 10% and 30%, 64-query blocks, 128-key blocks; and with proj_l, the linear branch in
  // each feature map.
  const Case sla_cases[] = {
      {"sla_attn", {{"topk", 0.1}}, 2, 2, 128, {7, 10, 13}, 0, false, "top 10%"},
      {"sla_attn", {{"topk", 0.3}}, 1, 3, 64, {7, 10, 13}, 0, false, "top 30%"},
      {"sla_attn",
       {{"topk", 0.2}, {"block_q", 64}},
       1,
       2,
       128,
       {7, 10, 13},
       0,
       false,
       "64-query blocks"},
      {"sla_attn",
       {{"topk", 0.2}, {"block_k", 128}},
       1,
       2,
       64,
       {7, 10, 13},
       0,
       false,
       "128-key blocks"},
      {"sla_attn", {{"topk", 0.2}}, 2, 2, 128, {7, 10, 13}, 0, false, "softmax φ, proj_l", 0, true},
      {"sla_attn",
       {{"topk", 0.2}, {"feature_map", "elu"}},
       1,
       2,
       64,
       {7, 10, 13},
       0,
       false,
       "elu φ, proj_l",
       0,
       true},
      {"sla_attn",
       {{"topk", 0.2}, {"feature_map", "relu"}},
       1,
       3,
       128,
       {7, 10, 13},
       0,
       false,
       "relu φ, proj_l",
       0,
       true},
  };
  for (const Case& c : sla_cases) run_case(c, generator);

  // SageAttention: dense INT8 scores at each granularity, on 910 tokens (partial last blocks),
  // with and without the smoothing of K; SageSLA as SLA's cases.
  const json bf16_pv = {{"pv_dtype", "bf16"}};
  const Case sage_cases[] = {
      {"sage_attn", bf16_pv, 2, 2, 128, {7, 10, 13}, 0, false, "per_block, bf16 P·V"},
      {"sage_attn",
       {{"qk_quant_gran", "per_warp"}, {"pv_dtype", "bf16"}},
       1,
       3,
       64,
       {7, 10, 13},
       0,
       false,
       "per_warp, bf16 P·V"},
      {"sage_attn",
       {{"qk_quant_gran", "per_thread"}, {"pv_dtype", "bf16"}},
       1,
       2,
       128,
       {7, 10, 13},
       0,
       false,
       "per_thread, bf16 P·V"},
      {"sage_attn",
       {{"smooth_k", false}, {"pv_dtype", "bf16"}},
       1,
       2,
       64,
       {7, 10, 13},
       0,
       false,
       "unsmoothed K, bf16 P·V"},
      {"sage_attn", json::object(), 2, 2, 128, {7, 10, 13}, 0, false, "per_block, FP8 P·V"},
      {"sage_attn", json::object(), 1, 3, 64, {7, 10, 13}, 0, false, "per_block, FP8 P·V"},
      {"sage_attn",
       {{"qk_quant_gran", "per_thread"}},
       1,
       2,
       128,
       {16, 16, 17},
       0,
       false,
       "per_thread, FP8 P·V, 4352 tokens"},
      {"sage_sla_attn", {{"topk", 0.1}}, 2, 2, 128, {7, 10, 13}, 0, false, "top 10%"},
      {"sage_sla_attn",
       {{"topk", 0.2}, {"block_q", 64}},
       1,
       2,
       64,
       {7, 10, 13},
       0,
       false,
       "64-query blocks"},
      {"sage_sla_attn",
       {{"topk", 0.2}, {"block_k", 128}},
       1,
       3,
       128,
       {7, 10, 13},
       0,
       false,
       "128-key blocks, proj_l",
       0,
       true},
  };
  for (const Case& c : sage_cases) run_case(c, generator);
  check_levels(generator);
  check_fp8_values(generator);

  expect(error_message([] {
           make_sparse_self_attention_cuda("sage_attn_3", json::object());
         }).find("no GPU version") != std::string::npos,
         "a backend without a GPU version is a clear error");
  return finish("sparse_attention_cuda_test");
}
