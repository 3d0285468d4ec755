#include "core/cuda/gemm.h"

#include <cublasLt.h>

#include <map>
#include <mutex>
#include <tuple>

#include "core/cuda/cuda_check.h"
#include "core/cuda/device_memory.h"
#include "core/error.h"

namespace mmgen::cuda {
namespace {

constexpr size_t kWorkspaceBytes = size_t(32) << 20;

// One per shape: descriptors and the algorithm cuBLASLt's heuristic picked, reused across calls
// (a denoising loop repeats the same few shapes thousands of times).
struct Plan {
  cublasLtMatmulDesc_t operation = nullptr;
  cublasLtMatrixLayout_t w_layout = nullptr, x_layout = nullptr, y_layout = nullptr;
  cublasLtMatmulAlgo_t algorithm{};
};

class GemmContext {
 public:
  static GemmContext& instance() {
    static GemmContext context;
    return context;
  }

  const Plan& plan(int64_t m, int64_t n, int64_t k, GemmOutput output, bool bias,
                   GemmActivation activation) {
    std::lock_guard lock(mutex_);
    const auto key = std::make_tuple(m, n, k, int(output), bias, int(activation));
    auto found = plans_.find(key);
    if (found != plans_.end()) return found->second;
    Plan plan;
    const cudaDataType_t y_type = output == GemmOutput::BF16 ? CUDA_R_16BF : CUDA_R_32F;
    MMGEN_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan.operation, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    // Column-major view: yᵀ[n, m] = w[n, k] (stored [k, n], transposed) · xᵀ[k, m].
    const cublasOperation_t transpose = CUBLAS_OP_T, keep = CUBLAS_OP_N;
    MMGEN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.operation, CUBLASLT_MATMUL_DESC_TRANSA,
                                                      &transpose, sizeof(transpose)));
    MMGEN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.operation, CUBLASLT_MATMUL_DESC_TRANSB,
                                                      &keep, sizeof(keep)));
    if (bias) {
      const cublasLtEpilogue_t epilogue = activation == GemmActivation::GeluTanh
                                              ? CUBLASLT_EPILOGUE_GELU_BIAS
                                              : CUBLASLT_EPILOGUE_BIAS;
      MMGEN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
          plan.operation, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
      MMGEN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
          plan.operation, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &y_type, sizeof(y_type)));
    }
    MMGEN_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.w_layout, CUDA_R_16BF, k, n, k));
    MMGEN_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.x_layout, CUDA_R_16BF, k, m, k));
    MMGEN_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.y_layout, y_type, n, m, n));
    cublasLtMatmulPreference_t preference;
    MMGEN_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&preference));
    MMGEN_CUBLAS_CHECK(
        cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                             &kWorkspaceBytes, sizeof(kWorkspaceBytes)));
    cublasLtMatmulHeuristicResult_t result{};
    int found_count = 0;
    MMGEN_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(handle_, plan.operation, plan.w_layout,
                                                      plan.x_layout, plan.y_layout, plan.y_layout,
                                                      preference, 1, &result, &found_count));
    cublasLtMatmulPreferenceDestroy(preference);
    check(found_count > 0, "cuBLASLt has no algorithm for a {}x{}x{} bf16 product", m, n, k);
    plan.algorithm = result.algo;
    return plans_.emplace(key, plan).first->second;
  }

  cublasLtHandle_t handle() const { return handle_; }
  void* workspace() const { return workspace_.data(); }

 private:
  GemmContext() : workspace_(kWorkspaceBytes) { MMGEN_CUBLAS_CHECK(cublasLtCreate(&handle_)); }

  std::mutex mutex_;
  cublasLtHandle_t handle_ = nullptr;
  DeviceBuffer workspace_;
  std::map<std::tuple<int64_t, int64_t, int64_t, int, bool, int>, Plan> plans_;
};

}  // namespace

void linear_bf16(const void* x, const void* w, const void* bias, void* y, int64_t m, int64_t n,
                 int64_t k, GemmOutput output, cudaStream_t stream, GemmActivation activation) {
  check(m > 0 && n > 0 && k > 0, "GPU linear: empty product {}x{}x{}", m, n, k);
  check(activation == GemmActivation::None || bias != nullptr,
        "GPU linear: an activation epilogue needs a bias");
  GemmContext& context = GemmContext::instance();
  const Plan& plan = context.plan(m, n, k, output, bias != nullptr, activation);
  if (bias)
    MMGEN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
        plan.operation, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  const float one = 1.0f, zero = 0.0f;
  MMGEN_CUBLAS_CHECK(cublasLtMatmul(context.handle(), plan.operation, &one, w, plan.w_layout, x,
                                    plan.x_layout, &zero, y, plan.y_layout, y, plan.y_layout,
                                    &plan.algorithm, context.workspace(), kWorkspaceBytes, stream));
}

}  // namespace mmgen::cuda
