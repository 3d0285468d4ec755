// The CPU implementation of ops::group_norm (core/ops.h). A group spans C / groups whole channel
// planes, so every pass runs over the N·C planes in parallel rather than over the N·groups groups:
// a VAE has as few as 8 groups per image but hundreds of planes, which keeps every thread busy.
// Statistics are accumulated in double (core/row_stats.h's interleaved lanes), mean first and then
// the centred squares (two reads of a plane, but no cancellation on planes of a million pixels),
// and rounded to float32 as torch's kernel keeps them; the affine part is torch's folded form
// y = x · scale + shift with scale = rstd · weight[c] and shift = −scale · mean + bias[c].
#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/ops.h"
#include "core/row_stats.h"
#ifdef MMGEN_HAVE_CUDA
#include "core/cuda/ops_cuda.h"
#endif

namespace mmgen::ops {
namespace {

// Below this many values a pass runs on one thread: waking the team costs more than the work.
constexpr int64_t kParallelThreshold = 1 << 15;

// Per-plane (n, c) affine factors for the group statistics of each (n, g).
void plane_factors(const std::vector<float>& mean, const std::vector<float>& rstd,
                   const float* weight, const float* bias, int64_t batch, int64_t channels,
                   int64_t per_group, std::vector<float>& scale, std::vector<float>& shift) {
  const int64_t groups = channels / per_group;
  for (int64_t n = 0; n < batch; ++n)
    for (int64_t c = 0; c < channels; ++c) {
      const int64_t group = n * groups + c / per_group;
      const float s = weight ? rstd[size_t(group)] * weight[c] : rstd[size_t(group)];
      const float b = -s * mean[size_t(group)];
      scale[size_t(n * channels + c)] = s;
      shift[size_t(n * channels + c)] = bias ? b + bias[c] : b;
    }
}

}  // namespace

Tensor group_norm(const Tensor& x, int64_t groups, float eps, const Tensor& weight,
                  const Tensor& bias, bool silu) {
#ifdef MMGEN_HAVE_CUDA
  // GPU tensors go to core/cuda/group_norm.cu (the same two passes, blocks per group chunk).
  if (x.device() == Device::CUDA) return cuda::ops::group_norm(x, groups, eps, weight, bias, silu);
#endif
  check(!weight.defined() || weight.is_cpu(),
        "group_norm: the input is on the CPU, the weight not");
  check(!bias.defined() || bias.is_cpu(), "group_norm: the input is on the CPU, the bias not");
  check(x.dtype() == DType::F32 && x.is_contiguous() && x.dim() >= 2,
        "group_norm: expects a contiguous float32 tensor [N, C, ...], got {} {}",
        dtype_name(x.dtype()), shape_string(x.shape()));
  const int64_t batch = x.size(0), channels = x.size(1);
  check(groups > 0 && channels % groups == 0, "group_norm: {} channels do not split into {} groups",
        channels, groups);
  const Tensor w = weight.defined() ? weight_to_f32(weight) : Tensor();
  const Tensor b = bias.defined() ? weight_to_f32(bias) : Tensor();
  check(!w.defined() || w.numel() == channels, "group_norm: weight {} for {} channels",
        shape_string(weight.shape()), channels);
  check(!b.defined() || b.numel() == channels, "group_norm: bias {} for {} channels",
        shape_string(bias.shape()), channels);

  const int64_t planes = batch * channels, positions = planes ? x.numel() / planes : 0;
  const int64_t per_group = channels / groups;
  const double group_size = double(per_group * positions);
  const bool parallel = x.numel() > kParallelThreshold;
  const float* in = x.data<float>();
  Tensor y = Tensor::empty(x.shape());
  float* out = y.data<float>();
  if (x.numel() == 0) return y;

  std::vector<double> plane_sum(size_t(planes), 0.0);
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t p = 0; p < planes; ++p) {
    const float* row = in + p * positions;
    plane_sum[size_t(p)] = row_sum(row, positions);
  }
  std::vector<double> group_mean(size_t(batch * groups), 0.0);
  for (int64_t p = 0; p < planes; ++p) group_mean[size_t(p / per_group)] += plane_sum[size_t(p)];
  for (double& m : group_mean) m /= group_size;

#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t p = 0; p < planes; ++p) {
    const float* row = in + p * positions;
    plane_sum[size_t(p)] = row_squares_about(row, positions, group_mean[size_t(p / per_group)]);
  }
  std::vector<float> mean(size_t(batch * groups)), rstd(size_t(batch * groups));
  std::vector<double> group_squares(size_t(batch * groups), 0.0);
  for (int64_t p = 0; p < planes; ++p) group_squares[size_t(p / per_group)] += plane_sum[size_t(p)];
  for (size_t g = 0; g < mean.size(); ++g) {
    mean[g] = float(group_mean[g]);
    rstd[g] = float(1.0 / std::sqrt(group_squares[g] / group_size + double(eps)));
  }

  std::vector<float> scale(plane_sum.size()), shift(plane_sum.size());
  plane_factors(mean, rstd, w.defined() ? w.data<float>() : nullptr,
                b.defined() ? b.data<float>() : nullptr, batch, channels, per_group, scale, shift);
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t p = 0; p < planes; ++p) {
    const float* row = in + p * positions;
    float* dst = out + p * positions;
    const float s = scale[size_t(p)], t = shift[size_t(p)];
    for (int64_t i = 0; i < positions; ++i) dst[i] = row[i] * s + t;
    if (silu) silu_values(dst, positions);
  }
  return y;
}

}  // namespace mmgen::ops
