// SageAttention's INT8 quantisation of Q and K on the GPU, for the INT8 score kernel
// (FlashAttentionArgs::q_scales): bf16 rows in, int8 rows of kInt8Width out (head_dim zero-padded)
// with one float scale per group of rows. The integer values equal the CPU quantisers' to the bit,
// so the GPU's integer dot products are the CPU's; two CPU quantisers exist and each is reproduced
// operation for operation (Int8Arithmetic).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace mmgen::cuda {

// Which rows share a scale (attention/kernels/sage_quant.h's groups; SLA's are runs of rows):
//   Runs:        rows [g·run, (g + 1)·run)  (sage per_block / per_warp, SLA's slices and blocks)
//   QueryThread: row r in group (r / 32)·8 + r mod 8  (sage per_thread queries)
//   KeyThread:   row r in group (r / 64)·4 + (r mod 8) / 2  (sage per_thread keys)
enum class Int8Groups { Runs, QueryThread, KeyThread };

// The arithmetic of the CPU quantiser to reproduce:
//   Sage (attention/kernels/sage_quant.cpp, sage_attention.cpp): smoothing x − float(mean); scale =
//     max / 127 (1 for an all-zero group); level = round(x / scale);
//   Sla (attention/kernels/sla_quant.cpp): smoothing float(x − mean) in double; x·multiplier first;
//     step = max / 127, level = round(x' · (1 / step)); an all-zero group stays zero (scale 0).
// round() is half away from zero in both, levels clamped to ±127.
enum class Int8Arithmetic { Sage, Sla };

struct Int8QuantizeArgs {
  const void* x = nullptr;  // bf16 [batch, seq, heads·head_dim], token stride `row_stride`
  int64_t row_stride = 0;   // elements between consecutive tokens
  int64_t batch = 0, seq = 0, heads = 0, head_dim = 0;
  bool smooth = false;      // subtract each channel's mean over the tokens first (K)
  float multiplier = 1.0f;  // Sla: x is multiplied by it before quantising (SLA's q·scale)
  Int8Groups groups = Int8Groups::Runs;
  int64_t run = 64;  // Runs: rows per group
  Int8Arithmetic arithmetic = Int8Arithmetic::Sage;
  int8_t* out = nullptr;  // [batch, seq, heads, kInt8Width]
  // Query form: the scale of every row, [batch, heads, seq]. Key form: the scale of each 64-key
  // block's four fragment groups, [batch, heads, ceil(seq / 64), 4] (rows 8i + 2g and 8i + 2g + 1
  // of a block share entry g, true of every grouping the keys use). One of the two is set.
  float* row_scales = nullptr;
  float* block_scales = nullptr;
};

// Runs on `stream` with scratch memory of its own (allocated per call).
void int8_quantize(const Int8QuantizeArgs& args, cudaStream_t stream = nullptr);

}  // namespace mmgen::cuda
