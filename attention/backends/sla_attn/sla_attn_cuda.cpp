// sla_attn on the GPU, attention/kernels/sla_core.h's algorithm in the tokens' own order (SLA's
// blocks are runs of the sequence, so nothing is regrouped):
//   block map: block means of q (block_q rows) and of k (block_k rows, minus the mean of all
//              keys: smooth-k), their scores and each query block's top key blocks (the VSA
//              selection kernel, rows and columns of different counts; ties to the lower block);
//   sparse:    the block-sparse FlashAttention kernel over those lists (block_q 128: a list per
//              query block; 64: per half; block_k a multiple of 64: each SLA block is that many
//              kernel blocks); for SageSLA (int8_qk) its INT8 form, q·scale quantised per 32-row
//              slice and the smoothed k per SLA key block, as attention/kernels/sla_quant.h does;
//   linear:    only with the layer's proj_l weights (else it is zero, as on the CPU): φ(q) and
//              φ(k) along head_dim, φ(k)ᵀv and Σφ(k) per head (cuBLASLt reading each head in
//              place in the activations' layout, bf16 in, float32 sums), proj_l folded into φ(k)ᵀv
//              per head, φ(q) divided by its row's normaliser 1e-5 + φ(q)·Σφ(k) (per row, so it
//              commutes with both products), and the last product adding the bias and the
//              sparse output in its epilogue.
#include "attention/backends/sla_attn/sla_attn_cuda.h"

#include <spdlog/spdlog.h>

#include <atomic>

#include "attention/backends/sla_attn/sla_kernels.h"
#include "attention/backends/video_sparse_attn/vsa_select.h"
#include "attention/kernels/sla_core.h"
#include "attention/kernels/sla_quant.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/gemm.h"
#include "core/error.h"

namespace mmgen::attention::sla_attn {

namespace {

using namespace mmgen::cuda;

class SlaCuda final : public SparseSelfAttentionCuda {
 public:
  explicit SlaCuda(const sla::SlaSettings& settings) : settings_(settings) {
    check((settings.block_q == 64 || settings.block_q == kFlashBlockM) &&
              settings.block_k % kFlashBlockN == 0,
          "sla_attn / sage_sla_attn on the GPU: block_q must be 64 or 128 and block_k a multiple "
          "of 64 (got {} "
          "and {}); use --device cpu for other block sizes",
          settings.block_q, settings.block_k);
  }

  std::string_view name() const override {
    return settings_.int8_qk ? "sage_sla_attn" : "sla_attn";
  }

