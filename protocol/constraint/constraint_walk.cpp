#include "protocol/constraint/constraint_walk.h"

#include <algorithm>
#include <chrono>

#include "engine/base/error.h"
#include "engine/base/rng.h"

namespace waste {
namespace {

// Ids whose bytes close something (a quote, bracket, brace, colon or comma), and specials.
std::vector<uint8_t> closers(const TokenIndex& index) {
  std::vector<uint8_t> bits(index.mask_bytes());
  for (int id = 0; id < index.vocab(); ++id)
    if (index.is_special(id) || index.bytes(id).find_first_of("\"]},:") != std::string::npos)
      bits[id >> 3] |= (uint8_t)(1 << (id & 7));
  return bits;
}

// The k-th set bit of `a & b` (`b` may be null), or -1; `count` gets the number of set bits.
int kth_bit(const std::vector<uint8_t>& a, const std::vector<uint8_t>* b, uint64_t k, int* count) {
  int n = 0, found = -1;
  for (size_t i = 0; i < a.size(); ++i) {
    uint8_t x = a[i] & (b ? (*b)[i] : 0xFF);
    for (; x; x &= (uint8_t)(x - 1), ++n)
      if ((uint64_t)n == k) found = (int)(i * 8) + __builtin_ctz(x);
  }
  *count = n;
  return found;
}

}  // namespace

ConstraintWalk random_walk(const std::shared_ptr<const Grammar>& g, const TokenIndex& index,
                           uint64_t seed, int max_steps) {
  const std::vector<uint8_t> close_bits = closers(index);
  TokenConstraint c(g, index);
  std::vector<uint8_t> mask(index.mask_bytes());
  Rng rng(seed);
  ConstraintWalk w;
  for (int step = 0; step < max_steps && !c.done(); ++step) {
    auto t0 = std::chrono::steady_clock::now();
    c.mask(mask.data());
    w.mask_micros.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    int all = 0, closing = 0, n;
    kth_bit(mask, nullptr, UINT64_MAX, &all);
    kth_bit(mask, &close_bits, UINT64_MAX, &closing);
    if (all == 0) fail<UsageError>("the constraint allowed no token after {:?}", w.text);
    bool close = closing > 0 && rng.uniform() < std::min(0.9, 0.3 + step / 200.0);
    int id = close ? kth_bit(mask, &close_bits, rng.next() % closing, &n)
                   : kth_bit(mask, nullptr, rng.next() % all, &n);
    c.accept(id);
    w.ids.push_back(id);
    if (!index.is_special(id)) w.text += index.bytes(id);
  }
  w.finished = c.done();
  return w;
}

}  // namespace waste
