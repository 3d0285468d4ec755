// Scheduler arithmetic must round every product and sum on its own, as numpy and torch do, to
// reproduce diffusers' numbers. GCC fuses a·b + c into one FMA by default in C++ (which rounds
// once), so functions doing such arithmetic are marked MMGEN_EXACT_FP. Clang only fuses within
// one expression (-ffp-contract=on), which the code avoids by giving each product its own
// statement where it matters.
#pragma once

#if defined(__GNUC__) && !defined(__clang__)
#define MMGEN_EXACT_FP __attribute__((optimize("fp-contract=off")))
#else
#define MMGEN_EXACT_FP
#endif