  void run(const SelfAttentionCall& call) override {
    check(flash_attention_supports_head_dim(call.head_dim),
          "{} on the GPU: head size {} is not compiled in (64 and 128 are); use --device cpu",
          name(), call.head_dim);
    const int64_t B = call.batch, S = call.tokens, H = call.heads, D = call.head_dim;
    const int64_t pairs = B * H, width = H * D;
    const int64_t nq = (S + settings_.block_q - 1) / settings_.block_q;
    const int64_t nk = (S + settings_.block_k - 1) / settings_.block_k;
    const int64_t kept = sla::kept_blocks(settings_.topk, nk);
    check(nk <= vsa_max_cubes(), "sla_attn on the GPU: {} key blocks exceed the {} it selects from",
          nk, vsa_max_cubes());
    start_steps();

    // Block map.
    DeviceBuffer pq(size_t(pairs * nq * D) * 4), pk(size_t(pairs * nk * D) * 4),
        selected(size_t(pairs * nq * kept) * 4);
    sla_block_means(call.q, width, pq.as<float>(), B, S, H, D, settings_.block_q);
    sla_block_means(call.k, width, pk.as<float>(), B, S, H, D, settings_.block_k);
    sla_smooth_key_means(pk.as<float>(), pairs, nk, D, S, settings_.block_k);
    vsa_select(pq.as<float>(), pk.as<float>(), nullptr, 1.0f, B, H, nq, nk, D, kept,
               selected.as<int32_t>(), nullptr);
    const int64_t factor = settings_.block_k / kFlashBlockN, per_list = kept * factor;
    DeviceBuffer indices;
    if (factor > 1) {
      indices = DeviceBuffer(size_t(pairs * nq * per_list) * 4);
      sla_expand_lists(selected.as<int32_t>(), pairs * nq, kept, factor, indices.as<int32_t>());
    }
    if (offsets_lists_ != pairs * nq || offsets_per_list_ != per_list) {
      std::vector<int32_t> offsets(size_t(pairs * nq + 1));
      for (size_t i = 0; i < offsets.size(); ++i) offsets[i] = int32_t(int64_t(i) * per_list);
      offsets_ = upload_vector(offsets);
      offsets_lists_ = pairs * nq, offsets_per_list_ = per_list;
    }
    mark_step("block map");

    // Sparse branch, into the output (or beside it when the linear branch follows).
    const Tensor* weight = find(call.weights, "proj_l.weight");
    const Tensor* bias = find(call.weights, "proj_l.bias");
    DeviceBuffer sparse_out;
    if (weight) sparse_out = DeviceBuffer(size_t(B * S * width) * 2);
    FlashAttentionArgs args = dense_args(call);
    if (weight) args.out = sparse_out.data();
    args.block_offsets = offsets_.as<int32_t>();
    args.block_indices = factor > 1 ? indices.as<int32_t>() : selected.as<int32_t>();
    args.lists_per_half = settings_.block_q == 64;
    Int8Operands operands;
    if (settings_.int8_qk) {
      // sla_quant.h: q·scale per 32-row slice of each query block (block_q is 64 or 128, so the
      // slices are every 32 rows), the smoothed k per SLA key block; the scale is inside q.
      Int8QuantizeArgs query, key;
      query.arithmetic = key.arithmetic = Int8Arithmetic::Sla;
      query.run = sla::kQueryWarpRows, query.multiplier = call.scale;
      key.run = settings_.block_k, key.smooth = true;
      operands = quantize_operands(call, query, key, args);
      args.scale = 1.0f;
      mark_step("quantise q and k");
    }
    run_kernel(args);
    mark_step("sparse pass (kernel)");
    if (counting_) count(selected, pairs, nq, nk, kept, S);

    if (!weight) {
      static std::atomic<bool> warned{false};
      if (!warned.exchange(true))
        spdlog::warn(
            "sla_attn: no proj_l weights for this layer (not an SLA-trained checkpoint); the "
            "linear branch contributes zero, as in an untrained SLA layer: pure block-sparse "
            "attention");
      return;
    }
    linear_branch(call, *weight, bias, sparse_out);
    mark_step("linear branch");
  }

 private:
  static const Tensor* find(const LayerWeights* weights, const std::string& name) {
    if (!weights) return nullptr;
    const auto it = weights->find(name);
    return it == weights->end() ? nullptr : &it->second;
  }

