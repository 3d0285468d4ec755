#include "core/cuda/gemm.h"

#include <cublasLt.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/cuda/device_memory.h"
#include "core/error.h"

namespace mmgen::cuda {
namespace {

constexpr size_t kWorkspaceBytes = size_t(32) << 20;

// Products of at least this many multiply-adds are timed on first use (below it a product is
// short enough that launch cost, not the algorithm, decides).
constexpr double kTunedMacs = double(int64_t(1) << 33);
constexpr int kCandidates = 8;

// One per shape: descriptors and the algorithm used, reused across calls (a denoising loop
// repeats the same few shapes thousands of times). cuBLASLt's heuristic ranks candidates by a
// model of the GPU; its first pick ran Z-Image's 4160x3840x3840 q/k/v products at 690 TFLOP/s on
// an H100 while its w1/w3 shapes reached 757, so a large product times the heuristic's first
// kCandidates algorithms once, on its first call with real operands, and keeps the fastest
// (MMGEN_GEMM_AUTOTUNE=0 keeps the heuristic's first pick: with tuning, two processes may pick
// different algorithms whose sums differ in the last bits).
struct Plan {
  cublasLtMatmulDesc_t operation = nullptr;
  cublasLtMatrixLayout_t w_layout = nullptr, x_layout = nullptr, y_layout = nullptr;
  cublasLtMatmulAlgo_t algorithm{};
  std::vector<cublasLtMatmulAlgo_t> candidates;  // emptied once timed
};

bool autotune_enabled() {
  static const bool enabled = [] {
    const char* value = std::getenv("MMGEN_GEMM_AUTOTUNE");
    return !(value && std::string(value) == "0");
  }();
  return enabled;
}

class GemmContext {
 public:
  static GemmContext& instance() {
    static GemmContext context;
    return context;
  }

