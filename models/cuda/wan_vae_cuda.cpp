#include "models/cuda/wan_vae_cuda.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "core/cuda/conv3d.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/gemm_f32.h"
#include "core/cuda/vae_ops.h"
#include "core/error.h"

namespace mmgen::cuda {

// One chunk of frames [frames, channels, height, width] in device memory.
struct WanVaeDecoderCuda::Frames {
  DeviceBuffer buffer;
  int64_t frames = 0, channels = 0, height = 0, width = 0;

  Frames() = default;
  Frames(int64_t t, int64_t c, int64_t h, int64_t w)
      : buffer(size_t(t * c * h * w) * sizeof(float)),
        frames(t),
        channels(c),
        height(h),
        width(w) {}
  float* data() const { return buffer.as<float>(); }
  int64_t positions() const { return height * width; }
};

namespace {

// Page-locked host memory (cudaMallocHost): device-to-host copies into it run at full speed and
// asynchronously.
class PinnedBuffer {
 public:
  explicit PinnedBuffer(size_t floats) {
    MMGEN_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&data_), floats * sizeof(float)));
  }
  ~PinnedBuffer() { cudaFreeHost(data_); }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  float* data() const { return data_; }

 private:
  float* data_ = nullptr;
};

}  // namespace

struct WanVaeDecoderCuda::Conv {
  DeviceBuffer weight, bias;  // packed for conv3d_forward; float32 [out]
  int64_t out = 0, in = 0, kt = 1, kh = 1, kw = 1, k_pad = 0;
  bool spatial_inner = false;
  int slot = -1;  // history slot of a causal convolution (kt > 1)
};

struct WanVaeDecoderCuda::Resnet {
  DeviceBuffer norm1, norm2;
  Conv conv1, conv2, shortcut;
  bool has_shortcut = false;
  int64_t in = 0, out = 0;
};

struct WanVaeDecoderCuda::Upsampler {
  Conv time_conv;  // upsample3d only
  Conv conv;       // resample.1: 3×3 after nearest ×2
  bool temporal = false;
  int started_slot = -1;
  int64_t dim = 0;
};

struct WanVaeDecoderCuda::UpBlock {
  std::vector<Resnet> resnets;
  std::unique_ptr<Upsampler> upsampler;  // null for the last block
};

// What one decode carries from latent frame to latent frame (see vae::StreamState).
struct WanVaeDecoderCuda::State {
  struct History {
    DeviceBuffer frames;  // the last input frames, oldest first
    int64_t count = 0;
  };
  std::vector<History> history;
  std::vector<bool> started;
};

