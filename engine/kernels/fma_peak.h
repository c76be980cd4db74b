// The fp32 arithmetic peak of one core: a loop of independent fused multiply-adds that never
// leaves the registers, in an instruction set's widest vectors. `waste bench --kernels` measures
// it in the same run as the kernels and gives each kernel's rate as a fraction of it.
#pragma once

#include <cstdint>

#include "engine/kernels/kernels.h"

namespace waste {

// Each chain is acc += b * m, the accumulator as the addend (fmla's destination on arm64, so no
// register copies); it grows by 5e-7 a round from a small integer, so no value ever becomes
// subnormal or overflows.
//
// Runs `rounds` rounds of the loop in `isa`'s widest vectors and returns the floating-point
// operations done (2 per lane per fma). `isa` is not kScalar and this CPU supports it: each CPU
// family's file (fma_peak_avx2.cpp on x86-64, fma_peak_neon.cpp on arm64) is compiled for that
// family's vector instructions.
double fma_loop(Isa isa, int64_t rounds);

}  // namespace waste