  // `batch` > 1: that many products of one x (stride 0) with weights and outputs laid one after
  // another (strides n·k and m·n).
  // `fp8`: x and w are e4m3 with a scale each (set per call), the rest as for bf16 operands;
  // `fp8_rows`: a scale per row of x and per row of w instead (cuBLASLt's outer-vector scaling).
  Plan& plan(int64_t m, int64_t n, int64_t k, GemmOutput output, bool bias,
             GemmActivation activation, int64_t batch, bool fp8 = false, bool fp8_rows = false) {
    std::lock_guard lock(mutex_);
    const auto key =
        std::make_tuple(m, n, k, int(output), bias, int(activation), batch, fp8, fp8_rows);
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
    if (fp8) {
      if (fp8_rows) {  // A (the weight) scales its n rows, B (the input) its m columns
        const cublasLtMatmulMatrixScale_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
        for (const auto attribute :
             {CUBLASLT_MATMUL_DESC_A_SCALE_MODE, CUBLASLT_MATMUL_DESC_B_SCALE_MODE})
          MMGEN_CUBLAS_CHECK(
              cublasLtMatmulDescSetAttribute(plan.operation, attribute, &mode, sizeof(mode)));
      }
      // The heuristic offers scaled FP8 algorithms only when the scales are set: any device
      // address stands in here; each call sets its own (linear_fp8).
      const void* stand_in = workspace_.data();
      for (const auto attribute :
           {CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER})
        MMGEN_CUBLAS_CHECK(
            cublasLtMatmulDescSetAttribute(plan.operation, attribute, &stand_in, sizeof(stand_in)));
    }
    const cudaDataType_t operand = fp8 ? CUDA_R_8F_E4M3 : CUDA_R_16BF;
    MMGEN_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.w_layout, operand, k, n, k));
    MMGEN_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.x_layout, operand, k, m, k));
    MMGEN_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.y_layout, y_type, n, m, n));
    if (batch > 1) {
      set_batch(plan.w_layout, batch, n * k);
      set_batch(plan.x_layout, batch, 0);
      set_batch(plan.y_layout, batch, m * n);
    }
    choose_algorithm(plan, double(batch) * double(m) * double(n) * double(k), batch, m, n, k);
    return plans_.emplace(key, plan).first->second;
  }

  // A general strided product (matmul_bf16): cuBLASLt's A is the right factor b, its B the left
  // factor a, so the column-major result is yᵀ = bᵀ·aᵀ, which is y row-major.
  Plan& strided_plan(const MatrixOperand& a, const MatrixOperand& b, int64_t y_row_stride,
                     int64_t y_batch_stride, int64_t m, int64_t n, int64_t k, int64_t batch,
                     GemmOutput output, bool bias) {
    std::lock_guard lock(mutex_);
    const auto key = std::make_tuple(m, n, k, int(output), batch, a.row_stride, a.batch_stride,
                                     a.transposed, b.row_stride, b.batch_stride, b.transposed,
                                     y_row_stride, y_batch_stride, bias);
    auto found = strided_plans_.find(key);
    if (found != strided_plans_.end()) return found->second;
    Plan plan;
    const cudaDataType_t y_type = output == GemmOutput::BF16 ? CUDA_R_16BF : CUDA_R_32F;
    MMGEN_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan.operation, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t op_b = b.transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t op_a = a.transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
    MMGEN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.operation, CUBLASLT_MATMUL_DESC_TRANSA,
                                                      &op_b, sizeof(op_b)));
    MMGEN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.operation, CUBLASLT_MATMUL_DESC_TRANSB,
                                                      &op_a, sizeof(op_a)));
    if (bias) {  // a bias per output column in y's dtype, the same for every product of the batch
      const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
      MMGEN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
          plan.operation, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
    }
    // Stored column-major: b (k x n row-major) is [n, k]; transposed storage is [k, n].
    MMGEN_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.w_layout, CUDA_R_16BF, b.transposed ? k : n,
                                                  b.transposed ? n : k, b.row_stride));
    MMGEN_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.x_layout, CUDA_R_16BF, a.transposed ? m : k,
                                                  a.transposed ? k : m, a.row_stride));
    MMGEN_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.y_layout, y_type, n, m, y_row_stride));
    if (batch > 1) {
      set_batch(plan.w_layout, batch, b.batch_stride);
      set_batch(plan.x_layout, batch, a.batch_stride);
      set_batch(plan.y_layout, batch, y_batch_stride);
    }
    choose_algorithm(plan, double(batch) * double(m) * double(n) * double(k), batch, m, n, k);
    return strided_plans_.emplace(key, plan).first->second;
  }

  cublasLtHandle_t handle() const { return handle_; }
  void* workspace() const { return workspace_.data(); }
  std::mutex& mutex() { return mutex_; }

 private:
  static void set_batch(cublasLtMatrixLayout_t layout, int64_t batch, int64_t stride) {
    const int32_t count = int32_t(batch);
    MMGEN_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                                                        &count, sizeof(count)));
    MMGEN_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(
        layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)));
  }

  // A product's algorithm: cuBLASLt's first pick, with the next candidates kept for timing when
  // the product is large (see kTunedMacs). Called with the mutex held.
  void choose_algorithm(Plan& plan, double macs, int64_t batch, int64_t m, int64_t n, int64_t k) {
    cublasLtMatmulPreference_t preference;
    MMGEN_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&preference));
    MMGEN_CUBLAS_CHECK(
        cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                             &kWorkspaceBytes, sizeof(kWorkspaceBytes)));
    const bool tuned = autotune_enabled() && macs >= kTunedMacs;
    cublasLtMatmulHeuristicResult_t results[kCandidates] = {};
    int found_count = 0;
    MMGEN_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(
        handle_, plan.operation, plan.w_layout, plan.x_layout, plan.y_layout, plan.y_layout,
        preference, tuned ? kCandidates : 1, results, &found_count));
    cublasLtMatmulPreferenceDestroy(preference);
    check(found_count > 0, "cuBLASLt has no algorithm for {} {}x{}x{} product(s) of these operands",
          batch, m, n, k);
    plan.algorithm = results[0].algo;
    if (found_count > 1)
      for (int i = 0; i < found_count; ++i) plan.candidates.push_back(results[i].algo);
  }

  GemmContext() : workspace_(kWorkspaceBytes) { MMGEN_CUBLAS_CHECK(cublasLtCreate(&handle_)); }

  std::mutex mutex_;
  cublasLtHandle_t handle_ = nullptr;
  DeviceBuffer workspace_;
  std::map<std::tuple<int64_t, int64_t, int64_t, int, bool, int, int64_t, bool, bool>, Plan> plans_;
  std::map<std::tuple<int64_t, int64_t, int64_t, int, int64_t, int64_t, int64_t, bool, int64_t,
                      int64_t, bool, int64_t, int64_t, bool>,
           Plan>
      strided_plans_;
};