template <class Pass>
void WanVaeDecoderCuda::timed(const std::string& key, Pass&& pass) const {
  if (!profiling_) return pass();
  MMGEN_CUDA_CHECK(cudaDeviceSynchronize());
  const auto start = std::chrono::steady_clock::now();
  pass();
  MMGEN_CUDA_CHECK(cudaDeviceSynchronize());
  profile_[key] += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::string WanVaeDecoderCuda::norm_key(const Frames& x) const {
  return profiling_ ? fmt::format("rms_norm+silu {} at {}x{}", x.channels, x.height, x.width)
                    : std::string();
}

WanVaeDecoderCuda::WanVaeDecoderCuda(const vae::WanVaeDecoder& decoder, VaePrecision precision)
    : decoder_(decoder), precision_(precision) {
  const vae::WanVaeConfig& config = decoder.config();
  const int64_t base = config.decoder_dim(), z_dim = config.z_dim;
  const std::vector<int64_t>& mult = config.dim_mult;
  // The CPU decoder's layout (diffusers' WanDecoder3d), whose constructor checked every weight.
  std::vector<int64_t> dims = {base * mult.back()};
  for (auto m = mult.rbegin(); m != mult.rend(); ++m) dims.push_back(base * *m);

  post_quant_conv_ = std::make_unique<Conv>(upload_conv("post_quant_conv", z_dim, z_dim, 1, 1, 1));
  conv_in_ = std::make_unique<Conv>(upload_conv("decoder.conv_in", dims[0], z_dim, 3, 3, 3));
  mid_dim_ = dims[0];
  mid_resnets_.push_back(upload_resnet("decoder.mid_block.resnets.0", dims[0], dims[0]));
  const std::string attention = "decoder.mid_block.attentions.0";
  attention_gamma_ = upload_vector(attention + ".norm.gamma");
  to_qkv_ =
      std::make_unique<Conv>(upload_conv(attention + ".to_qkv", 3 * dims[0], dims[0], 1, 1, 1));
  proj_ = std::make_unique<Conv>(upload_conv(attention + ".proj", dims[0], dims[0], 1, 1, 1));
  mid_resnets_.push_back(upload_resnet("decoder.mid_block.resnets.1", dims[0], dims[0]));

  const std::vector<bool> temporal = config.temporal_upsample();
  for (size_t i = 0; i < mult.size(); ++i) {
    int64_t in_dim = i > 0 ? dims[i] / 2 : dims[i];
    const int64_t out_dim = dims[i + 1];
    const std::string prefix = fmt::format("decoder.up_blocks.{}", i);
    UpBlock block;
    for (int64_t j = 0; j <= config.num_res_blocks; ++j) {
      block.resnets.push_back(
          upload_resnet(fmt::format("{}.resnets.{}", prefix, j), in_dim, out_dim));
      in_dim = out_dim;
    }
    if (i + 1 != mult.size()) {
      auto upsampler = std::make_unique<Upsampler>();
      const std::string name = prefix + ".upsamplers.0";
      upsampler->dim = out_dim;
      upsampler->temporal = temporal[i];
      if (temporal[i]) {
        upsampler->time_conv = upload_conv(name + ".time_conv", 2 * out_dim, out_dim, 3, 1, 1);
        upsampler->started_slot = started_slots_++;
      }
      upsampler->conv = upload_conv(name + ".resample.1", out_dim / 2, out_dim, 1, 3, 3);
      block.upsampler = std::move(upsampler);
    }
    up_blocks_.push_back(std::move(block));
  }
  out_dim_ = dims.back();
  norm_out_gamma_ = upload_vector("decoder.norm_out.gamma");
  conv_out_ = std::make_unique<Conv>(
      upload_conv("decoder.conv_out", config.out_channels, out_dim_, 3, 3, 3));
}

WanVaeDecoderCuda::~WanVaeDecoderCuda() = default;

WanVaeDecoderCuda::Conv WanVaeDecoderCuda::upload_conv(const std::string& prefix, int64_t out,
                                                       int64_t in, int64_t kt, int64_t kh,
                                                       int64_t kw) {
  const WeightStore& store = decoder_.weights();
  const Tensor weight = store.get_f32(prefix + ".weight").contiguous();
  const Tensor bias = store.get_f32(prefix + ".bias").contiguous();
  check(weight.numel() == out * in * kt * kh * kw && bias.numel() == out,
        "GPU VAE: '{}' has {} weights and {} biases, expected {}x{}x{}x{}x{} and {}", prefix,
        weight.numel(), bias.numel(), out, in, kt, kh, kw, out);
  const PackedConvWeights packed = pack_conv_weights(weight.data<float>(), out, in, kt, kh, kw);
  Conv conv;
  conv.out = out, conv.in = in, conv.kt = kt, conv.kh = kh, conv.kw = kw, conv.k_pad = packed.k_pad;
  conv.spatial_inner = packed.spatial_inner;
  conv.weight = DeviceBuffer(packed.values.size() * sizeof(float));
  conv.weight.upload(packed.values.data(), packed.values.size() * sizeof(float));
  conv.bias = DeviceBuffer(bias.nbytes());
  conv.bias.upload(bias.raw(), bias.nbytes());
  if (kt > 1) conv.slot = history_slots_++;
  weight_bytes_ += conv.weight.size() + conv.bias.size();
  return conv;
}

DeviceBuffer WanVaeDecoderCuda::upload_vector(const std::string& name) {
  const Tensor values = decoder_.weights().get_f32(name).contiguous();
  DeviceBuffer buffer(values.nbytes());
  buffer.upload(values.raw(), values.nbytes());
  weight_bytes_ += buffer.size();
  return buffer;
}

WanVaeDecoderCuda::Resnet WanVaeDecoderCuda::upload_resnet(const std::string& prefix, int64_t in,
                                                           int64_t out) {
  Resnet block;
  block.in = in, block.out = out;
  block.norm1 = upload_vector(prefix + ".norm1.gamma");
  block.norm2 = upload_vector(prefix + ".norm2.gamma");
  block.conv1 = upload_conv(prefix + ".conv1", out, in, 3, 3, 3);
  block.conv2 = upload_conv(prefix + ".conv2", out, out, 3, 3, 3);
  block.has_shortcut = in != out;
  if (block.has_shortcut) block.shortcut = upload_conv(prefix + ".conv_shortcut", out, in, 1, 1, 1);
  return block;
}

void WanVaeDecoderCuda::run_conv(const Conv& conv, const float* input, int64_t frames,
                                 int64_t height, int64_t width, float* output,
                                 const float* residual, State* state, bool upsample2x,
                                 bool rounded) const {
  Conv3dArgs args;
  args.weight = conv.weight.as<float>();
  args.bias = conv.bias.as<float>();
  args.input = input;
  args.residual = residual;
  args.output = output;
  args.frames = frames;
  args.in_channels = conv.in;
  args.out_channels = conv.out;
  args.src_h = height;
  args.src_w = width;
  args.kt = conv.kt, args.kh = conv.kh, args.kw = conv.kw;
  args.k_pad = conv.k_pad;
  args.spatial_inner = conv.spatial_inner;
  args.input_tf32_rounded = rounded;
  args.upsample2x = upsample2x;
  State::History* history = nullptr;
  if (conv.slot >= 0) {
    check(state != nullptr, "GPU VAE: a causal convolution needs the stream state");
    history = &state->history[size_t(conv.slot)];
    args.history = history->count > 0 ? history->frames.as<float>() : nullptr;
    args.history_frames = history->count;
  }
  const int64_t scale = upsample2x ? 2 : 1;
  const std::string key =
      profiling_ ? fmt::format("conv {:>3}->{:<4} {}x{}x{}{} at {}x{}", conv.in, conv.out, conv.kt,
                               conv.kh, conv.kw, upsample2x ? " after x2" : "", height * scale,
                               width * scale)
                 : std::string();
  timed(key, [&] {
    conv3d_forward(args,
                   precision_ == VaePrecision::FP32 ? ConvPrecision::TF32x3 : ConvPrecision::TF32);
  });
  flops_ += conv3d_flops(args);
  if (!history) return;
  // Remember the last kt − 1 input frames (of the old history followed by this chunk), as the CPU
  // decoder and diffusers' feature cache do.
  const int64_t keep = std::min(conv.kt - 1, history->count + frames);
  const size_t frame_bytes = size_t(conv.in * height * width) * sizeof(float);
  DeviceBuffer kept(size_t(conv.kt - 1) * frame_bytes);
  for (int64_t i = 0; i < keep; ++i) {
    const int64_t source = frames - keep + i;  // negative: from the old history
    const float* from = source >= 0 ? input + source * conv.in * height * width
                                    : history->frames.as<float>() +
                                          (history->count + source) * conv.in * height * width;
    MMGEN_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(kept.data()) + size_t(i) * frame_bytes,
                                     from, frame_bytes, cudaMemcpyDeviceToDevice, nullptr));
  }
  history->frames = std::move(kept);
  history->count = keep;
}

