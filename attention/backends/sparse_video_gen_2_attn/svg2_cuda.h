// sparse_video_gen_2_attn's GPU half (CUDA builds only): svg2_cuda.cpp.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "attention/backend.h"
#include "attention/backends/sparse_video_gen_2_attn/svg2_attention.h"
#include "attention/backends/sparse_video_gen_2_attn/svg2_plan.h"
#include "attention/sparse_self_attention_cuda.h"
#include "core/cuda/device_memory.h"

namespace mmgen::attention::svg2 {

// What one (layer, guidance branch) keeps across steps on the device: the last centroids of
// every (batch, head), float32 [batch·heads, clusters, head_dim] per side.
struct DeviceCentroids {
  int64_t batch = 0, heads = 0, dim = 0, q_clusters = 0, k_clusters = 0;
  cuda::DeviceBuffer q_centroids, k_centroids;
  int64_t clusterings = 0;  // calls that clustered since the last reset (0: the next one is cold)
  bool last_warm_start = false;
  int64_t last_iterations = 0;  // most k-means updates any head ran in the last clustering
};

struct KmeansSide;  // one side's k-means result on the device (svg2_cuda.cpp)

class Svg2Cuda final : public cuda::SparseSelfAttentionCuda {
 public:
  explicit Svg2Cuda(Options options) : options_(options) {}
  std::string_view name() const override { return "sparse_video_gen_2_attn"; }
  void run(const cuda::SelfAttentionCall& call) override;

  // Tests: keep each sparse call's plans (labels downloaded), in the CPU backend's form
  // (Svg2Attention::last_plans), and whether the last call ran dense.
  void keep_plans(bool enabled) { keep_plans_ = enabled; }
  const std::vector<HeadPlan>& last_plans() const { return last_plans_; }
  bool last_was_dense() const { return last_dense_; }
  // The state of (layer, branch), or null before its first call.
  const DeviceCentroids* centroids(int64_t layer, int branch) const;
  // Query-cluster rows of the last sparse call whose kept pairs the device could not prove equal
  // to the CPU's (near-ties), which the host then recomputed.
  int64_t last_flagged_rows() const { return last_flagged_rows_; }

 private:
  void cluster(const cuda::SelfAttentionCall& call, DeviceCentroids& state, KmeansSide* queries,
               KmeansSide* keys);
  void patch_rows_on_host(const cuda::SelfAttentionCall& call, const DeviceCentroids& state,
                          const KmeansSide& keys, const cuda::DeviceBuffer& flags,
                          cuda::DeviceBuffer& selected);

  Options options_;
  std::mutex mutex_;
  std::map<std::pair<int64_t, int>, DeviceCentroids> states_;  // by (layer, branch 0 or 1)
  bool keep_plans_ = false, last_dense_ = true;
  int64_t last_flagged_rows_ = 0;
  std::vector<HeadPlan> last_plans_;
};

// The descriptor's CUDA factory: `settings` validated, the plan's resources.
std::unique_ptr<cuda::SparseSelfAttentionCuda> make_cuda(const nlohmann::json& settings,
                                                         const BackendResources& resources);

}  // namespace mmgen::attention::svg2
