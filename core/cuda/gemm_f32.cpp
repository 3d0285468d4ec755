#include "core/cuda/gemm_f32.h"

#include <cublasLt.h>

#include <map>
#include <mutex>
#include <tuple>
#include <utility>

#include "core/cuda/cuda_check.h"
#include "core/cuda/device_memory.h"
#include "core/error.h"

namespace mmgen::cuda {
namespace {

constexpr size_t kWorkspaceBytes = size_t(32) << 20;

struct Plan {
  cublasLtMatmulDesc_t operation = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algorithm{};
};

using Key = std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, bool,
                       int64_t, int64_t, int64_t, int64_t>;

// Descriptors and the heuristic's algorithm per shape, kept: a decode repeats a few shapes.
class Context {
 public:
  static Context& instance() {
    static Context context;
    return context;
  }

  const Plan& plan(const Key& key) {
    std::lock_guard lock(mutex_);
    auto found = plans_.find(key);
    if (found != plans_.end()) return found->second;
    const auto [transpose_a, transpose_b, m, n, k, lda, ldb, ldc, tf32, batch, stride_a, stride_b,
                stride_c] = key;
    Plan plan;
    MMGEN_CUBLAS_CHECK(cublasLtMatmulDescCreate(
        &plan.operation, tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t op_a = transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t op_b = transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    MMGEN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.operation, CUBLASLT_MATMUL_DESC_TRANSA,
                                                      &op_a, sizeof(op_a)));
    MMGEN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.operation, CUBLASLT_MATMUL_DESC_TRANSB,
                                                      &op_b, sizeof(op_b)));
    MMGEN_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(
        &plan.a, CUDA_R_32F, uint64_t(transpose_a ? k : m), uint64_t(transpose_a ? m : k), lda));
    MMGEN_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(
        &plan.b, CUDA_R_32F, uint64_t(transpose_b ? n : k), uint64_t(transpose_b ? k : n), ldb));
    MMGEN_CUBLAS_CHECK(
        cublasLtMatrixLayoutCreate(&plan.c, CUDA_R_32F, uint64_t(m), uint64_t(n), ldc));
    if (batch > 1) {
      const int32_t count = int32_t(batch);
      const std::pair<cublasLtMatrixLayout_t, int64_t> layouts[3] = {
          {plan.a, stride_a}, {plan.b, stride_b}, {plan.c, stride_c}};
      for (const auto& [layout, stride] : layouts) {
        MMGEN_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(
            layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
        MMGEN_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(
            layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)));
      }
    }
    cublasLtMatmulPreference_t preference;
    MMGEN_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&preference));
    MMGEN_CUBLAS_CHECK(
        cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                             &kWorkspaceBytes, sizeof(kWorkspaceBytes)));
    cublasLtMatmulHeuristicResult_t result{};
    int found_count = 0;
    MMGEN_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(handle_, plan.operation, plan.a, plan.b,
                                                      plan.c, plan.c, preference, 1, &result,
                                                      &found_count));
    cublasLtMatmulPreferenceDestroy(preference);
    check(found_count > 0, "cuBLASLt has no algorithm for a {}x{}x{} float32 product", m, n, k);
    plan.algorithm = result.algo;
    return plans_.emplace(key, plan).first->second;
  }

  cublasLtHandle_t handle() const { return handle_; }
  void* workspace() const { return workspace_.data(); }

 private:
  Context() : workspace_(kWorkspaceBytes) { MMGEN_CUBLAS_CHECK(cublasLtCreate(&handle_)); }

  std::mutex mutex_;
  cublasLtHandle_t handle_ = nullptr;
  DeviceBuffer workspace_;
  std::map<Key, Plan> plans_;
};

}  // namespace

void gemm_f32(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, const float* a,
              int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc, bool tf32,
              cudaStream_t stream, const GemmBatch& batch) {
  check(m > 0 && n > 0 && k > 0, "GPU float32 product: empty {}x{}x{}", m, n, k);
  check(lda >= (transpose_a ? k : m) && ldb >= (transpose_b ? n : k) && ldc >= m,
        "GPU float32 product: leading dimensions {}, {}, {} too small for {}x{}x{}", lda, ldb, ldc,
        m, n, k);
  Context& context = Context::instance();
  check(batch.count >= 1, "GPU float32 product: batch of {}", batch.count);
  const Plan& plan =
      batch.count > 1
          ? context.plan({transpose_a, transpose_b, m, n, k, lda, ldb, ldc, tf32, batch.count,
                          batch.stride_a, batch.stride_b, batch.stride_c})
          : context.plan({transpose_a, transpose_b, m, n, k, lda, ldb, ldc, tf32, 1, 0, 0, 0});
  const float one = 1.0f, zero = 0.0f;
  MMGEN_CUBLAS_CHECK(cublasLtMatmul(context.handle(), plan.operation, &one, a, plan.a, b, plan.b,
                                    &zero, c, plan.c, c, plan.c, &plan.algorithm,
                                    context.workspace(), kWorkspaceBytes, stream));
}

}  // namespace mmgen::cuda
