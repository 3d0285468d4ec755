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

namespace mmgen::cpu {

// The products' precision, process-wide like torch's fp32 matmul precision (set before a run, not
// during one). F32, the default, is the parity path above. BF16 rounds the input and the weight to
// bfloat16 (nearest even) and sums their exact products in float32 chains, two steps of k per
// instruction (AVX-512 BF16's vdpbf16ps); each output still does not depend on the rows beside it
// or the thread count.
enum class ProductPrecision { F32, BF16 };
// Whether this build and CPU have the bf16 products (an AVX-512 BF16 build).
bool bf16_products_available();
// An Error for BF16 where bf16_products_available() is false.
void set_product_precision(ProductPrecision precision);
ProductPrecision product_precision();

// `a` has rows of `lda` floats; `c` is [m, n] contiguous; `w` is [n, k] contiguous in `w_dtype`;
// `bias` is n floats or null. Runs on up to omp_get_max_threads() threads, fewer for small
// products.
void linear_product(const float* a, int64_t lda, const void* w, DType w_dtype, const float* bias,
                    float* c, int64_t m, int64_t k, int64_t n);

// A weight packed once for the float32 products, for callers that multiply the same weight many
// times in a row (a convolution's bands of output rows): linear_product(a, ..., w, dtype, ...)
// packs per call instead. Products with it are float32 whatever product_precision() says, and give
// the same bits as the unpacked call.
class PackedWeight {
 public:
  // `w` [n, k] as linear_product takes it (any of its weight types); packed on up to
  // omp_get_max_threads() threads.
  PackedWeight(const void* w, DType w_dtype, int64_t n, int64_t k);
  int64_t n() const { return n_; }
  int64_t k() const { return k_; }
  const float* panels() const { return panels_.get(); }

 private:
  struct Free {
    void operator()(float* p) const { std::free(p); }
  };
  int64_t n_, k_;
  std::unique_ptr<float, Free> panels_;
};

// c[m, w.n()] = a · wᵀ (+ bias): linear_product above with a weight packed beforehand.
void linear_product(const float* a, int64_t lda, const PackedWeight& w, const float* bias, float* c,
                    int64_t m);

// Input rows whose columns come in segments read from different places: column i of row r is
// a[r · lda + offsets[i / segment] + i % segment]. A convolution over a zero-padded channels-last
// frame reads its rows this way, with no im2col copy: each kernel tap is a segment of the input's
// channels, offset by the tap's pixel shift, and consecutive pixels are lda = channels apart.
struct SegmentedRows {
  const float* a;
  int64_t lda;
  int64_t segment;         // columns per segment; it divides k
  const int64_t* offsets;  // k / segment of them
};

// The product over segmented rows: the same chains, in the same order, as over the rows copied out.
void linear_product(const SegmentedRows& a, const PackedWeight& w, const float* bias, float* c,
                    int64_t m);

}  // namespace mmgen::cpu
