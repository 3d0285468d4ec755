#include "attention/cuda/flash_attention.h"

#include <cstdint>

#include "attention/cuda/flash_kernels.h"
#include "core/cuda/cuda_check.h"
#include "core/error.h"

namespace mmgen::cuda {
namespace {

bool aligned_16(const void* pointer) {
  return reinterpret_cast<uintptr_t>(pointer) % 16 == 0;
}

bool strides_aligned(const AttentionStrides& strides) {
  return strides.batch % 8 == 0 && strides.token % 8 == 0 && strides.head % 8 == 0;
}

// Compute capability major of the current device (the Hopper kernel needs 9).
int device_major() {
  int device = 0, major = 0;
  MMGEN_CUDA_CHECK(cudaGetDevice(&device));
  MMGEN_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  return major;
}

template <int D, int kMode>
void launch(const FlashAttentionArgs& args, bool hopper, cudaStream_t stream) {
  if constexpr (kMode == kFlashDense)
    if (args.v_scales) return launch_flash_attention_hopper_int8_fp8<D>(args, stream);
  if (args.q_scales)
    launch_flash_attention_hopper_int8<D, kMode>(args, stream);
  else if (hopper)
    launch_flash_attention_hopper<D, kMode>(args, stream);
  else
    launch_flash_attention<D, kMode>(args, stream);
}

template <int D>
void dispatch(const FlashAttentionArgs& args, bool hopper, cudaStream_t stream) {
  if (args.reads_cubes())
    launch_flash_attention_hopper<D, kFlashCubes>(args, stream);
  else if (args.block_offsets == nullptr)
    launch<D, kFlashDense>(args, hopper, stream);
  else if (args.lists_per_half)
    launch<D, kFlashPerHalf>(args, hopper, stream);
  else
    launch<D, kFlashSparse>(args, hopper, stream);
}

}  // namespace

bool flash_attention_supports_head_dim(int64_t head_dim) {
  return head_dim == 64 || head_dim == 128;
}

bool flash_attention_has_hopper() {
  static const bool has_hopper = device_major() == 9;
  return has_hopper;
}

void flash_attention_forward(const FlashAttentionArgs& args, cudaStream_t stream) {
  check(flash_attention_supports_head_dim(args.head_dim),
        "CUDA attention: head size {} is not compiled in (64 and 128 are); use "
        "--attention-backend torch_sdpa for this model",
        args.head_dim);
  check(args.q && args.k && args.v && args.out, "CUDA attention: a null q, k, v or out pointer");
  check(aligned_16(args.q) && aligned_16(args.k) && aligned_16(args.v) && aligned_16(args.out),
        "CUDA attention: q, k, v and out must start on 16-byte boundaries");
  check(strides_aligned(args.q_strides) && strides_aligned(args.k_strides) &&
            strides_aligned(args.v_strides) && strides_aligned(args.out_strides),
        "CUDA attention: strides must be multiples of 8 elements (16 bytes)");
  check(args.scale > 0.0f, "CUDA attention: the scale must be positive, got {}", args.scale);
  check(args.batch > 0 && args.heads > 0 && args.batch <= 65535 && args.heads <= 65535,
        "CUDA attention: batch {} and heads {} must be in 1..65535", args.batch, args.heads);
  check(args.seq_q >= 0 && args.seq_k >= 0 && args.seq_q < (int64_t(1) << 31) &&
            args.seq_k < (int64_t(1) << 31),
        "CUDA attention: sequence lengths {} and {} out of range", args.seq_q, args.seq_k);
  check((args.block_offsets == nullptr) == (args.block_indices == nullptr),
        "CUDA attention: block-sparse mode needs both block_offsets and block_indices");
  check(args.block_offsets || (!args.key_block_lengths && !args.lists_per_half),
        "CUDA attention: key_block_lengths and lists_per_half need block-sparse mode");
  if (args.seq_q == 0) return;
  const bool has_hopper = flash_attention_has_hopper();
  check(args.kernel != FlashKernel::Hopper || has_hopper,
        "CUDA attention: the Hopper kernel needs an sm_90 GPU (H100/H200)");
  if (args.q_scales) {
    check(args.k_scales, "CUDA attention: INT8 scores need both q_scales and k_scales");
    check(has_hopper && args.kernel != FlashKernel::Portable,
          "CUDA attention: INT8 Q·Kᵀ (SageAttention) runs on the Hopper kernel only (an sm_90 "
          "GPU); use --attention-backend fa on this GPU");
    // The int8 rows' strides are bytes: TMA wants them in 16s.
    auto int8_aligned = [](const AttentionStrides& s) {
      return s.batch % 16 == 0 && s.token % 16 == 0 && s.head % 16 == 0;
    };
    check(int8_aligned(args.q_strides) && int8_aligned(args.k_strides),
          "CUDA attention: INT8 q and k strides must be multiples of 16 bytes");
  } else {
    check(!args.k_scales, "CUDA attention: k_scales without q_scales");
  }
  if (args.v_scales) {
    check(args.q_scales && !args.block_offsets,
          "CUDA attention: FP8 values (SageAttention2's P·V) need INT8 scores and dense mode");
    check(args.v_keys >= args.seq_k && args.v_keys % 128 == 0 && args.v_keys < (int64_t(1) << 31),
          "CUDA attention: FP8 value rows of {} keys for {} keys; fp8_value_keys gives the length",
          args.v_keys, args.seq_k);
  }
  if (args.reads_cubes()) {
    const int64_t* grid = args.video_grid;
    check(grid[1] > 0 && grid[2] > 0 && args.seq_q == grid[0] * grid[1] * grid[2] &&
              args.seq_k == args.seq_q,
          "CUDA attention: cubes of a {}x{}x{} video need {} query and key tokens, got {} and {}",
          grid[0], grid[1], grid[2], grid[0] * grid[1] * grid[2], args.seq_q, args.seq_k);
    check(has_hopper && args.kernel != FlashKernel::Portable,
          "CUDA attention: reading cubes in place needs the Hopper kernel (an sm_90 GPU)");
    check(args.lists_per_half && !args.key_block_lengths && !args.lse && !args.q_scales,
          "CUDA attention: cubes in place take lists per 64 rows, with no key lengths, no LSE "
          "and no INT8 scores");
    check(args.batch * grid[0] < (int64_t(1) << 31),
          "CUDA attention: {} batches of {} frames exceed the tensor copies' coordinates",
          args.batch, grid[0]);
    for (const AttentionStrides* s : {&args.q_strides, &args.k_strides, &args.v_strides})
      check(args.batch == 1 || s->batch == args.seq_q * s->token,
            "CUDA attention: cubes in place need contiguous batches (batch stride {} for {} "
            "tokens of stride {})",
            s->batch, args.seq_q, s->token);
  }
  const bool hopper =
      args.kernel == FlashKernel::Hopper || (args.kernel == FlashKernel::Auto && has_hopper);
  if (args.head_dim == 64)
    dispatch<64>(args, hopper, stream);
  else
    dispatch<128>(args, hopper, stream);
}

}  // namespace mmgen::cuda
