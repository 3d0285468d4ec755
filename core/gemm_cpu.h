#pragma once
// The CPU's linear-layer product: c[m, n] = Σ_k a[m, k] · w[n, k] (+ bias[n]), with w a layer's
// weight as stored ([out, in]; float32, bfloat16 or float16).
//
// Each output is one fused multiply-add chain over k in increasing order, then the bias. That
// order does not depend on the row count, the row's place in the batch, the thread count or the
// instruction set, so a prompt's rows come out bit-identical alone or batched (what the prompt-file
// and prefix-cache tests assert). Vendor BLAS libraries pick their kernels and splits by shape and
// lose that.

#include <cstdint>
#include <cstdlib>
#include <memory>

#include "core/dtype.h"
#include "core/tensor.h"

namespace mmgen::cpu {

// `a` has rows of `lda` floats; `c` is [m, n] contiguous; `w` is [n, k] contiguous in `w_dtype`;
// `bias` is n floats or null. Runs on up to omp_get_max_threads() threads, fewer for small
// products.
void linear_product(const float* a, int64_t lda, const void* w, DType w_dtype, const float* bias,
                    float* c, int64_t m, int64_t k, int64_t n);

// A layer's weight packed once into the product's panels (float32, whatever it was stored as), for
// a layer that runs many times: its products skip the packing and give the same bits.
class PackedLinearWeight {
 public:
  // `w` as linear_product takes it: [n, k] contiguous in `w_dtype`.
  PackedLinearWeight(const void* w, DType w_dtype, int64_t n, int64_t k);
  int64_t n() const { return n_; }
  int64_t k() const { return k_; }
  size_t bytes() const;
  const float* panels() const { return panels_.get(); }

 private:
  int64_t n_ = 0, k_ = 0;
  std::unique_ptr<float, decltype(&std::free)> panels_{nullptr, &std::free};
};

// linear_product with a packed weight.
void linear_product_packed(const float* a, int64_t lda, const PackedLinearWeight& w,
                           const float* bias, float* c, int64_t m);

// The storage of a packed weight's tensor: ops::linear finds the panels through
// Tensor::packed_linear(); element access (data<T>()) refuses it.
class PackedLinearStorage final : public Storage {
 public:
  explicit PackedLinearStorage(std::shared_ptr<const PackedLinearWeight> weight)
      : weight_(std::move(weight)) {}
  std::byte* data() override {
    return reinterpret_cast<std::byte*>(const_cast<float*>(weight_->panels()));
  }
  size_t size() const override { return weight_->bytes(); }
  const PackedLinearWeight* packed_linear() const override { return weight_.get(); }

 private:
  std::shared_ptr<const PackedLinearWeight> weight_;
};

}  // namespace mmgen::cpu
