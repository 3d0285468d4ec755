#include "core/gemm_amx.h"

#include <algorithm>
#include <cstring>

#if defined(__AMX_TILE__) && defined(__AMX_BF16__)
#define MMGEN_GEMM_AMX 1
#include <sys/syscall.h>
#include <unistd.h>

#include "core/x86_intrinsics.h"
#endif

namespace mmgen::cpu::amx {

#ifdef MMGEN_GEMM_AMX
namespace {

constexpr int64_t kPanel = 48;  // gemm_cpu.cpp's panel: three tiles of 16 outputs

// Linux hands out the tile registers' state only on request (arch/x86/include/uapi/asm/prctl.h).
constexpr int kArchReqXcompPerm = 0x1023;
constexpr int kXfeatureXtiledata = 18;

bool permitted() {
  static const bool granted = syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  return granted;
}

// tmm0..5: the 2 x 3 tiles of c (16 rows x 16 floats); tmm6 a 16 x 16-pair tile of the input,
// tmm7 a 16-pair x 16-output tile of a panel. Every tile is 16 rows of 64 bytes.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t bytes_per_row[16] = {};
  uint8_t rows[16] = {};
};

// The tile shapes are a thread's state: set once on each thread that runs a job.
void configure_this_thread() {
  thread_local bool configured = false;
  if (configured) return;
  TileConfig config;
  for (int t = 0; t < 8; ++t) {
    config.bytes_per_row[t] = 64;
    config.rows[t] = 16;
  }
  _tile_loadconfig(&config);
  configured = true;
}

// 32 rows x 48 outputs over all pairs: c tiles (i, j) for input tile i and panel tile j. The order
// walks j up for i = 0 and down for i = 1, so each turn reuses the panel tile it ends on.
void block(const uint32_t* a, int64_t lda_bytes, const uint32_t* panel, int64_t pairs, float* out) {
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_zero(4);
  _tile_zero(5);
  constexpr int64_t kPanelBytes = kPanel * 4;
  for (int64_t q = 0; q < pairs; q += kStepPairs) {
    const uint32_t* b = panel + q * kPanel;
    const uint32_t* a0 = a + q;
    _tile_loadd(6, a0, lda_bytes);
    _tile_loadd(7, b, kPanelBytes);
    _tile_dpbf16ps(0, 6, 7);
    _tile_loadd(7, b + 16, kPanelBytes);
    _tile_dpbf16ps(1, 6, 7);
    _tile_loadd(7, b + 32, kPanelBytes);
    _tile_dpbf16ps(2, 6, 7);
    _tile_loadd(6, reinterpret_cast<const char*>(a0) + 16 * lda_bytes, lda_bytes);
    _tile_dpbf16ps(5, 6, 7);
    _tile_loadd(7, b + 16, kPanelBytes);
    _tile_dpbf16ps(4, 6, 7);
    _tile_loadd(7, b, kPanelBytes);
    _tile_dpbf16ps(3, 6, 7);
  }
  // out: 32 rows x 48 floats.
  constexpr int64_t kOutBytes = kPanel * 4;
  _tile_stored(0, out, kOutBytes);
  _tile_stored(1, out + 16, kOutBytes);
  _tile_stored(2, out + 32, kOutBytes);
  _tile_stored(3, out + 16 * kPanel, kOutBytes);
  _tile_stored(4, out + 16 * kPanel + 16, kOutBytes);
  _tile_stored(5, out + 16 * kPanel + 32, kOutBytes);
}

}  // namespace

bool available() {
  return permitted();
}

void run_job(const uint32_t* input, const uint32_t* panels, int64_t pairs, const float* bias,
             float* c, int64_t m, int64_t n, int64_t m0, int64_t m1, int64_t p0, int64_t p1) {
  configure_this_thread();
  alignas(64) float out[kBlockRows * kPanel];
  const int64_t lda_bytes = pairs * 4;
  for (int64_t p = p0; p < p1; ++p) {
    const int64_t n0 = p * kPanel, width = std::min(kPanel, n - n0);
    const uint32_t* panel = panels + p * kPanel * pairs;
    for (int64_t r = m0; r < m1; r += kBlockRows) {
      block(input + r * pairs, lda_bytes, panel, pairs, out);
      const int64_t rows = std::min({kBlockRows, m1 - r, m - r});
      for (int64_t i = 0; i < rows; ++i) {
        float* to = c + (r + i) * n + n0;
        const float* from = out + i * kPanel;
        if (bias)
          for (int64_t j = 0; j < width; ++j) to[j] = from[j] + bias[n0 + j];
        else
          std::memcpy(to, from, size_t(width) * sizeof(float));
      }
    }
  }
}

#else

bool available() {
  return false;
}

// Never called: gemm_cpu.cpp takes the tiles only where available() says so.
void run_job(const uint32_t*, const uint32_t*, int64_t, const float*, float*, int64_t, int64_t,
             int64_t, int64_t, int64_t, int64_t) {}

#endif

}  // namespace mmgen::cpu::amx
