#pragma once
// The bf16 products on Intel's AMX tiles (Sapphire Rapids on), for core/gemm_cpu.cpp: there
// vdpbf16ps runs at half the float32 FMA rate, while one tdpbf16ps multiplies a 16 x 32 block of
// the input by a 32 x 16 block of the weight. The same numbers as the vector bf16 kernel: inputs
// rounded to bfloat16, pairs of exact products added to float32 chains over k in order, so a row
// does not depend on the rows beside it or the thread count.

#include <cstdint>

namespace mmgen::cpu::amx {

// Rows of a block (two tiles), pairs of k per tile step, outputs per panel (three tiles).
constexpr int64_t kBlockRows = 32;
constexpr int64_t kStepPairs = 16;

// Whether this build has AMX and the kernel lets this process use its tiles (asked once).
bool available();

// Rows [m0, m1) of c for the 48-wide panels [p0, p1). `input` holds rows of `pairs` bf16 pairs
// (uint32), padded with zero pairs to a multiple of kStepPairs and with zero rows to a multiple of
// kBlockRows; `panels` holds, per panel, `pairs` rows of 48 pairs (zero past n and past k).
void run_job(const uint32_t* input, const uint32_t* panels, int64_t pairs, const float* bias,
             float* c, int64_t m, int64_t n, int64_t m0, int64_t m1, int64_t p0, int64_t p1);

}  // namespace mmgen::cpu::amx
