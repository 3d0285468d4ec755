#include "attention/sparse_self_attention_cuda.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "attention/backend_config.h"
#include "attention/backends/descriptor.h"
#include "core/cuda/cuda_check.h"
#include "core/error.h"

namespace mmgen::cuda {

// Attention args over bf16 [batch, seq, heads·head_dim] buffers.
FlashAttentionArgs packed_args(const void* q, const void* k, const void* v, void* out,
                               int64_t batch, int64_t seq, int64_t heads, int64_t head_dim,
                               float scale) {
  FlashAttentionArgs args;
  args.q = q, args.k = k, args.v = v, args.out = out;
  args.batch = batch, args.heads = heads, args.seq_q = seq, args.seq_k = seq;
  args.head_dim = head_dim, args.scale = scale;
  const int64_t width = heads * head_dim;
  args.q_strides = args.k_strides = args.v_strides =
      args.out_strides = {seq * width, width, head_dim};
  return args;
}

void check_call(const char* backend, const SelfAttentionCall& call) {
  check(call.grid[0] > 0 && call.grid[1] > 0 && call.grid[2] > 0 &&
            call.tokens == call.grid[0] * call.grid[1] * call.grid[2],
        "{} on the GPU: the sequence must be the video tokens of the latent grid ({} tokens for "
        "{}x{}x{}), got {}",
        backend, call.grid[0] * call.grid[1] * call.grid[2], call.grid[0], call.grid[1],
        call.grid[2], call.tokens);
  check(flash_attention_supports_head_dim(call.head_dim),
        "{} on the GPU: head size {} is not compiled in (64 and 128 are); use --device cpu",
        backend, call.head_dim);
}

Int8Operands quantize_operands(const SelfAttentionCall& call, Int8QuantizeArgs query,
                               Int8QuantizeArgs key, FlashAttentionArgs& args) {
  const int64_t B = call.batch, S = call.tokens, H = call.heads;
  const int64_t key_blocks = (S + kFlashBlockN - 1) / kFlashBlockN;
  Int8Operands operands;
  operands.q = DeviceBuffer(size_t(B * S * H) * kInt8Width);
  operands.k = DeviceBuffer(size_t(B * S * H) * kInt8Width);
  operands.q_scales = DeviceBuffer(size_t(B * H * S) * 4);
  operands.k_scales = DeviceBuffer(size_t(B * H * key_blocks * 4) * 4);
  for (Int8QuantizeArgs* side : {&query, &key}) {
    side->row_stride = H * call.head_dim;
    side->batch = B, side->seq = S, side->heads = H, side->head_dim = call.head_dim;
  }
  query.x = call.q, query.out = operands.q.as<int8_t>(),
  query.row_scales = operands.q_scales.as<float>();
  query.block_scales = nullptr;
  key.x = call.k, key.out = operands.k.as<int8_t>(),
  key.block_scales = operands.k_scales.as<float>();
  key.row_scales = nullptr;
  int8_quantize(query);
  int8_quantize(key);
  args.q = operands.q.data(), args.k = operands.k.data();
  args.q_strides = args.k_strides = {S * H * kInt8Width, H * kInt8Width, kInt8Width};
  args.q_scales = operands.q_scales.as<float>(), args.k_scales = operands.k_scales.as<float>();
  return operands;
}

std::shared_ptr<const SlotLayout> make_layout(const attention::BoxTiling& tiling, int64_t stride) {
  auto layout = std::make_shared<SlotLayout>();
  layout->grid = tiling.grid;
  layout->boxes = tiling.box_count();
  layout->stride = stride;
  layout->slots = layout->boxes * stride;
  check(layout->slots < (int64_t(1) << 31), "GPU sparse attention: {} padded tokens is too many",
        layout->slots);
  std::vector<int32_t> token_of_slot(size_t(layout->slots), -1),
      slot_of_token(size_t(tiling.video_tokens)), key_lengths(size_t(layout->slots / kFlashBlockN));
  for (int64_t b = 0; b < layout->boxes; ++b) {
    const int64_t start = tiling.video_blocks.start[size_t(b)];
    const int64_t length = tiling.video_blocks.length[size_t(b)];
    layout->lengths.push_back(length);
    for (int64_t p = 0; p < length; ++p) {
      const int64_t token = tiling.order[size_t(start + p)], slot = b * stride + p;
      token_of_slot[size_t(slot)] = int32_t(token);
      slot_of_token[size_t(token)] = int32_t(slot);
    }
    for (int64_t j = 0; j < stride / kFlashBlockN; ++j)
      key_lengths[size_t(b * stride / kFlashBlockN + j)] =
          int32_t(std::clamp<int64_t>(length - j * kFlashBlockN, 0, kFlashBlockN));
  }
  layout->token_of_slot = upload_vector(token_of_slot);
  layout->slot_of_token = upload_vector(slot_of_token);
  layout->key_lengths = upload_vector(key_lengths);
  return layout;
}

FlashAttentionArgs dense_args(const SelfAttentionCall& call) {
  return (packed_args(call.q, call.k, call.v, call.out, call.batch, call.tokens, call.heads,
                      call.head_dim, call.scale));
}

Tensor SparseSelfAttentionCuda::forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                        float scale, const attention::AttentionContext& context,
                                        attention::AttentionStats* /*stats*/) {
  const std::string backend(name());
  check(!context.is_cross,
        "{} on the GPU: self-attention only (cross-attention layers run a dense kernel)", backend);
  check(q.dim() == 4, "{} on the GPU: q must be [batch, tokens, heads, head_dim], got {}", backend,
        shape_string(q.shape()));
  for (const auto& [what, x] : {std::pair{"q", &q}, {"k", &k}, {"v", &v}})
    check(x->device() == Device::CUDA && x->dtype() == DType::BF16 && x->is_contiguous() &&
              x->shape() == q.shape(),
          "{} on the GPU: {} is {} {} on {}, expected contiguous bf16 {} on the GPU", backend, what,
          dtype_name(x->dtype()), shape_string(x->shape()), device_name(x->device()),
          shape_string(q.shape()));
  Tensor out = Tensor::empty(q.shape(), DType::BF16, Device::CUDA);
  SelfAttentionCall call;
  call.q = q.raw(), call.k = k.raw(), call.v = v.raw(), call.out = out.raw();
  call.batch = q.size(0), call.tokens = q.size(1), call.heads = q.size(2);
  call.head_dim = q.size(3);
  call.grid = context.grid;
  call.step = context.step_index, call.layer = context.layer_index;
  call.num_steps = context.num_steps, call.num_layers = context.num_layers;
  call.branch = int(context.branch);
  call.scale = scale;
  call.weights = context.weights;
  const Tensor extras = prepare(context, q, call);
  run(call);
  return out;
}

