// The x86 intrinsics header, included once with GCC 12's false "(may be) used uninitialised"
// warnings (GCC bug 105593, fixed in GCC 13) silenced at their source: its AVX-512 shuffles start
// from an "undefined" vector, and every inlined use (ours, Eigen's AVX-512 GEMM packing) then warns
// inside that header. GCC judges a warning by the pragma state where its location lies, so
// silencing the header's first inclusion covers every later use, and nothing outside it. Include
// this before Eigen or <immintrin.h>.
#pragma once

#if defined(__x86_64__) || defined(__i386__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)  // clang (the fuzz and tsan builds) has no such warning group
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif
