#include "core/cuda/ops_cuda.h"

#include <utility>

#include "core/cuda/device_ops.h"
#include "core/cuda/device_storage.h"
#include "core/cuda/elementwise.h"
#include "core/cuda/fp8.h"
#include "core/cuda/gemm.h"
#include "core/cuda/gemm_f32.h"
#include "core/cuda/group_norm.h"
#include "core/cuda/t5_ops.h"
#include "core/error.h"
#include "core/op_profile.h"
#include "core/ops.h"

namespace mmgen::cuda::ops {
namespace {

void require_device(const Tensor& x, const char* op, const char* what) {
  check(x.device() == Device::CUDA && x.is_contiguous(),
        "{}: the {} must be a contiguous tensor on the GPU (it is {} on {}); place the model's "
        "weights and inputs on one device",
        op, what, shape_string(x.shape()), device_name(x.device()));
}

void require_f32(const Tensor& x, const char* op) {
  require_device(x, op, "input");
  check(x.dtype() == DType::F32, "{}: expects float32 on the GPU, got {}", op,
        dtype_name(x.dtype()));
}

}  // namespace

namespace {

// A product's result [..., features] in `out` and its bias (undefined without one) converted to
// `out`, checked.
std::pair<Tensor, Tensor> product_output(const Tensor& x, const Tensor& bias, int64_t features,
                                         DType out) {
  Shape shape = x.shape();
  shape.back() = features;
  Tensor b;
  if (bias.defined()) {
    require_device(bias, "linear", "bias");
    check(bias.numel() == features, "linear: bias of {} for {} outputs", bias.numel(), features);
    b = bias.to(out);
  }
  return {Tensor::empty(shape, out, Device::CUDA), b};
}

// The product of an f8_e4m3_rows weight (one scale per output channel): the input as e4m3 with
// one scale per token (quantized here unless it comes so from the op that made it), cuBLASLt's
// FP8 product with outer-vector scales, bias and the tanh GELU in its epilogue.
Tensor fp8_product(const Tensor& x, const Tensor& weight, const Tensor& bias, DType out,
                   const Activation* activation) {
  check(x.dtype() == DType::BF16 || x.dtype() == DType::F8E4M3Rows,
        "linear on the GPU: an f8_e4m3_rows weight reads bf16 or f8_e4m3_rows inputs, not {}",
        dtype_name(x.dtype()));
  // cuBLASLt's FP8 products with a float32 result take no bf16-typed bias in the epilogue; the
  // models' products that read FP8 weights all write bf16.
  check(out == DType::BF16, "linear on the GPU: an FP8 product writes bf16, not {}",
        dtype_name(out));
  check(!activation || *activation == Activation::GeluTanh,
        "linear on the GPU: an FP8 product fuses the tanh GELU only");
  const Tensor x8 = x.to(DType::F8E4M3Rows);
  const int64_t in = weight.size(1), features = weight.size(0), rows = x.numel() / in;
  auto [y, b] = product_output(x, bias, features, out);
  if (activation && !b.defined()) b = Tensor::zeros({features}, out, Device::CUDA);
  linear_fp8(x8.raw(), x8.row_scales(), weight.raw(), weight.row_scales(),
             b.defined() ? b.raw() : nullptr, y.raw(), rows, features, in, GemmOutput::BF16,
             nullptr, activation ? GemmActivation::GeluTanh : GemmActivation::None,
             Fp8Scales::PerRow);
  return y;
}

// y = act(x · wᵀ + b); `activation` null: none.
Tensor product(const Tensor& x, const Tensor& weight, const Tensor& bias, DType out,
               const Activation* activation) {
  MMGEN_PROFILE("gpu: linear");
  require_device(x, "linear", "input");
  require_device(weight, "linear", "weight");
  check(weight.dim() == 2 && x.size(-1) == weight.size(1) * dtype_block_values(weight.dtype()),
        "linear: input {} does not match weight {}", shape_string(x.shape()),
        shape_string(weight.shape()));
  // A GGUF matrix kept as its quantized blocks: expanded just before its product, into the
  // input's dtype, and freed after it.
  if (dtype_is_blocks(weight.dtype()))
    return product(x, weight.to(x.dtype() == DType::F32 ? DType::F32 : DType::BF16), bias, out,
                   activation);
  if (weight.dtype() == DType::F8E4M3Rows) return fp8_product(x, weight, bias, out, activation);
  // Quantized activations met by a bf16 weight (a VSA gate reading an FP8 model's pre-norm).
  if (x.dtype() == DType::F8E4M3Rows && weight.dtype() == DType::BF16)
    return product(x.to(DType::BF16), weight, bias, out, activation);
  check(x.dtype() == weight.dtype() && (x.dtype() == DType::BF16 || x.dtype() == DType::F32),
        "linear on the GPU: input {} and weight {} must both be bf16 (or both float32, the exact "
        "mode)",
        dtype_name(x.dtype()), dtype_name(weight.dtype()));
  check(out == DType::F32 || (out == DType::BF16 && x.dtype() == DType::BF16),
        "linear on the GPU: a {} result from {} inputs is not supported", dtype_name(out),
        dtype_name(x.dtype()));
  const int64_t in = weight.size(1), features = weight.size(0), rows = x.numel() / in;
  auto [y, b] = product_output(x, bias, features, out);
  // cuBLASLt's GELU epilogue is the tanh form; other activations run after the product.
  const bool fused = activation && *activation == Activation::GeluTanh && x.dtype() == DType::BF16;
  if (fused && !b.defined()) b = Tensor::zeros({features}, out, Device::CUDA);  // it needs a bias
  const bool separate = activation && !fused;
  check(!separate || out == DType::F32,
        "linear on the GPU: this activation runs after the product on a float32 result only");
  if (x.dtype() == DType::BF16) {
    // y[m, n] = x[m, k] · w[n, k]ᵀ + b, fp32 accumulation, the bias in the epilogue.
    linear_bf16(x.raw(), weight.raw(), b.defined() ? b.raw() : nullptr, y.raw(), rows, features, in,
                out == DType::F32 ? GemmOutput::F32 : GemmOutput::BF16, nullptr,
                fused ? GemmActivation::GeluTanh : GemmActivation::None);
  } else {
    // Column-major for cuBLASLt: yᵀ = w · xᵀ, full float32 (no TF32).
    gemm_f32(true, false, features, rows, in, weight.data<float>(), in, x.data<float>(), in,
             y.data<float>(), features, false);
    if (b.defined()) add_bias_f32(y.data<float>(), b.data<float>(), rows, features);
  }
  if (separate) activate_f32(y.data<float>(), y.numel(), *activation);
  return y;
}

}  // namespace

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias, DType out) {
  return product(x, weight, bias, out, nullptr);
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias, DType out,
              Activation activation) {
  return product(x, weight, bias, out, &activation);
}

