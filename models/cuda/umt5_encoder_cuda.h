// The T5 / UMT5 encoder (Wan's text encoder) on an NVIDIA GPU: the CPU model's checked weights
// uploaded once — q, k, v fused into one bf16 product, wi_0 and wi_1 likewise — cuBLASLt bf16
// products with fp32 accumulation, the residual stream in fp32, RMSNorm and the gated activation
// as row kernels, and attention through a GPU paged backend (fa3 or flashinfer) as an
// encoder-only layer: packed prompts (no padding waste), no scaling, and each layer's relative
// position bias through the backend's bias hook as a [heads, 2S − 1] vector by offset (expanded on
// the device from the [buckets, heads] tables). Token embedding stays on the host (the table is
// large and only the prompt's rows are needed).
// EncoderPrecision::F32 is the exact mode: float32 weights, activations and products (cuBLASLt
// without TF32) and the paged row kernel in float32 — the CPU encoder's numbers to float32
// rounding, at several times the memory and time; for checking and small models.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "attention/paged/forward_batch.h"
#include "core/cuda/device_memory.h"
#include "core/tensor.h"
#include "models/text_encoders/umt5_encoder.h"

namespace mmgen::cuda {

namespace paged {
class PagedBackendCuda;
}

enum class EncoderPrecision { BF16, F32 };

class UMT5EncoderCuda {
 public:
  // Uploads the weights of `model`, which must outlive this object; `backend` is a GPU paged
  // backend name (cuda_paged_backends()).
  explicit UMT5EncoderCuda(const text_encoders::UMT5Encoder& model,
                           const std::string& backend = "fa3",
                           EncoderPrecision precision = EncoderPrecision::BF16);
  // A random checkpoint of `config`'s size made on the device (benchmarks): without a host model
  // only encode() runs.
  UMT5EncoderCuda(const text_encoders::T5Config& config, uint64_t seed,
                  const std::string& backend = "fa3");
  ~UMT5EncoderCuda();

  // UMT5Encoder::forward / forward_unpadded on the GPU (float32 results on the host).
  Tensor forward(const Tensor& input_ids, const Tensor& attention_mask = Tensor()) const;
  std::vector<Tensor> forward_unpadded(const std::vector<std::vector<int64_t>>& prompts) const;

  // The stack on embedded tokens: embeddings [tokens, d_model] float32 on the host, packed as the
  // encoder-only `batch` describes. Returns [tokens, d_model] float32 on the host; `timings` (may
  // be null) gets where the time went.
  struct Timings {
    double total_seconds = 0;    // from the call to the result on the host
    double compute_seconds = 0;  // the stack on the device (CUDA events), uploads excluded
  };
  Tensor encode(const Tensor& embeddings, const attention::paged::ForwardBatch& batch,
                Timings* timings = nullptr) const;

  const std::string& attention_backend() const { return backend_name_; }
  const text_encoders::T5Config& config() const { return config_; }
  size_t weight_bytes() const { return weight_bytes_; }

 private:
  struct Layer {
    DeviceBuffer attention_norm, ffn_norm;  // fp32 [d_model]
    DeviceBuffer qkv, o, wi, wo;  // bf16 (F32: float32) [out, in]; qkv = q|k|v, wi = wi_0|wi_1
  };

  void check_supported() const;
  DeviceBuffer upload_norm(const Tensor& weight);
  DeviceBuffer upload_stacked(const std::vector<Tensor>& weights);

  const text_encoders::UMT5Encoder* model_ = nullptr;
  text_encoders::T5Config config_;
  std::string backend_name_;
  EncoderPrecision precision_ = EncoderPrecision::BF16;
  std::unique_ptr<paged::PagedBackendCuda> backend_;
  std::vector<Layer> layers_;
  DeviceBuffer final_norm_;
  DeviceBuffer position_tables_;  // fp32 [bias layers, buckets, heads]
  int64_t bias_layers_ = 0;       // UMT5: every layer; T5: block 0's, reused
  size_t weight_bytes_ = 0;
};

}  // namespace mmgen::cuda