  void linear_branch(const SelfAttentionCall& call, const Tensor& weight, const Tensor* bias,
                     const DeviceBuffer& sparse_out) {
    const int64_t B = call.batch, S = call.tokens, H = call.heads, D = call.head_dim;
    const int64_t pairs = B * H, width = H * D;
    check(weight.device() == Device::CUDA && weight.dim() == 2 && weight.size(0) == D &&
              weight.size(1) == D,
          "sla_attn on the GPU: proj_l.weight must be a [{}, {}] GPU tensor, got {} on {}", D, D,
          shape_string(weight.shape()), device_name(weight.device()));
    check(!bias || (bias->device() == Device::CUDA && bias->numel() == D),
          "sla_attn on the GPU: proj_l.bias must be a [{}] GPU tensor", D);
    // The projection's operands as the products take them: bf16 weight and bias (the bias is
    // added in the last product's epilogue, which takes it in the output's dtype).
    const Tensor weight_bf16 = weight.to(DType::BF16);
    const Tensor bias_bf16 = bias ? bias->to(DType::BF16) : Tensor();
    const SlaFeature map = settings_.feature_map == sla::FeatureMap::Softmax ? SlaFeature::Softmax
                           : settings_.feature_map == sla::FeatureMap::Elu   ? SlaFeature::Elu
                                                                             : SlaFeature::Relu;
    // Every operand stays in the [B, S, H·D] layout of the activations: the products read one
    // head of it in place (row stride H·D, heads D apart), so nothing is transposed or copied.
    DeviceBuffer phi_q(size_t(B * S * width) * 2), phi_k(size_t(B * S * width) * 2),
        scratch(size_t(sla_column_sums_scratch(B, S, width)) * 4), key_sums(size_t(pairs * D) * 4),
        kv(size_t(pairs * D * D) * 2), folded(size_t(pairs * D * D) * 2);
    sla_feature_map(call.k, width, B, S, H, D, map, nullptr, phi_k.as<uint16_t>());
    sla_column_sums(phi_k.as<uint16_t>(), B, S, width, scratch.as<float>(), key_sums.as<float>());
    // φ(q) already divided by its row's normaliser (which is per row, so it commutes with both
    // products below).
    sla_feature_map(call.q, width, B, S, H, D, map, key_sums.as<float>(), phi_q.as<uint16_t>());
    for (int64_t b = 0; b < B; ++b) {
      // φ(k)ᵀv [D, D] per head (bf16 for the next product): φ(k)ᵀ is the stored φ(k) transposed.
      const MatrixOperand phi_k_t{phi_k.as<uint16_t>() + b * S * width, width, D, true};
      const MatrixOperand values{static_cast<const uint16_t*>(call.v) + b * S * width, width, D};
      matmul_bf16(phi_k_t, values, kv.as<uint16_t>() + b * H * D * D, D, D * D, D, D, S, H,
                  GemmOutput::BF16);
    }
    // proj_l folded into it: (φ(k)ᵀv · Wᵀ)ᵀ = W · (φ(k)ᵀv)ᵀ per head, one batched product. The
    // projection then costs D² per token and head once per call instead of a pass over every
    // token's output.
    linear_bf16_batched(weight_bf16.raw(), kv.data(), folded.data(), D, D, D, pairs,
                        GemmOutput::BF16);
    for (int64_t b = 0; b < B; ++b) {
      // out = φ(q)/norm · foldedᵀ + bias + the sparse output, per head, the sum and bias in the
      // product's epilogue: the linear branch never goes to memory on its own.
      const int64_t at = b * S * width;
      const MatrixOperand phi{phi_q.as<uint16_t>() + at, width, D};
      const MatrixOperand folded_t{folded.as<uint16_t>() + b * H * D * D, D, D * D, true};
      MatmulEpilogue epilogue;
      epilogue.accumulate = static_cast<const uint16_t*>(sparse_out.data()) + at;
      epilogue.bias = bias ? bias_bf16.raw() : nullptr;
      matmul_bf16(phi, folded_t, static_cast<uint16_t*>(call.out) + at, width, D, S, D, D, H,
                  GemmOutput::BF16, nullptr, epilogue);
    }
  }

  void count(const DeviceBuffer& selected, int64_t pairs, int64_t nq, int64_t nk, int64_t kept,
             int64_t tokens) {
    std::vector<int32_t> host(size_t(pairs * nq * kept));
    MMGEN_CUDA_CHECK(cudaDeviceSynchronize());
    selected.download(host.data(), host.size() * 4);
    const int64_t bq = settings_.block_q, bk = settings_.block_k;
    for (int64_t i = 0; i < pairs * nq; ++i) {
      const int64_t q_rows = std::min(bq, tokens - (i % nq) * bq);
      for (int64_t e = 0; e < kept; ++e) {
        const int64_t j = host[size_t(i * kept + e)];
        stats_.kept_pairs += double(q_rows) * double(std::min(bk, tokens - j * bk));
      }
    }
    stats_.total_pairs += double(pairs) * double(tokens) * double(tokens);
  }

  sla::SlaSettings settings_;
  DeviceBuffer offsets_;
  int64_t offsets_lists_ = 0, offsets_per_list_ = 0;
};

}  // namespace

std::unique_ptr<cuda::SparseSelfAttentionCuda> make_sla_cuda(const sla::SlaSettings& settings) {
  return std::make_unique<SlaCuda>(settings);
}

std::unique_ptr<cuda::SparseSelfAttentionCuda> make_cuda(const nlohmann::json& settings,
                                                         const BackendResources&) {
  return make_sla_cuda(sla::SlaSettings::from_json(settings, /*int8_qk=*/false));
}

}  // namespace mmgen::attention::sla_attn