std::vector<Tensor> linear_each(const Tensor& x, const std::vector<Tensor>& weights, DType out) {
  MMGEN_PROFILE("gpu: linear");
  check(!weights.empty(), "linear_each: no weights");
  const Tensor& first = weights.front();
  // One batched product when every weight is the bf16 matrix after the one before it.
  bool stacked = x.dtype() == DType::BF16 && first.dtype() == DType::BF16 && first.dim() == 2 &&
                 first.device() == Device::CUDA && first.is_contiguous() && weights.size() > 1 &&
                 x.size(-1) == first.size(1) && x.is_contiguous() && x.device() == Device::CUDA;
  for (size_t i = 1; stacked && i < weights.size(); ++i)
    stacked = weights[i].shape() == first.shape() && weights[i].dtype() == DType::BF16 &&
              weights[i].device() == Device::CUDA && weights[i].is_contiguous() &&
              weights[i].raw() == first.raw() + int64_t(i) * first.nbytes();
  std::vector<Tensor> results;
  if (!stacked || (out != DType::BF16 && out != DType::F32)) {
    // FP8 weights: the input quantized once for all of them.
    const bool fp8 = first.dtype() == DType::F8E4M3Rows && x.dtype() == DType::BF16 &&
                     x.device() == Device::CUDA && x.is_contiguous();
    const Tensor input = fp8 ? x.to(DType::F8E4M3Rows) : x;
    for (const Tensor& weight : weights)
      results.push_back(product(input, weight, Tensor(), out, nullptr));
    return results;
  }
  const int64_t batch = int64_t(weights.size()), in = first.size(1), features = first.size(0),
                rows = x.numel() / in;
  Shape shape = x.shape();
  shape.back() = features;
  const Tensor y = Tensor::empty({batch, rows, features}, out, Device::CUDA);
  linear_bf16_batched(x.raw(), first.raw(), y.raw(), rows, features, in, batch,
                      out == DType::F32 ? GemmOutput::F32 : GemmOutput::BF16);
  for (int64_t i = 0; i < batch; ++i) results.push_back(y.select(0, i).view(shape));
  return results;
}