WanVaeDecoderCuda::Frames WanVaeDecoderCuda::conv(const Conv& conv, const Frames& x, State* state,
                                                  const float* residual, bool rounded) const {
  Frames y(x.frames, conv.out, x.height, x.width);
  run_conv(conv, x.data(), x.frames, x.height, x.width, y.data(), residual, state,
           /*upsample2x=*/false, rounded);
  return y;
}

WanVaeDecoderCuda::Frames WanVaeDecoderCuda::resnet(const Resnet& block, const Frames& x,
                                                    State& state) const {
  check(x.channels == block.in, "GPU VAE: residual block expects {} channels, got {}", block.in,
        x.channels);
  Frames shortcut;
  if (block.has_shortcut) shortcut = conv(block.shortcut, x, nullptr);
  const float* identity = block.has_shortcut ? shortcut.data() : x.data();
  Frames h;
  {
    Frames normed(x.frames, x.channels, x.height, x.width);
    timed(norm_key(x), [&] {
      channel_rms_norm_f32(x.data(), block.norm1.as<float>(), /*silu=*/true, normed.data(),
                           x.frames, x.channels, x.positions(), round_in_norms());
    });
    h = conv(block.conv1, normed, &state, nullptr, round_in_norms());
  }
  timed(norm_key(h), [&] {
    channel_rms_norm_f32(h.data(), block.norm2.as<float>(), /*silu=*/true, h.data(), h.frames,
                         h.channels, h.positions(), round_in_norms());
  });
  return conv(block.conv2, h, &state, identity,
              round_in_norms());  // dropout is the identity at inference
}

