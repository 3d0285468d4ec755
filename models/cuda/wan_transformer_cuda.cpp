#include "models/cuda/wan_transformer_cuda.h"

#include <cmath>

#include "attention/cuda/reference_attention.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/device_ops.h"
#include "core/cuda/gemm.h"
#include "core/dtype.h"
#include "core/error.h"
#include "models/dit/wan_patchify.h"
#include "models/dit/wan_rope.h"
#include "models/dit/wan_weights.h"

namespace mmgen::cuda {
namespace {

DeviceBuffer upload_bf16(const Tensor& host) {
  const Tensor values = host.to(DType::BF16).contiguous();
  DeviceBuffer buffer(values.nbytes());
  buffer.upload(values.raw(), values.nbytes());
  return buffer;
}

DeviceBuffer upload_floats(const std::vector<float>& values) {
  DeviceBuffer buffer(values.size() * sizeof(float));
  buffer.upload(values.data(), values.size() * sizeof(float));
  return buffer;
}

// Attention over bf16 [batch, seq, heads, head_dim] buffers packed as [batch·seq, dim], with the
// plan's dense kernel.
void attend(const DeviceBuffer& q, const DeviceBuffer& k, const DeviceBuffer& v, DeviceBuffer& out,
            int64_t batch, int64_t q_len, int64_t kv_len, int64_t heads, int64_t head_dim,
            DenseKernel kernel) {
  FlashAttentionArgs args;
  args.q = q.data(), args.k = k.data(), args.v = v.data(), args.out = out.data();
  args.batch = batch, args.heads = heads, args.seq_q = q_len, args.seq_k = kv_len;
  args.head_dim = head_dim;
  args.scale = float(1.0 / std::sqrt(double(head_dim)));
  const int64_t dim = heads * head_dim;
  args.q_strides = args.out_strides = {q_len * dim, dim, head_dim};
  args.k_strides = args.v_strides = {kv_len * dim, dim, head_dim};
  if (kernel == DenseKernel::Reference)
    reference_attention_forward(args);
  else
    attention_forward(args);
}

}  // namespace

struct WanTransformerCuda::Block {
  Linear q, k, v, o, cross_q, cross_k, cross_v, cross_o, ffn_in, ffn_out;
  Linear gate;  // VSA's to_gate_compress where the checkpoint has it (weight empty otherwise)
  DeviceBuffer norm_q, norm_k, cross_norm_q, cross_norm_k, norm2_weight, norm2_bias;
  std::vector<float> modulation;  // scale_shift_table [6·D], added to timestep_proj per forward
};

WanTransformerCuda::Linear WanTransformerCuda::upload_linear(const std::string& prefix,
                                                             bool bf16_output) {
  // Released checkpoints store bf16: those bytes go up as they are; other dtypes are converted.
  const Tensor stored = model_.weights().get(prefix + ".weight");
  const Tensor weight = stored.dtype() == DType::BF16 ? stored.contiguous() : stored;
  const bool has_bias = model_.weights().has(prefix + ".bias");
  const Tensor bias = has_bias ? dit::load_weight(model_.weights(), prefix + ".bias")
                               : Tensor::zeros({weight.size(0)});
  Linear linear;
  linear.out = weight.size(0);
  linear.in = weight.numel() / linear.out;  // the patch embedding's Conv3d weight flattens
  linear.weight = upload_bf16(weight);
  if (bf16_output) {
    linear.bias = upload_bf16(bias);
  } else {
    const Tensor contiguous = bias.contiguous();
    linear.bias = DeviceBuffer(contiguous.nbytes());
    linear.bias.upload(contiguous.raw(), contiguous.nbytes());
  }
  weight_bytes_ += linear.weight.size() + linear.bias.size();
  return linear;
}

DeviceBuffer WanTransformerCuda::upload_f32(const std::string& name) {
  const Tensor values = dit::load_weight(model_.weights(), name).contiguous();
  DeviceBuffer buffer(values.nbytes());
  buffer.upload(values.raw(), values.nbytes());
  weight_bytes_ += buffer.size();
  return buffer;
}

WanTransformerCuda::WanTransformerCuda(const dit::WanTransformer& model)
    : model_(model), time_weights_(dit::TimeEmbedderWeights::load(model.weights())) {
  const dit::WanTransformerConfig& config = model.config();
  patch_ = upload_linear("patch_embedding", false);
  text_1_ = upload_linear("condition_embedder.text_embedder.linear_1", true);
  text_2_ = upload_linear("condition_embedder.text_embedder.linear_2", true);
  proj_out_ = upload_linear("proj_out", false);
  for (int64_t layer = 0; layer < config.num_layers; ++layer) {
    const std::string prefix = "blocks." + std::to_string(layer) + ".";
    auto block = std::make_unique<Block>();
    block->q = upload_linear(prefix + "attn1.to_q", true);
    block->k = upload_linear(prefix + "attn1.to_k", true);
    block->v = upload_linear(prefix + "attn1.to_v", true);
    block->o = upload_linear(prefix + "attn1.to_out.0", false);
    block->norm_q = upload_f32(prefix + "attn1.norm_q.weight");
    block->norm_k = upload_f32(prefix + "attn1.norm_k.weight");
    block->cross_q = upload_linear(prefix + "attn2.to_q", true);
    block->cross_k = upload_linear(prefix + "attn2.to_k", true);
    block->cross_v = upload_linear(prefix + "attn2.to_v", true);
    block->cross_o = upload_linear(prefix + "attn2.to_out.0", false);
    block->cross_norm_q = upload_f32(prefix + "attn2.norm_q.weight");
    block->cross_norm_k = upload_f32(prefix + "attn2.norm_k.weight");
    if (config.cross_attn_norm) {
      block->norm2_weight = upload_f32(prefix + "norm2.weight");
      block->norm2_bias = upload_f32(prefix + "norm2.bias");
    }
    block->ffn_in = upload_linear(prefix + "ffn.net.0.proj", true);
    block->ffn_out = upload_linear(prefix + "ffn.net.2", false);
    if (model.weights().has(prefix + "to_gate_compress.weight"))
      block->gate = upload_linear(prefix + "to_gate_compress", false);
    const Tensor table = dit::load_weight(model.weights(), prefix + "scale_shift_table");
    block->modulation.assign(table.data<float>(), table.data<float>() + table.numel());
    blocks_.push_back(std::move(block));
  }
}

WanTransformerCuda::~WanTransformerCuda() = default;

Tensor WanTransformerCuda::forward(const Tensor& latents, float timestep, const Tensor& text_embeds,
                                   Timings* timings, SparseSelfAttentionCuda* self_attention,
                                   int64_t step, DenseKernels dense) const {
  const auto start = std::chrono::steady_clock::now();
  const dit::WanTransformerConfig& config = model_.config();
  const auto [pt, ph, pw] = config.patch_size;
  check(latents.dim() == 5 && latents.size(1) == config.in_channels && latents.numel() > 0 &&
            latents.size(2) % pt == 0 && latents.size(3) % ph == 0 && latents.size(4) % pw == 0,
        "transformer: latents must be [batch, {}, frames, height, width] divisible by the patch "
        "size, got {}",
        config.in_channels, shape_string(latents.shape()));
  const int64_t batch = latents.size(0);
  check(text_embeds.dim() == 3 && text_embeds.size(0) == batch &&
            text_embeds.size(2) == config.text_dim && text_embeds.size(1) > 0,
        "transformer: text embeddings must be [{}, tokens, {}], got {}", batch, config.text_dim,
        shape_string(text_embeds.shape()));
  const dit::PatchGrid grid{latents.size(2) / pt, latents.size(3) / ph, latents.size(4) / pw};
  const int64_t dim = config.inner_dim(), heads = config.num_attention_heads,
                head_dim = config.attention_head_dim, tokens = grid.tokens(), rows = batch * tokens,
                text_len = text_embeds.size(1);

  // Host side: patches, the time branch (fp32), RoPE tables, every block's modulation.
  const Tensor patches = dit::patchify(latents, config.patch_size, grid);
  const dit::TimeConditioning time = dit::time_conditioning(time_weights_, config, timestep);
  if (rope_grid_ != std::array<int64_t, 3>{grid.t, grid.h, grid.w}) {
    std::vector<float> cos_table, sin_table;
    dit::WanRope(head_dim, config.rope_max_seq_len)
        .pair_tables(grid.t, grid.h, grid.w, cos_table, sin_table);
    rope_cos_ = upload_floats(cos_table);
    rope_sin_ = upload_floats(sin_table);
    rope_grid_ = {grid.t, grid.h, grid.w};
  }
  const DeviceBuffer& cos = rope_cos_;
  const DeviceBuffer& sin = rope_sin_;
  // Per block: shift, 1 + scale, gate, ffn shift, 1 + ffn scale, ffn gate (each [D]).
  std::vector<float> modulation(blocks_.size() * 6 * size_t(dim));
  for (size_t b = 0; b < blocks_.size(); ++b)
    for (int64_t i = 0; i < 6 * dim; ++i) {
      float value = blocks_[b]->modulation[size_t(i)] + time.timestep_proj[size_t(i)];
      if (i / dim == 1 || i / dim == 4) value += 1.0f;
      modulation[b * 6 * size_t(dim) + size_t(i)] = value;
    }
  const Tensor head_table = dit::load_weight(model_.weights(), "scale_shift_table");
  std::vector<float> head_modulation(size_t(2 * dim));
  for (int64_t i = 0; i < dim; ++i) {
    head_modulation[size_t(i)] = head_table.data<float>()[i] + time.temb[size_t(i)];
    head_modulation[size_t(dim + i)] =
        1.0f + head_table.data<float>()[dim + i] + time.temb[size_t(i)];
  }

  const DeviceBuffer modulation_device = upload_floats(modulation);
  const DeviceBuffer head_device = upload_floats(head_modulation);
  const DeviceBuffer patches_device = upload_bf16(patches);
  const DeviceBuffer text_in = upload_bf16(text_embeds.to(DType::F32).contiguous());

  const auto prepared = std::chrono::steady_clock::now();

  // Embeddings: x = patch embedding (fp32 residual stream); text = MLP(text embeddings) in bf16.
  DeviceBuffer x(size_t(rows * dim) * 4);
  linear_bf16(patches_device.data(), patch_.weight.data(), patch_.bias.data(), x.data(), rows, dim,
              patch_.in, GemmOutput::F32);
  DeviceBuffer text_hidden(size_t(batch * text_len * dim) * 2),
      text(size_t(batch * text_len * dim) * 2);
  linear_bf16(text_in.data(), text_1_.weight.data(), text_1_.bias.data(), text_hidden.data(),
              batch * text_len, dim, config.text_dim, GemmOutput::BF16);
  gelu_tanh_bf16(text_hidden.data(), batch * text_len * dim);
  linear_bf16(text_hidden.data(), text_2_.weight.data(), text_2_.bias.data(), text.data(),
              batch * text_len, dim, dim, GemmOutput::BF16);

  DeviceBuffer normed(size_t(rows * dim) * 2), q(size_t(rows * dim) * 2), k(size_t(rows * dim) * 2),
      v(size_t(rows * dim) * 2), attended(size_t(rows * dim) * 2),
      projected(size_t(rows * dim) * 4), cross_k(size_t(batch * text_len * dim) * 2),
      cross_v(size_t(batch * text_len * dim) * 2), hidden(size_t(rows * config.ffn_dim) * 2);
  float* residual = x.as<float>();
  const float eps = config.eps;
  auto run = [&](const Linear& linear, const DeviceBuffer& input, DeviceBuffer& output,
                 int64_t count, GemmOutput type) {
    linear_bf16(input.data(), linear.weight.data(), linear.bias.data(), output.data(), count,
                linear.out, linear.in, type);
  };
  for (size_t b = 0; b < blocks_.size(); ++b) {
    const Block& block = *blocks_[b];
    const float* m = modulation_device.as<float>() + b * 6 * size_t(dim);
    // 1. Self-attention with q/k RMSNorm across heads and RoPE; gated residual.
    layer_norm_to_bf16(residual, normed.data(), rows, dim, m + dim, m, eps);
    run(block.q, normed, q, rows, GemmOutput::BF16);
    run(block.k, normed, k, rows, GemmOutput::BF16);
    run(block.v, normed, v, rows, GemmOutput::BF16);
    rms_norm_rope_bf16(q.data(), rows, dim, block.norm_q.as<float>(), eps, cos.as<float>(),
                       sin.as<float>(), tokens, head_dim);
    rms_norm_rope_bf16(k.data(), rows, dim, block.norm_k.as<float>(), eps, cos.as<float>(),
                       sin.as<float>(), tokens, head_dim);
    if (self_attention) {
      SelfAttentionCall call;
      call.q = q.data(), call.k = k.data(), call.v = v.data(), call.out = attended.data();
      call.batch = batch, call.tokens = tokens, call.heads = heads, call.head_dim = head_dim;
      call.grid = {grid.t, grid.h, grid.w};
      call.step = step, call.layer = int64_t(b);
      call.scale = float(1.0 / std::sqrt(double(head_dim)));
      if (self_attention->wants_gate() && block.gate.weight.size() > 0) {
        // to_gate_compress(attention input) in fp32; `projected` is free until the output
        // projection below.
        run(block.gate, normed, projected, rows, GemmOutput::F32);
        call.gate = projected.as<float>();
      }
      self_attention->forward(call);
    } else {
      attend(q, k, v, attended, batch, tokens, tokens, heads, head_dim, dense.self);
    }
    run(block.o, attended, projected, rows, GemmOutput::F32);
    add_gated_f32(residual, projected.as<float>(), rows, dim, m + 2 * dim);
    // 2. Cross-attention to the text; plain residual.
    if (config.cross_attn_norm)
      layer_norm_to_bf16(residual, normed.data(), rows, dim, block.norm2_weight.as<float>(),
                         block.norm2_bias.as<float>(), eps);
    else
      check(false, "GPU transformer: cross_attn_norm false is not supported yet");
    run(block.cross_q, normed, q, rows, GemmOutput::BF16);
    run(block.cross_k, text, cross_k, batch * text_len, GemmOutput::BF16);
    run(block.cross_v, text, cross_v, batch * text_len, GemmOutput::BF16);
    rms_norm_rope_bf16(q.data(), rows, dim, block.cross_norm_q.as<float>(), eps, nullptr, nullptr,
                       tokens, head_dim);
    rms_norm_rope_bf16(cross_k.data(), batch * text_len, dim, block.cross_norm_k.as<float>(), eps,
                       nullptr, nullptr, text_len, head_dim);
    attend(q, cross_k, cross_v, attended, batch, tokens, text_len, heads, head_dim, dense.cross);
    run(block.cross_o, attended, projected, rows, GemmOutput::F32);
    add_gated_f32(residual, projected.as<float>(), rows, dim, nullptr);
    // 3. Feed-forward (GELU, tanh form); gated residual.
    layer_norm_to_bf16(residual, normed.data(), rows, dim, m + 4 * dim, m + 3 * dim, eps);
    linear_bf16(normed.data(), block.ffn_in.weight.data(), block.ffn_in.bias.data(), hidden.data(),
                rows, block.ffn_in.out, block.ffn_in.in, GemmOutput::BF16, nullptr,
                GemmActivation::GeluTanh);
    run(block.ffn_out, hidden, projected, rows, GemmOutput::F32);
    add_gated_f32(residual, projected.as<float>(), rows, dim, m + 5 * dim);
  }

  // Output head: modulated LayerNorm, projection, back to the host, unpatchify.
  layer_norm_to_bf16(residual, normed.data(), rows, dim, head_device.as<float>() + dim,
                     head_device.as<float>(), eps);
  const int64_t out_features = proj_out_.out;
  DeviceBuffer out(size_t(rows * out_features) * 4);
  run(proj_out_, normed, out, rows, GemmOutput::F32);
  Tensor host_out = Tensor::empty({batch, tokens, out_features});
  MMGEN_CUDA_CHECK(cudaDeviceSynchronize());
  out.download(host_out.data<float>(), host_out.nbytes());
  if (timings) {
    timings->host_seconds = std::chrono::duration<double>(prepared - start).count();
    timings->device_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - prepared).count();
  }
  return dit::unpatchify(host_out, config.patch_size, grid, config.out_channels);
}

}  // namespace mmgen::cuda