void add_low_rank_(Tensor& y, const Tensor& x, const LowRankUpdate& update) {
  MMGEN_PROFILE("gpu: lora");
  require_device(y, "a LoRA's update", "result");
  const int64_t rank = update.down.size(0), features = update.up.size(0);
  check(y.is_contiguous() && y.size(-1) == features && x.size(-1) == update.down.size(1),
        "a LoRA's update [{} x {}] does not fit the product {} -> {}", features,
        update.down.size(1), shape_string(x.shape()), shape_string(y.shape()));
  const int64_t rows = y.numel() / features;
  if (update.up.dtype() == DType::F32) {  // the exact mode: float32 throughout
    const Tensor h = product(x, update.down, Tensor(), DType::F32, nullptr);
    add_(y, product(h, update.up, Tensor(), DType::F32, nullptr).view(y.shape()));
    return;
  }
  check(update.up.dtype() == DType::BF16 && (y.dtype() == DType::BF16 || y.dtype() == DType::F32),
        "a LoRA's update on the GPU: bf16 matrices into a bf16 or float32 result");
  // The low-rank input h = x · downᵀ [rows, rank] in bf16 (FP8 inputs widened first), then
  // y = h · upᵀ + y in one product whose epilogue reads y.
  const Tensor input = x.dtype() == DType::BF16 ? x : x.to(DType::BF16);
  const Tensor h = product(input, update.down, Tensor(), DType::BF16, nullptr);
  matmul_bf16({h.raw(), rank, 0, false}, {update.up.raw(), rank, 0, true}, y.raw(), features, 0,
              rows, features, rank, 1, y.dtype() == DType::F32 ? GemmOutput::F32 : GemmOutput::BF16,
              nullptr, {y.raw(), nullptr});
}

Tensor layer_norm(const Tensor& x, float eps, const Tensor& weight, const Tensor& bias, DType out) {
  MMGEN_PROFILE("gpu: norms");
  require_f32(x, "layer_norm");
  const int64_t dim = x.size(-1), rows = x.numel() / dim;
  check(weight.defined() && bias.defined() && out == DType::BF16,
        "layer_norm on the GPU: affine weight and bias and a bf16 result only");
  require_device(weight, "layer_norm", "weight");
  require_device(bias, "layer_norm", "bias");
  Tensor y = Tensor::empty(x.shape(), DType::BF16, Device::CUDA);
  layer_norm_to_bf16(x.data<float>(), y.raw(), rows, dim, weight.data<float>(), bias.data<float>(),
                     eps);
  return y;
}

Tensor modulated_layer_norm(const Tensor& x, const Tensor& shift, const Tensor& scale_plus_one,
                            float eps, DType out) {
  MMGEN_PROFILE("gpu: norms");
  require_f32(x, "modulated_layer_norm");
  check(out == DType::BF16 || out == DType::F8E4M3Rows,
        "modulated_layer_norm on the GPU: a bf16 or f8_e4m3_rows result only");
  require_device(shift, "modulated_layer_norm", "shift");
  require_device(scale_plus_one, "modulated_layer_norm", "scale");
  const int64_t dim = x.size(-1), rows = x.numel() / dim;
  check(shift.numel() == dim && scale_plus_one.numel() == dim,
        "modulated_layer_norm: {} shift and {} scale values for rows of {}", shift.numel(),
        scale_plus_one.numel(), dim);
  if (out == DType::F8E4M3Rows) {  // an FP8 product's input, quantized as it is written
    Tensor y = Tensor::empty(x.shape(), out, Device::CUDA);
    // With no update the one-pass kernel only reads x.
    if (residual_layer_norm_bf16(const_cast<float*>(x.data<float>()), nullptr, false, nullptr, rows,
                                 dim, scale_plus_one.data<float>(), shift.data<float>(), eps,
                                 y.raw(), nullptr, y.row_scales()))
      return y;
    return modulated_layer_norm(x, shift, scale_plus_one, eps, DType::BF16).to(out);
  }
  Tensor y = Tensor::empty(x.shape(), DType::BF16, Device::CUDA);
  layer_norm_to_bf16(x.data<float>(), y.raw(), rows, dim, scale_plus_one.data<float>(),
                     shift.data<float>(), eps);
  return y;
}

void add_gated_(Tensor& x, const Tensor& y, const Tensor& gate) {
  MMGEN_PROFILE("gpu: residual");
  require_f32(x, "add_gated");
  require_f32(y, "add_gated");
  check(x.shape() == y.shape(), "add_gated: shapes {} and {} differ", shape_string(x.shape()),
        shape_string(y.shape()));
  const int64_t dim = x.size(-1), rows = x.numel() / dim;
  if (gate.defined()) {
    require_device(gate, "add_gated", "gate");
    check(gate.numel() == dim, "add_gated: {} gate values for rows of {}", gate.numel(), dim);
  }
  add_gated_f32(x.data<float>(), y.data<float>(), rows, dim,
                gate.defined() ? gate.data<float>() : nullptr);
}

Tensor add_gated_layer_norm_(Tensor& x, const Tensor& y, const Tensor& gate, float eps,
                             const Tensor& scale, const Tensor& shift, DType out) {
  MMGEN_PROFILE("gpu: residual");
  require_f32(x, "add_gated_layer_norm");
  require_device(y, "add_gated_layer_norm", "update");
  check(x.shape() == y.shape() && (y.dtype() == DType::F32 || y.dtype() == DType::BF16),
        "add_gated_layer_norm: x {} and y {} {} must have one shape, y float32 or bf16",
        shape_string(x.shape()), dtype_name(y.dtype()), shape_string(y.shape()));
  check(out == DType::BF16 || out == DType::F8E4M3Rows,
        "add_gated_layer_norm on the GPU: a bf16 or f8_e4m3_rows result only");
  const int64_t dim = x.size(-1), rows = x.numel() / dim;
  const auto require_row_vector = [&](const Tensor& t, const char* what) {
    require_device(t, "add_gated_layer_norm", what);
    check(t.numel() == dim && t.dtype() == DType::F32,
          "add_gated_layer_norm: {} {} {} for rows of {}", what, dtype_name(t.dtype()),
          shape_string(t.shape()), dim);
  };
  require_row_vector(scale, "scale");
  require_row_vector(shift, "shift");
  if (gate.defined()) require_row_vector(gate, "gate");
  const float* g = gate.defined() ? gate.data<float>() : nullptr;
  Tensor normed = Tensor::empty(x.shape(), out, Device::CUDA);
  const bool fp8 = out == DType::F8E4M3Rows;
  if (!residual_layer_norm_bf16(x.data<float>(), y.raw(), y.dtype() == DType::BF16, g, rows, dim,
                                scale.data<float>(), shift.data<float>(), eps, normed.raw(),
                                nullptr, fp8 ? normed.row_scales() : nullptr)) {
    // A row the one-pass kernel does not take: the update, then the norm.
    const Tensor update = y.to(DType::F32);
    add_gated_f32(x.data<float>(), update.data<float>(), rows, dim, g);
    if (fp8) return modulated_layer_norm(x, shift, scale, eps, out);
    layer_norm_to_bf16(x.data<float>(), normed.raw(), rows, dim, scale.data<float>(),
                       shift.data<float>(), eps);
  }
  return normed;
}