// Runs `plan` (timing its candidates first if it still has them).
// `accumulate` (may be null): y = product + accumulate, a matrix of y's layout and type.
void run_plan(Plan& plan, const void* x, const void* w, void* y, cudaStream_t stream,
              const void* accumulate = nullptr) {
  GemmContext& context = GemmContext::instance();
  const float one = 1.0f, zero = 0.0f;
  const void* c = accumulate ? accumulate : y;
  const auto run = [&](const cublasLtMatmulAlgo_t& algorithm) {
    return cublasLtMatmul(context.handle(), plan.operation, &one, w, plan.w_layout, x,
                          plan.x_layout, accumulate ? &one : &zero, c, plan.y_layout, y,
                          plan.y_layout, &algorithm, context.workspace(), kWorkspaceBytes, stream);
  };
  {
    std::lock_guard lock(context.mutex());
    // Timing runs the product several times: in place it would add `accumulate` each time.
    if (accumulate == y) plan.candidates.clear();
    if (!plan.candidates.empty()) {
      // Each candidate once to warm it (one that fails to launch is dropped), then two rounds of
      // timings, the second in reverse order, each of kRunsPerTiming runs between two events; a
      // candidate's score is its better round. The candidates are timed on the product's first
      // call, often while an idle GPU's clock is still rising, so one round in one order favours
      // the later candidates. (With one round of three runs, one H100 kept an algorithm for
      // Z-Image's batched w1/w3 that ran 10% slower than another machine's pick.) The chosen
      // algorithm's result is written last, below.
      constexpr int kRunsPerTiming = 3;
      std::vector<cublasLtMatmulAlgo_t> working;
      for (const cublasLtMatmulAlgo_t& candidate : plan.candidates)
        if (run(candidate) == CUBLAS_STATUS_SUCCESS) working.push_back(candidate);
      cudaEvent_t start, stop;
      MMGEN_CUDA_CHECK(cudaEventCreate(&start));
      MMGEN_CUDA_CHECK(cudaEventCreate(&stop));
      std::vector<float> best(working.size(), 0.0f);
      for (int round = 0; round < 2; ++round)
        for (size_t n = 0; n < working.size(); ++n) {
          const size_t i = round == 0 ? n : working.size() - 1 - n;
          MMGEN_CUDA_CHECK(cudaEventRecord(start, stream));
          for (int r = 0; r < kRunsPerTiming; ++r) MMGEN_CUBLAS_CHECK(run(working[i]));
          MMGEN_CUDA_CHECK(cudaEventRecord(stop, stream));
          MMGEN_CUDA_CHECK(cudaEventSynchronize(stop));
          float ms = 0;
          MMGEN_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
          if (round == 0 || ms < best[i]) best[i] = ms;
        }
      float fastest = 0;
      for (size_t i = 0; i < working.size(); ++i)
        if (i == 0 || best[i] < fastest) fastest = best[i], plan.algorithm = working[i];
      cudaEventDestroy(start);
      cudaEventDestroy(stop);
      plan.candidates.clear();
    }
  }
  MMGEN_CUBLAS_CHECK(run(plan.algorithm));
}

}  // namespace

void linear_bf16(const void* x, const void* w, const void* bias, void* y, int64_t m, int64_t n,
                 int64_t k, GemmOutput output, cudaStream_t stream, GemmActivation activation) {
  check(m > 0 && n > 0 && k > 0, "GPU linear: empty product {}x{}x{}", m, n, k);
  check(activation == GemmActivation::None || bias != nullptr,
        "GPU linear: an activation epilogue needs a bias");
  Plan& plan =
      GemmContext::instance().plan(m, n, k, output, bias != nullptr, activation, /*batch=*/1);
  if (bias)
    MMGEN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
        plan.operation, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  run_plan(plan, x, w, y, stream);
}

