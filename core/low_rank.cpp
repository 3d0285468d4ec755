#include "core/low_rank.h"

#include "core/error.h"
#include "core/ops.h"
#ifdef MMGEN_HAVE_CUDA
#include "core/cuda/ops_cuda.h"
#endif

namespace mmgen {

std::shared_ptr<const LowRankUpdate> low_rank_for(
    const std::shared_ptr<const LowRankUpdate>& update, Device device, DType weight_dtype) {
  if (!update) return update;
  const DType dtype =
      device == Device::CPU || weight_dtype == DType::F32 ? DType::F32 : DType::BF16;
  if (update->down.device() == device && update->down.dtype() == dtype) return update;
  return std::make_shared<const LowRankUpdate>(
      LowRankUpdate{update->down.to(dtype).to(device), update->up.to(dtype).to(device)});
}

std::shared_ptr<const LowRankUpdate> low_rank_slice(const LowRankUpdate& update, int64_t dim,
                                                    int64_t start, int64_t end) {
  check(dim == 0 || dim == 1, "a LoRA's update is sliced by rows or columns, not dimension {}",
        dim);
  const bool host = update.down.is_cpu();
  // The update's matrices are sliced where they are small: on the host, then placed back.
  const Tensor down = host ? update.down : update.down.to(Device::CPU);
  const Tensor up = host ? update.up : update.up.to(Device::CPU);
  LowRankUpdate sliced = dim == 0 ? LowRankUpdate{down, up.slice(0, start, end).contiguous()}
                                  : LowRankUpdate{down.slice(1, start, end).contiguous(), up};
  if (!host) {
    sliced.down = sliced.down.to(update.down.device());
    sliced.up = sliced.up.to(update.up.device());
  }
  return std::make_shared<const LowRankUpdate>(std::move(sliced));
}

namespace ops {

void add_low_rank_(Tensor& y, const Tensor& x, const LowRankUpdate& update) {
#ifdef MMGEN_HAVE_CUDA
  if (y.device() == Device::CUDA) return cuda::ops::add_low_rank_(y, x, update);
#endif
  check(x.size(-1) == update.down.size(1) && y.size(-1) == update.up.size(0),
        "a LoRA's update [{} x {}] does not fit the product {} -> {}", update.up.size(0),
        update.down.size(1), shape_string(x.shape()), shape_string(y.shape()));
  add_(y, linear(linear(x, update.down), update.up));
}

Tensor linear_with_low_rank(const Tensor& x, const Tensor& weight, const Tensor& bias, DType out,
                            const Activation* activation) {
  const Tensor plain = weight.without_low_rank();
  const bool host = x.is_cpu();
  // The host computes in float32 and converts at the end; the GPU adds the update into the
  // product's own result, which is float32 only where an activation follows the sum.
  const DType sum = host || activation ? DType::F32 : out;
  // (The GPU's FP8 products write bf16 only: widened for the sum.)
  Tensor y = !host && sum == DType::F32 && plain.dtype() == DType::F8E4M3Rows
                 ? linear(x, plain, bias, DType::BF16).to(DType::F32)
                 : linear(x, plain, bias, sum);
  add_low_rank_(y, x, *weight.low_rank());
  if (activation) activate_(y, *activation);
  return y.dtype() == out ? y : y.to(out);
}

}  // namespace ops
}  // namespace mmgen