namespace {

// The residual update's operands checked; returns the row width.
int64_t check_residual_update(const Tensor& x, const Tensor& y, const Tensor& weight,
                              const Tensor& gate, const char* op) {
  require_f32(x, op);
  require_device(y, op, "normed input");
  require_device(weight, op, "weight");
  check(x.shape() == y.shape() && (y.dtype() == DType::F32 || y.dtype() == DType::BF16),
        "{}: x {} and y {} {} must have one shape, y float32 or bf16", op, shape_string(x.shape()),
        dtype_name(y.dtype()), shape_string(y.shape()));
  const int64_t dim = x.size(-1);
  check(weight.numel() == dim && weight.dtype() == DType::F32, "{}: weight {} for rows of {}", op,
        shape_string(weight.shape()), dim);
  if (gate.defined()) {
    require_device(gate, op, "gate");
    check(gate.numel() == dim && gate.dtype() == DType::F32, "{}: {} gate values for rows of {}",
          op, gate.numel(), dim);
  }
  return dim;
}

}  // namespace

void add_rms_norm_gated_(Tensor& x, const Tensor& y, const Tensor& weight, float eps,
                         const Tensor& gate) {
  MMGEN_PROFILE("gpu: residual");
  const int64_t dim = check_residual_update(x, y, weight, gate, "add_rms_norm_gated");
  add_rms_norm_gated_f32(x.data<float>(), y.raw(), y.dtype() == DType::BF16, x.numel() / dim, dim,
                         weight.data<float>(), eps, gate.defined() ? gate.data<float>() : nullptr);
}

Tensor add_rms_norm_gated_norm_(Tensor& x, const Tensor& y, const Tensor& weight, float eps,
                                const Tensor& gate, const Tensor& next_weight, float next_eps,
                                DType out) {
  MMGEN_PROFILE("gpu: residual");
  if (out != DType::BF16) {  // only the bf16 pre-norm is fused
    add_rms_norm_gated_(x, y, weight, eps, gate);
    return rms_norm(x, next_weight, next_eps, out);
  }
  const int64_t dim = check_residual_update(x, y, weight, gate, "add_rms_norm_gated_norm");
  require_device(next_weight, "add_rms_norm_gated_norm", "next weight");
  check(next_weight.numel() == dim && next_weight.dtype() == DType::F32,
        "add_rms_norm_gated_norm: next weight {} for rows of {}", shape_string(next_weight.shape()),
        dim);
  Tensor normed = Tensor::empty(x.shape(), DType::BF16, Device::CUDA);
  add_rms_norm_gated_f32(x.data<float>(), y.raw(), y.dtype() == DType::BF16, x.numel() / dim, dim,
                         weight.data<float>(), eps, gate.defined() ? gate.data<float>() : nullptr,
                         next_weight.data<float>(), next_eps, normed.raw());
  return normed;
}

void rms_norm_rope_(Tensor& x, const Tensor& weight, float eps, const Tensor& cos,
                    const Tensor& sin, int64_t head_dim, int64_t rows_per_position) {
  MMGEN_PROFILE("gpu: qk norm + rope");
  require_device(x, "rms_norm_rope", "input");
  require_device(weight, "rms_norm_rope", "weight");
  check(x.dtype() == DType::BF16, "rms_norm_rope on the GPU: bf16 rows (a product's output)");
  const int64_t dim = x.size(-1), rows = x.numel() / dim;
  check(weight.numel() == dim && weight.dtype() == DType::F32,
        "rms_norm_rope: weight {} for rows of {}", shape_string(weight.shape()), dim);
  // The kernels read the rows as bf16 pairs.
  check(dim % 2 == 0, "rms_norm_rope on the GPU: rows of an even width, not {}", dim);
  if (cos.defined()) {
    require_device(cos, "rms_norm_rope", "cos table");
    require_device(sin, "rms_norm_rope", "sin table");
    check(head_dim > 0 && dim % head_dim == 0 && cos.dim() == 2 && cos.size(1) == head_dim / 2 &&
              sin.shape() == cos.shape() && rows_per_position > 0,
          "rms_norm_rope: tables {} for head size {}", shape_string(cos.shape()), head_dim);
  }
  rms_norm_rope_bf16(x.raw(), rows, dim, weight.data<float>(), eps,
                     cos.defined() ? cos.data<float>() : nullptr,
                     cos.defined() ? sin.data<float>() : nullptr, cos.defined() ? cos.size(0) : 1,
                     head_dim > 0 ? head_dim : dim, rows_per_position);
}

