#include "models/dit/mmdit/mmdit_layers.h"

#include "core/error.h"
#include "core/ops.h"

namespace mmgen::dit {

void FluxLinear::parameters(const models::ParameterVisitor& visit) {
  visit({"weight", weight, models::Role::Product, {out, in}});
  visit({"bias", bias, models::Role::Float32, {out}});
}

void mmdit_add_one_to_scales(FluxLinear& product, int64_t chunks,
                             std::initializer_list<int64_t> scales) {
  product.bias = product.bias.clone();  // never the mapped file's bytes
  const int64_t dim = product.bias.numel() / chunks;
  float* bias = product.bias.data<float>();
  for (int64_t chunk : scales)
    for (int64_t i = 0; i < dim; ++i) bias[chunk * dim + i] += 1.0f;
}

Tensor mmdit_modulation(const FluxLinear& w, const Tensor& conditioning, int64_t chunks) {
  const Tensor values = ops::linear(conditioning, w.weight, w.bias, DType::F32);
  return values.view({chunks, values.numel() / chunks});
}

Tensor mmdit_rotated(const Tensor& normed, const FluxLinear& projection, const Tensor& norm,
                     const FluxRopeTables& rope, MMDiTHeads layout, DType compute) {
  Tensor x = ops::linear(normed, projection.weight, projection.bias, compute);
  Tensor heads = x.view({x.size(0) * layout.heads, layout.head_dim});
  ops::rms_norm_rope_(heads, norm, kMMDiTEps, rope.cos, rope.sin, layout.head_dim, layout.heads);
  return x;
}

Tensor mmdit_as_heads(const Tensor& x, MMDiTHeads layout) {
  return x.view({1, x.size(0), layout.heads, layout.head_dim});
}

Tensor mmdit_mlp(const Tensor& normed, const FluxLinear& in, const FluxLinear& out, DType compute) {
  const Tensor hidden = ops::linear(normed, in.weight, in.bias, compute, Activation::GeluTanh);
  return ops::linear(hidden, out.weight, out.bias, DType::F32);
}

Tensor mmdit_stack_rows(const std::vector<Tensor>& parts) {
  check(!parts.empty(), "mmdit_stack_rows: nothing to stack");
  int64_t rows = 0;
  for (const Tensor& part : parts) rows += part.size(0);
  const Tensor& first = parts.front();
  Tensor out = Tensor::empty({rows, first.size(1)}, first.dtype(), first.device());
  int64_t row = 0;
  for (const Tensor& part : parts) {
    out.slice(0, row, row + part.size(0)).copy_from(part);
    row += part.size(0);
  }
  return out;
}

}  // namespace mmgen::dit
