#include "attention/device_attention.h"

#include <string>

#include "attention/backends/descriptor.h"
#include "core/error.h"
#ifdef MMGEN_HAVE_CUDA
#include "attention/cuda/reference_attention.h"
#include "core/cuda/gemm_f32.h"
#include "core/cuda/vae_ops.h"
#endif

namespace mmgen::attention {

#ifdef MMGEN_HAVE_CUDA
namespace {

void check_gpu_bf16(const Tensor& x, const char* what, int64_t batch, int64_t heads,
                    int64_t head_dim) {
  check(x.device() == Device::CUDA && x.dtype() == DType::BF16 && x.dim() == 4 &&
            x.is_contiguous() && x.size(0) == batch && x.size(2) == heads && x.size(3) == head_dim,
        "GPU attention: {} is {} {} on {}, expected contiguous bf16 [{}, tokens, {}, {}] on the "
        "GPU",
        what, dtype_name(x.dtype()), shape_string(x.shape()), device_name(x.device()), batch, heads,
        head_dim);
}

}  // namespace

Tensor dense_attention_gpu(const Tensor& q, const Tensor& k, const Tensor& v, float scale,
                           DenseKernel kernel) {
  check(q.dim() == 4, "GPU attention: q must be [batch, tokens, heads, head_dim], got {}",
        shape_string(q.shape()));
  const int64_t batch = q.size(0), q_len = q.size(1), heads = q.size(2), head_dim = q.size(3);
  check_gpu_bf16(q, "q", batch, heads, head_dim);
  check_gpu_bf16(k, "k", batch, heads, head_dim);
  check_gpu_bf16(v, "v", batch, heads, head_dim);
  check(k.size(1) == v.size(1), "GPU attention: {} keys but {} values", k.size(1), v.size(1));
  const int64_t kv_len = k.size(1), dim = heads * head_dim;
  Tensor out = Tensor::empty(q.shape(), DType::BF16, Device::CUDA);
  cuda::FlashAttentionArgs args;
  args.q = q.raw(), args.k = k.raw(), args.v = v.raw(), args.out = out.raw();
  args.batch = batch, args.heads = heads, args.seq_q = q_len, args.seq_k = kv_len;
  args.head_dim = head_dim;
  args.scale = scale;
  args.q_strides = args.out_strides = {q_len * dim, dim, head_dim};
  args.k_strides = args.v_strides = {kv_len * dim, dim, head_dim};
  if (kernel == DenseKernel::Reference)
    cuda::reference_attention_forward(args);
  else
    cuda::attention_forward(args);
  return out;
}

void channel_attention_gpu(const Tensor& q, const Tensor& k, const Tensor& v, float scale,
                           bool exact, Tensor& out) {
  for (const Tensor* x : {&q, &k, &v, const_cast<const Tensor*>(&out)})
    check(x->device() == Device::CUDA && x->dtype() == DType::F32 && x->dim() == 2 &&
              x->is_contiguous() && x->shape() == q.shape(),
          "GPU channel attention: q, k and v must be contiguous float32 [channels, pixels] on "
          "the GPU, got {} {} on {}",
          dtype_name(x->dtype()), shape_string(x->shape()), device_name(x->device()));
  const int64_t channels = q.size(0), positions = q.size(1);
  Tensor scores = Tensor::empty({positions, positions}, DType::F32, Device::CUDA);
  // [C, P] row-major is column-major [P, C]. Scores row-major [query, key] = column-major
  // [key, query] = K · Qᵀ in column-major terms.
  cuda::gemm_f32(false, true, positions, positions, channels, k.data<float>(), positions,
                 q.data<float>(), positions, scores.data<float>(), positions, !exact);
  cuda::softmax_rows_f32(scores.data<float>(), positions, positions, scale);
  // out row-major [C, query] = column-major [query, C] = Sᵀ(col-major [key, query])ᵀ · V.
  cuda::gemm_f32(true, false, positions, channels, positions, scores.data<float>(), positions,
                 v.data<float>(), positions, out.data<float>(), positions, !exact);
}

#else

Tensor dense_attention_gpu(const Tensor&, const Tensor&, const Tensor&, float, DenseKernel) {
  fail("GPU attention: this build has no CUDA support; use --device cpu");
}

void channel_attention_gpu(const Tensor&, const Tensor&, const Tensor&, float, bool, Tensor&) {
  fail("GPU attention: this build has no CUDA support; use --device cpu");
}

#endif

namespace {

class DenseGpuBackend final : public AttentionBackend {
 public:
  DenseGpuBackend(std::string_view name, DenseKernel kernel) : name_(name), kernel_(kernel) {}
  std::string_view name() const override { return name_; }
  bool batch_elements_alone() const override { return true; }
  Tensor forward(const Tensor& q, const Tensor& k, const Tensor& v, float scale,
                 const AttentionContext&, AttentionStats*) override {
    return dense_attention_gpu(q, k, v, scale, kernel_);
  }

 private:
  std::string name_;
  DenseKernel kernel_;
};

}  // namespace

std::shared_ptr<AttentionBackend> make_dense_gpu_backend(std::string_view name,
                                                         DenseKernel kernel) {
  return std::make_shared<DenseGpuBackend>(name, kernel);
}

DenseKernel dense_kernel_for(std::string_view backend) {
  const BackendDescriptor* descriptor = find_dit_descriptor(backend);
  return descriptor && descriptor->gpu_dense_reference ? DenseKernel::Reference
                                                       : DenseKernel::Flash;
}

}  // namespace mmgen::attention