void rope_half_(Tensor& x, const Tensor& cos, const Tensor& sin) {
  require_f32(x, "rope_half");
  require_f32(cos, "rope_half");
  require_f32(sin, "rope_half");
  rope_half_f32(x.data<float>(), x.size(0), x.size(1), x.size(2), cos.data<float>(),
                sin.data<float>());
}

Tensor rms_norm(const Tensor& x, const Tensor& weight, float eps, DType out) {
  MMGEN_PROFILE("gpu: norms");
  require_f32(x, "rms_norm");
  require_device(weight, "rms_norm", "weight");
  const int64_t dim = x.size(-1), rows = x.numel() / dim;
  check(weight.numel() == dim && weight.dtype() == DType::F32,
        "rms_norm: weight {} {} for rows of {}", dtype_name(weight.dtype()),
        shape_string(weight.shape()), dim);
  Tensor y = Tensor::empty(x.shape(), out, Device::CUDA);
  if (out == DType::BF16)
    t5_rms_norm_bf16(x.data<float>(), y.raw(), rows, dim, weight.data<float>(), eps);
  else if (out == DType::F32)
    t5_rms_norm_f32(x.data<float>(), y.data<float>(), rows, dim, weight.data<float>(), eps);
  else
    fail("rms_norm on the GPU: a {} result is not supported", dtype_name(out));
  return y;
}

Tensor group_norm(const Tensor& x, int64_t groups, float eps, const Tensor& weight,
                  const Tensor& bias, bool silu) {
  require_f32(x, "group_norm");
  check(x.dim() >= 2, "group_norm: expects [N, C, ...], got {}", shape_string(x.shape()));
  const int64_t batch = x.size(0), channels = x.size(1);
  check(groups > 0 && channels % groups == 0, "group_norm: {} channels do not split into {} groups",
        channels, groups);
  for (const auto& [tensor, what] : {std::pair{&weight, "weight"}, std::pair{&bias, "bias"}}) {
    if (!tensor->defined()) continue;
    require_device(*tensor, "group_norm", what);
    check(tensor->dtype() == DType::F32 && tensor->numel() == channels,
          "group_norm: {} {} {} for {} channels (the GPU takes float32)", what,
          dtype_name(tensor->dtype()), shape_string(tensor->shape()), channels);
  }
  Tensor y = Tensor::empty(x.shape(), DType::F32, Device::CUDA);
  if (x.numel() == 0) return y;
  const int64_t positions = x.numel() / (batch * channels);
  const int64_t group_count = batch * groups;
  const int64_t chunks = group_norm_chunks(channels / groups * positions);
  check(group_count * chunks < (int64_t(1) << 31),
        "group_norm: {} groups are too many for one launch", group_count);
  // Partial sums, then each group's mean and 1/σ (doubles); then each plane's scale and shift.
  Tensor stats = Tensor::empty({group_count * chunks + 2 * group_count}, DType::F64, Device::CUDA);
  Tensor factors = Tensor::empty({2 * batch * channels}, DType::F32, Device::CUDA);
  GroupNormWorkspace workspace;
  workspace.partial = reinterpret_cast<double*>(stats.raw());
  workspace.mean = workspace.partial + group_count * chunks;
  workspace.factors = factors.data<float>();
  group_norm_f32(x.data<float>(), y.data<float>(), batch, channels, positions, groups, eps,
                 weight.defined() ? weight.data<float>() : nullptr,
                 bias.defined() ? bias.data<float>() : nullptr, silu, workspace);
  return y;
}