void SparseSelfAttentionCuda::run_kernel(const FlashAttentionArgs& given) {
  FlashAttentionArgs args = given;
  if (portable_) args.kernel = FlashKernel::Portable;
  if (!timing_) return flash_attention_forward(args);
  cudaEvent_t start, stop;
  MMGEN_CUDA_CHECK(cudaEventCreate(&start));
  MMGEN_CUDA_CHECK(cudaEventCreate(&stop));
  MMGEN_CUDA_CHECK(cudaEventRecord(start));
  flash_attention_forward(args);
  MMGEN_CUDA_CHECK(cudaEventRecord(stop));
  MMGEN_CUDA_CHECK(cudaEventSynchronize(stop));
  float milliseconds = 0;
  MMGEN_CUDA_CHECK(cudaEventElapsedTime(&milliseconds, start, stop));
  kernel_seconds_ += milliseconds / 1000.0;
  MMGEN_CUDA_CHECK(cudaEventDestroy(start));
  MMGEN_CUDA_CHECK(cudaEventDestroy(stop));
}

namespace {
double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

void SparseSelfAttentionCuda::start_steps() {
  if (!timing_) return;
  MMGEN_CUDA_CHECK(cudaDeviceSynchronize());
  last_mark_ = now_seconds();
}

void SparseSelfAttentionCuda::mark_step(const char* name) {
  if (!timing_) return;
  MMGEN_CUDA_CHECK(cudaDeviceSynchronize());
  const double now = now_seconds(), spent = now - last_mark_;
  last_mark_ = now;
  for (auto& [step, seconds] : steps_)
    if (step == name) return void(seconds += spent);
  steps_.emplace_back(name, spent);
}

bool has_cuda_self_attention(std::string_view backend) {
  const attention::BackendDescriptor* descriptor = attention::find_dit_descriptor(backend);
  return descriptor && descriptor->cuda;
}

std::unique_ptr<SparseSelfAttentionCuda> make_sparse_self_attention_cuda(
    std::string_view backend, const nlohmann::json& config,
    const attention::BackendResources& resources) {
  check(has_cuda_self_attention(backend),
        "--device cuda: the {} attention backend has no GPU version yet; use --device cpu",
        backend);
  return attention::find_dit_descriptor(backend)->cuda(
      attention::validate_backend_config(config, backend), resources);
}

}  // namespace mmgen::cuda