void linear_fp8(const void* x, const float* x_scale, const void* w, const float* w_scale,
                const void* bias, void* y, int64_t m, int64_t n, int64_t k, GemmOutput output,
                cudaStream_t stream, GemmActivation activation, Fp8Scales scales) {
  check(m > 0 && n > 0 && k > 0, "GPU FP8 linear: empty product {}x{}x{}", m, n, k);
  // cuBLASLt's e4m3 products run from compute capability 8.9 (Ada; Hopper's are the fast ones).
  static const int capability = [] {
    int device = 0, major = 0, minor = 0;
    MMGEN_CUDA_CHECK(cudaGetDevice(&device));
    MMGEN_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    MMGEN_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
    return 10 * major + minor;
  }();
  check(capability >= 89,
        "GPU FP8 linear: this GPU (compute capability {}.{}) has no e4m3 tensor-core products; "
        "they need 8.9 or newer (Ada, Hopper): use --gpu-matmul-precision bf16",
        capability / 10, capability % 10);
  check(k % 16 == 0 && n % 8 == 0,
        "GPU FP8 linear: {} inputs and {} outputs; e4m3 products need inputs in multiples of 16 "
        "and outputs in multiples of 8",
        k, n);
  check(activation == GemmActivation::None || bias != nullptr,
        "GPU FP8 linear: an activation epilogue needs a bias");
  check(reinterpret_cast<uintptr_t>(x_scale) % 16 == 0 &&
            reinterpret_cast<uintptr_t>(w_scale) % 16 == 0,
        "GPU FP8 linear: the scales must lie on 16-byte boundaries (cuBLASLt has no algorithm for "
        "others)");
  Plan& plan = GemmContext::instance().plan(m, n, k, output, bias != nullptr, activation,
                                            /*batch=*/1, /*fp8=*/true, scales == Fp8Scales::PerRow);
  // cuBLASLt's A is the weight, its B the input (see plan()).
  MMGEN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
      plan.operation, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &w_scale, sizeof(w_scale)));
  MMGEN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
      plan.operation, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &x_scale, sizeof(x_scale)));
  if (bias)
    MMGEN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
        plan.operation, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  run_plan(plan, x, w, y, stream);
}

void linear_bf16_batched(const void* x, const void* w, void* y, int64_t m, int64_t n, int64_t k,
                         int64_t batch, GemmOutput output, cudaStream_t stream) {
  check(m > 0 && n > 0 && k > 0 && batch > 0, "GPU linear: empty product {} x {}x{}x{}", batch, m,
        n, k);
  run_plan(GemmContext::instance().plan(m, n, k, output, false, GemmActivation::None, batch), x, w,
           y, stream);
}

void matmul_bf16(const MatrixOperand& a, const MatrixOperand& b, void* y, int64_t y_row_stride,
                 int64_t y_batch_stride, int64_t m, int64_t n, int64_t k, int64_t batch,
                 GemmOutput output, cudaStream_t stream, const MatmulEpilogue& epilogue) {
  check(m > 0 && n > 0 && k > 0 && batch > 0, "GPU matmul: empty product {} x {}x{}x{}", batch, m,
        n, k);
  check(a.row_stride >= (a.transposed ? m : k) && b.row_stride >= (b.transposed ? k : n) &&
            y_row_stride >= n,
        "GPU matmul: a row stride is shorter than its row");
  Plan& plan = GemmContext::instance().strided_plan(a, b, y_row_stride, y_batch_stride, m, n, k,
                                                    batch, output, epilogue.bias != nullptr);
  if (epilogue.bias)
    MMGEN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
        plan.operation, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &epilogue.bias, sizeof(epilogue.bias)));
  run_plan(plan, a.data, b.data, y, stream, epilogue.accumulate);
}

}  // namespace mmgen::cuda