WanVaeDecoderCuda::Frames WanVaeDecoderCuda::attention(const Frames& x) const {
  const int64_t channels = x.channels, positions = x.positions();
  const bool tf32 = precision_ == VaePrecision::TF32;
  Frames normed(x.frames, channels, x.height, x.width);
  channel_rms_norm_f32(x.data(), attention_gamma_.as<float>(), /*silu=*/false, normed.data(),
                       x.frames, channels, positions, round_in_norms());
  Frames y(x.frames, channels, x.height, x.width);
  DeviceBuffer qkv(size_t(3 * channels * positions) * sizeof(float));
  DeviceBuffer scores(size_t(positions * positions) * sizeof(float));
  DeviceBuffer attended(size_t(channels * positions) * sizeof(float));
  const float scale = 1.0f / std::sqrt(float(channels));
  for (int64_t t = 0; t < x.frames; ++t) {
    const int64_t offset = t * channels * positions;
    run_conv(*to_qkv_, normed.data() + offset, 1, x.height, x.width, qkv.as<float>(), nullptr,
             nullptr, false, round_in_norms());
    // q, k, v are [C, positions] row-major, i.e. column-major [positions, C]. Scores row-major
    // [query, key] = column-major [key, query] = K · Qᵀ in column-major terms.
    const float* q = qkv.as<float>();
    const float* k = q + channels * positions;
    const float* v = k + channels * positions;
    timed(profiling_ ? fmt::format("attention products + softmax at {}x{}", x.height, x.width)
                     : std::string(),
          [&] {
            gemm_f32(false, true, positions, positions, channels, k, positions, q, positions,
                     scores.as<float>(), positions, tf32);
            softmax_rows_f32(scores.as<float>(), positions, positions, scale);
            // out row-major [C, query] = column-major [query, C] = Sᵀ(col-major [key, query])ᵀ·V.
            gemm_f32(true, false, positions, channels, positions, scores.as<float>(), positions, v,
                     positions, attended.as<float>(), positions, tf32);
          });
    flops_ += 4.0 * double(positions) * double(positions) * double(channels);
    run_conv(*proj_, attended.as<float>(), 1, x.height, x.width, y.data() + offset,
             x.data() + offset, nullptr);
  }
  return y;
}

WanVaeDecoderCuda::Frames WanVaeDecoderCuda::upsample(const Upsampler& block, const Frames& x,
                                                      State& state) const {
  check(x.channels == block.dim, "GPU VAE: upsampler expects {} channels, got {}", block.dim,
        x.channels);
  Frames doubled;
  const float* source = x.data();
  int64_t count = x.frames;
  if (block.temporal) {
    if (!state.started[size_t(block.started_slot)]) {
      state.started[size_t(block.started_slot)] = true;  // "Rep": the first chunk keeps its frame
    } else {
      // [T, 2C, H, W] read as [2T, C, H, W]: diffusers' stack-and-reshape, without a copy.
      doubled = conv(block.time_conv, x, &state);
      source = doubled.data();
      count = 2 * x.frames;
    }
  }
  Frames y(count, block.dim / 2, 2 * x.height, 2 * x.width);
  run_conv(block.conv, source, count, x.height, x.width, y.data(), nullptr, nullptr,
           /*upsample2x=*/true);
  return y;
}

WanVaeDecoderCuda::Frames WanVaeDecoderCuda::decode_chunk(const Frames& x, State& state) const {
  Frames h = conv(*conv_in_, x, &state);
  h = resnet(mid_resnets_[0], h, state);
  h = attention(h);
  h = resnet(mid_resnets_[1], h, state);
  for (const UpBlock& block : up_blocks_) {
    for (const Resnet& r : block.resnets) h = resnet(r, h, state);
    if (block.upsampler) h = upsample(*block.upsampler, h, state);
  }
  timed(norm_key(h), [&] {
    channel_rms_norm_f32(h.data(), norm_out_gamma_.as<float>(), /*silu=*/true, h.data(), h.frames,
                         h.channels, h.positions(), round_in_norms());
  });
  return conv(*conv_out_, h, &state, nullptr, round_in_norms());
}

