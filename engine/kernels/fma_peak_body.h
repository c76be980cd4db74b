// The FMA peak loop written once (see fma_peak.h); each instruction set's file supplies its vector
// operations and how many chains keep its fma pipes full.
#pragma once

#include <cstdint>

namespace waste {

// V: `Reg` (a register of `kLanes` floats), `set1(float)`, `fma(b, m, acc)` = acc + b·m with acc
// as the addend, `add(a, b)`, and `keep(Reg)`, which keeps a value live without a store in the
// loop.
template <class V, int kChains>
double fma_chains(int64_t rounds) {
  using R = typename V::Reg;
  const R b = V::set1(1e-6f), m = V::set1(0.5f);
  R acc[kChains];
#pragma GCC unroll 32
  for (int c = 0; c < kChains; c++) acc[c] = V::set1((float)c);
  for (int64_t r = 0; r < rounds; r++)
#pragma GCC unroll 32  // every chain in its own register
    for (int c = 0; c < kChains; c++) acc[c] = V::fma(b, m, acc[c]);
  R sum = acc[0];
#pragma GCC unroll 32
  for (int c = 1; c < kChains; c++) sum = V::add(sum, acc[c]);
  V::keep(sum);
  return 2.0 * V::kLanes * kChains * (double)rounds;
}

}  // namespace waste