void activate_(Tensor& x, Activation activation) {
  require_f32(x, "activation");
  activate_f32(x.data<float>(), x.numel(), activation);
}

void add_(Tensor& x, const Tensor& y) {
  require_f32(x, "add");
  require_f32(y, "add");
  check(x.shape() == y.shape(), "add: shapes {} and {} differ", shape_string(x.shape()),
        shape_string(y.shape()));
  add_f32(x.data<float>(), y.data<float>(), x.numel());
}

void mul_(Tensor& x, const Tensor& y) {
  require_f32(x, "mul");
  require_f32(y, "mul");
  check(x.shape() == y.shape(), "mul: shapes {} and {} differ", shape_string(x.shape()),
        shape_string(y.shape()));
  mul_f32(x.data<float>(), y.data<float>(), x.numel());
}

Tensor fold_scale_gate(const Tensor& modulation, const Tensor& norms) {
  const auto [groups, pairs, dim] = mmgen::ops::fold_scale_gate_layout(modulation, norms);
  const Tensor m = modulation.contiguous(), w = norms.contiguous();
  Tensor out = Tensor::empty(modulation.shape(), DType::F32, Device::CUDA);
  cuda::fold_scale_gate(m.data<float>(), w.data<float>(), out.data<float>(), groups * pairs, dim);
  return out;
}

Tensor silu_mul(const Tensor& gate, const Tensor& up, DType out) {
  MMGEN_PROFILE("gpu: elementwise");
  require_device(gate, "silu_mul", "gate");
  require_device(up, "silu_mul", "up projection");
  check(gate.shape() == up.shape(), "silu_mul: shapes {} and {} differ", shape_string(gate.shape()),
        shape_string(up.shape()));
  const auto supported = [](DType dtype) { return dtype == DType::BF16 || dtype == DType::F32; };
  check(supported(gate.dtype()) && supported(up.dtype()) && supported(out),
        "silu_mul on the GPU: bf16 or float32, not {} · {} → {}", dtype_name(gate.dtype()),
        dtype_name(up.dtype()), dtype_name(out));
  Tensor y = Tensor::empty(gate.shape(), out, Device::CUDA);
  cuda::silu_mul(gate.raw(), gate.dtype() == DType::BF16, up.raw(), up.dtype() == DType::BF16,
                 y.raw(), out == DType::BF16, y.numel());
  return y;
}

void scale_(Tensor& x, float factor) {
  require_f32(x, "scale");
  scale_f32(x.data<float>(), factor, x.numel());
}

// One pitched copy per repeat: copy j writes every row r to row r·times + j.
Tensor repeat_rows(const Tensor& x, int64_t times) {
  check(times >= 1 && x.dim() >= 1 && x.is_contiguous(),
        "repeat_rows: a contiguous tensor and a count of at least 1 (got {} and {})",
        shape_string(x.shape()), times);
  Shape shape = x.shape();
  shape[0] *= times;
  Tensor out = Tensor::empty(shape, x.dtype(), Device::CUDA);
  const int64_t rows = x.size(0);
  const size_t row = rows > 0 ? x.nbytes() / size_t(rows) : 0;
  for (int64_t j = 0; j < times; ++j)
    copy_2d_device_to_device(out.raw() + size_t(j) * row, row * size_t(times), x.raw(), row, row,
                             size_t(rows));
  return out;
}

Tensor random_uniform(const Shape& shape, DType dtype, uint64_t seed, float scale) {
  check(dtype == DType::BF16 || dtype == DType::F32,
        "random_uniform on the GPU: bf16 or float32, not {}", dtype_name(dtype));
  Tensor values = Tensor::empty(shape, DType::BF16, Device::CUDA);
  fill_uniform_bf16(values.raw(), values.numel(), seed, scale);
  return values.to(dtype);
}

}  // namespace mmgen::cuda::ops