Tensor WanVaeDecoderCuda::decode(const Tensor& z, const vae::DecodeProgress& progress) const {
  const vae::WanVaeConfig& config = decoder_.config();
  check(z.dim() == 5 && z.size(1) == config.z_dim,
        "GPU VAE decode: expected latents [batch, {}, frames, height, width], got {}", config.z_dim,
        shape_string(z.shape()));
  check(z.numel() > 0, "GPU VAE decode: empty latents {}", shape_string(z.shape()));
  const Tensor latents = z.to(DType::F32);
  const int64_t batch = z.size(0), frames = z.size(2), height = z.size(3), width = z.size(4);
  const int64_t spatial = config.spatial_factor(), temporal = config.temporal_factor();
  const int64_t out_frames = config.output_frames(frames);
  const int64_t out_h = height * spatial, out_w = width * spatial, plane = out_h * out_w;
  const int64_t channels = config.out_channels;
  Tensor video = Tensor::empty({batch, channels, out_frames, out_h, out_w});
  const int total = int(batch * frames);
  flops_ = 0;

  // Each chunk goes down through one of two pinned buffers; its copy into `video` (on the host)
  // happens while the device decodes the next chunk.
  const size_t chunk_floats = size_t(temporal * channels * plane);
  struct Download {
    PinnedBuffer host;
    cudaEvent_t done = nullptr;
    int64_t batch = -1, first = 0, count = 0;
  };
  Download downloads[2] = {{PinnedBuffer(chunk_floats)}, {PinnedBuffer(chunk_floats)}};
  for (Download& d : downloads)
    MMGEN_CUDA_CHECK(cudaEventCreateWithFlags(&d.done, cudaEventDisableTiming));
  auto finish = [&](Download& d) {
    if (d.batch < 0) return;
    timed(profiling_ ? "copy into the video (host)" : "", [&] {
      MMGEN_CUDA_CHECK(cudaEventSynchronize(d.done));
      for (int64_t c = 0; c < channels; ++c)
        std::memcpy(video.data<float>() + ((d.batch * channels + c) * out_frames + d.first) * plane,
                    d.host.data() + c * d.count * plane, size_t(d.count * plane) * sizeof(float));
    });
    d.batch = -1;
  };

  int64_t done_chunks = 0;
  try {
    for (int64_t b = 0; b < batch; ++b) {
      State state;
      state.history.resize(size_t(history_slots_));
      state.started.assign(size_t(started_slots_), false);
      for (int64_t i = 0; i < frames; ++i) {
        const Tensor frame = latents.select(0, b).select(1, i).contiguous();  // [z_dim, h, w]
        Frames input(1, config.z_dim, height, width);
        input.buffer.upload(frame.raw(), frame.nbytes());
        const Frames x = conv(*post_quant_conv_, input, nullptr);
        const Frames chunk = decode_chunk(x, state);  // [n, channels, out_h, out_w]
        const int64_t first = i == 0 ? 0 : 1 + (i - 1) * temporal;
        const int64_t expected = i == 0 ? 1 : temporal;
        check(chunk.frames == expected && chunk.channels == channels && chunk.height == out_h &&
                  chunk.width == out_w,
              "GPU VAE: latent frame {} decoded to [{}, {}, {}, {}], expected {} frames of {}x{}",
              i, chunk.frames, chunk.channels, chunk.height, chunk.width, expected, out_h, out_w);
        // Clamped and channel-major on the device, so each channel's frames are one block.
        Download& d = downloads[done_chunks % 2];
        finish(d);  // the chunk before last: its buffer is needed again
        DeviceBuffer staging(size_t(expected * channels * plane) * sizeof(float));
        timed(profiling_ ? "clamp + copy to pinned host memory" : "", [&] {
          clamp_to_channel_major_f32(chunk.data(), staging.as<float>(), expected, channels, plane);
          MMGEN_CUDA_CHECK(cudaMemcpyAsync(d.host.data(), staging.as<float>(),
                                           size_t(expected * channels * plane) * sizeof(float),
                                           cudaMemcpyDeviceToHost, nullptr));
          MMGEN_CUDA_CHECK(cudaEventRecord(d.done, nullptr));
        });
        d.batch = b, d.first = first, d.count = expected;
        finish(downloads[(done_chunks + 1) % 2]);  // the previous chunk, done by now or soon
        ++done_chunks;
        if (progress) progress(int(b * frames + i + 1), total);
      }
    }
    finish(downloads[0]);
    finish(downloads[1]);
  } catch (...) {
    for (Download& d : downloads) cudaEventDestroy(d.done);
    throw;
  }
  for (Download& d : downloads) MMGEN_CUDA_CHECK(cudaEventDestroy(d.done));
  return video;
}

}  // namespace mmgen::cuda
