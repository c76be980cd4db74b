// A small seeded generator (splitmix64 seeding xoshiro256**): the same seed gives the same
// stream on every machine, which synthetic containers and tests rely on.
#pragma once

#include <cstdint>

namespace waste {

class Rng {
 public:
  explicit Rng(uint64_t seed) {
    for (uint64_t& s : s_) {
      seed += 0x9e3779b97f4a7c15ull;
      uint64_t z = seed;
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
      s = z ^ (z >> 31);
    }
  }
  uint64_t next() {
    uint64_t r = rotl(s_[1] * 5, 7) * 9, t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return r;
  }
  // Uniform in [0, 1).
  double uniform() { return (double)(next() >> 11) * (1.0 / 9007199254740992.0); }
  float uniform(float lo, float hi) { return lo + (hi - lo) * (float)uniform(); }
  uint32_t below(uint32_t n) { return (uint32_t)((next() >> 32) * n >> 32); }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

}  // namespace waste
