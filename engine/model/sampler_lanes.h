// The sampler's passes over the whole vocabulary, written once over W-lane GCC/Clang vector
// extensions and compiled once per table: 4 lanes in sampler.cpp (the baseline: SSE2 on x86-64,
// NEON on arm64) and 8 in sampler_avx2.cpp. The build compiles both files with -ffp-contract=off,
// so no multiply-add is fused into an fma; lanes never mix and the double sums keep one
// association, so every table gives the same bits and a seed draws the same tokens on every
// machine. (There is no AVX-512 table; those machines use the AVX2 one.)
//
// Everything below but SamplerKernels has internal linkage: each file that includes this header
// compiles its own copy for its own instruction set, so the linker never hands the baseline a
// helper compiled for AVX2. For the same reason the passes instantiate no standard-library
// template that other files share (the top-k heap is the caller's buffer, not a vector).
#pragma once

#include <algorithm>
#include <cfloat>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <utility>

#include "engine/kernels/kernels.h"

namespace waste {

// One table per instruction set; all compute the same bits.
struct SamplerKernels {
  using Cand = std::pair<float, int>;  // (logit or weight, id)
  // dst = the sanitized logits of src (see sanitize below) for the vocab ids; returns the best.
  Cand (*load)(const float* src, float* dst, size_t vocab, const uint8_t* mask);
  Cand (*find_max)(const float* x, size_t n);
  // Weights and per-block sums of `blocks` blocks; returns the total.
  double (*weights)(const float* x, float* w, double* sums, size_t blocks, float max, float inv_t);
  void (*cut)(float* v, size_t n, float threshold, int last_tie, float replacement);
  size_t (*collect)(const float* w, size_t n, float t, Cand* out);
  size_t (*top_k)(const float* x, size_t n, size_t k, Cand* heap);
};

// The table in 4 lanes, which every CPU runs (sampler.cpp).
const SamplerKernels& baseline_sampler_kernels();
// The table in the widest vectors that every non-scalar Isa of this CPU family has (AVX2 on
// x86-64, in sampler_avx2.cpp), or null where the baseline's 4 lanes already are that (arm64,
// sampler_arm64.cpp). Only for a CPU whose detect_isa() is not kScalar: its file may be compiled
// for those instructions.
const SamplerKernels* vector_sampler_kernels();

namespace {

using Cand = SamplerKernels::Cand;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
// Ids per draw block: the dense draw finds its block from per-block sums, then scans one block.
// Every buffer is padded to a whole block (-inf logits, zero weights), so passes need no tail.
constexpr int kBlock = 256;
// Below this scaled logit the weight is treated as zero, which keeps exp's result a normal float.
constexpr float kMinExponent = -86.0f;

// Higher value first, then the lower id: the order greedy, top-k and top-p break ties by.
[[gnu::always_inline]] inline bool better(const Cand& a, const Cand& b) {
  return a.first > b.first || (a.first == b.first && a.second < b.second);
}

// NaN becomes -inf (never chosen), +inf the largest float (so max-subtraction never computes
// inf - inf), and an id the mask disallows -inf.
inline float sanitize(float x, const uint8_t* mask, size_t i) {
  if (x != x || (mask && !(mask[i / 8] >> (i % 8) & 1))) return kNegInf;
  return x > FLT_MAX ? FLT_MAX : x;
}

// No function takes or returns a vector by value (loads and stores go through pointers, blends
// through a macro), which keeps GCC and Clang quiet about the AVX argument-passing ABI.
template <int W>
struct Lanes;
// (typedef, not using: Clang honours a lowered alignment only on a typedef.)
template <>
struct Lanes<4> {
  typedef float F __attribute__((vector_size(16)));
  typedef int32_t I __attribute__((vector_size(16)));
  typedef double D __attribute__((vector_size(16)));
  typedef float Fu __attribute__((vector_size(16), aligned(4), may_alias));  // unaligned view
  typedef float Hu __attribute__((vector_size(8), aligned(4), may_alias));   // half of Fu
  static constexpr I iota = {0, 1, 2, 3};
  static constexpr I bit = {1, 2, 4, 8};
};
template <>
struct Lanes<8> {
  typedef float F __attribute__((vector_size(32)));
  typedef int32_t I __attribute__((vector_size(32)));
  typedef double D __attribute__((vector_size(32)));
  typedef float Fu __attribute__((vector_size(32), aligned(4), may_alias));
  typedef float Hu __attribute__((vector_size(16), aligned(4), may_alias));
  static constexpr I iota = {0, 1, 2, 3, 4, 5, 6, 7};
  static constexpr I bit = {1, 2, 4, 8, 16, 32, 64, 128};
};

#define WASTE_INLINE [[gnu::always_inline]] inline
// Lanes of a where mask is set, else lanes of b.
#define WASTE_SELECT(mask, a, b) ((mask) ? (a) : (b))
#define WASTE_LANE_TYPES(W)       \
  using F = typename Lanes<W>::F; \
  using I = typename Lanes<W>::I; \
  using Fu = typename Lanes<W>::Fu

// For std heap functions: a function object, so the comparison inlines into the vector code.
struct Better {
  WASTE_INLINE bool operator()(const Cand& a, const Cand& b) const { return better(a, b); }
};

template <class I>
WASTE_INLINE bool any_lane(const I& mask) {
  uint64_t q[sizeof(I) / 8];
  std::memcpy(q, &mask, sizeof q);
  uint64_t any = 0;
  for (uint64_t x : q) any |= x;
  return any != 0;
}

// Running per-lane maxima over two interleaved chains (independent, so they run in parallel).
// Strict > keeps each lane's first occurrence; the reduction prefers the lowest id among equal
// maxima, so ties go to the lowest id overall.
template <int W>
struct MaxLanes {
  using F = typename Lanes<W>::F;
  using I = typename Lanes<W>::I;
  F best[2] = {F{} + kNegInf, F{} + kNegInf};
  I id[2] = {Lanes<W>::iota, Lanes<W>::iota + W};
  I best_id[2] = {id[0], id[1]};

  WASTE_INLINE void add(int c, const F& v) {
    I gt = v > best[c];
    best[c] = WASTE_SELECT(gt, v, best[c]);
    best_id[c] = WASTE_SELECT(gt, id[c], best_id[c]);
    id[c] += 2 * W;
  }
  WASTE_INLINE Cand reduce() const {
    Cand r{kNegInf, 0};
    for (int c = 0; c < 2; c++) {
      for (int l = 0; l < W; l++) {
        Cand lane{(float)best[c][l], (int)best_id[c][l]};
        if (better(lane, r)) r = lane;
      }
    }
    return r;
  }
};

// dst = sanitize(src) for the vocab ids (the padding after them stays -inf); returns the best.
template <int W>
Cand load_body(const float* src, float* dst, size_t vocab, const uint8_t* mask) {
  WASTE_LANE_TYPES(W);
  const F neg_inf = F{} + kNegInf, big = F{} + FLT_MAX;
  MaxLanes<W> max;
  size_t i = 0;
  for (; i + 2 * W <= vocab; i += 2 * W) {
    for (int c = 0; c < 2; c++) {
      size_t j = i + c * W;
      F v = *(const Fu*)(src + j);
      v = WASTE_SELECT(v > big, big, v);
      I keep = v == v;
      if (mask) {
        int32_t bits = mask[j / 8] >> (j % 8);  // W divides 8: one byte holds the group
        keep &= ((I{} + bits) & Lanes<W>::bit) != 0;
      }
      v = WASTE_SELECT(keep, v, neg_inf);
      *(Fu*)(dst + j) = v;
      max.add(c, v);
    }
  }
  Cand best = max.reduce();
  for (; i < vocab; i++) {
    dst[i] = sanitize(src[i], mask, i);
    if (better({dst[i], (int)i}, best)) best = {dst[i], (int)i};
  }
  return best;
}

template <int W>
Cand find_max_body(const float* x, size_t n) {
  using F = typename Lanes<W>::F;
  using Fu = typename Lanes<W>::Fu;
  MaxLanes<W> max;
  for (size_t i = 0; i < n; i += 2 * W) {
    for (int c = 0; c < 2; c++) {
      F v = *(const Fu*)(x + i + W * c);
      max.add(c, v);
    }
  }
  return max.reduce();
}

// One block of w = exp((x - max) * inv_t), by Cephes expf (Cody-Waite reduction, degree-5
// polynomial, within 1 ulp over [-86, 0]); exp(0) is exactly 1, arguments below kMinExponent (-inf
// too) give 0.
template <int W>
WASTE_INLINE void exp_block(const float* x, float* w, float max, float inv_t) {
  WASTE_LANE_TYPES(W);
  const F lowest = F{} + kMinExponent;
  const F magic = F{} + 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  for (int i = 0; i < kBlock; i += W) {
    F z = (*(const Fu*)(x + i) - max) * inv_t;
    I live = z >= lowest;
    z = WASTE_SELECT(live, z, lowest);
    F t = z * 1.44269504088896341f + magic;
    F k = t - magic;
    F r = z - k * 0.693359375f + k * 2.12194440e-4f;
    F p = (F{} + 1.9875691500e-4f) * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    F y = p * r * r + r + 1.0f;
    I scale = (((I)t - 0x4B400000) + 127) << 23;  // 2^k
    *(Fu*)(w + i) = (F)((I)(y * (F)scale) & live);
  }
}

// The sum of one block in double. Whatever W, lane o of the accumulators sums the ids = o mod 8
// of the block in order, and the eight lanes are combined in one fixed order.
template <int W>
WASTE_INLINE double sum_block(const float* w) {
  using D = typename Lanes<W>::D;
  using Hu = typename Lanes<W>::Hu;
  constexpr int kHalf = W / 2, kAcc = 8 / kHalf;
  D acc[kAcc] = {};
  for (int i = 0; i < kBlock; i += 8)
#pragma GCC unroll 4
    for (int a = 0; a < kAcc; a++)
      acc[a] += __builtin_convertvector(*(const Hu*)(w + i + a * kHalf), D);
  double l[8];
  for (int o = 0; o < 8; o++) l[o] = acc[o / kHalf][o % kHalf];
  return ((l[0] + l[4]) + (l[1] + l[5])) + ((l[2] + l[6]) + (l[3] + l[7]));
}

// Weights and per-block sums in one pass (each block is summed while still in cache).
template <int W>
double weights_body(const float* x, float* w, double* sums, size_t blocks, float max, float inv_t) {
  double total = 0;
  for (size_t b = 0; b < blocks; b++) {
    exp_block<W>(x + b * kBlock, w + b * kBlock, max, inv_t);
    sums[b] = sum_block<W>(w + b * kBlock);
    total += sums[b];
  }
  return total;
}

// Keeps v[i] when v[i] > threshold, or v[i] == threshold and i <= last_tie; else `replacement`.
template <int W>
void cut_body(float* v, size_t n, float threshold, int last_tie, float replacement) {
  WASTE_LANE_TYPES(W);
  const F fill = F{} + replacement;
  I id = Lanes<W>::iota;
  for (size_t i = 0; i < n; i += W, id += W) {
    F x = *(const Fu*)(v + i);
    I keep = (x > threshold) | ((x == threshold) & (id <= last_tie));
    *(Fu*)(v + i) = WASTE_SELECT(keep, x, fill);
  }
}

// Writes (w[i], i) for every w[i] >= t to out, in id order; returns how many. Groups of W with no
// hit cost one compare; within a group every lane is written and only hits advance, since hits
// scatter too much for a branch to predict (out has room: the count never passes i).
template <int W>
size_t collect_body(const float* w, size_t n, float t, Cand* out) {
  using Fu = typename Lanes<W>::Fu;
  size_t count = 0;
  for (size_t i = 0; i < n; i += W) {
    if (!any_lane(*(const Fu*)(w + i) >= t)) continue;
    for (int l = 0; l < W; l++) {
      out[count] = {w[i + l], (int)(i + l)};
      count += w[i + l] >= t;
    }
  }
  return count;
}

// The k best (logit, id) pairs, as a heap with the worst on top, in heap[0, returned count);
// heap has room for k. Ids arrive in increasing order, so a later logit equal to the worst kept
// one loses its tie: only a strictly greater logit gets in, and groups of W with none cost one
// compare.
template <int W>
size_t top_k_body(const float* x, size_t n, size_t k, Cand* heap) {
  using Fu = typename Lanes<W>::Fu;
  size_t size = 0;
  float worst = kNegInf;  // until the heap is full, every finite logit gets in
  for (size_t i = 0; i < n; i += W) {
    if (!any_lane(*(const Fu*)(x + i) > worst)) continue;
    for (int l = 0; l < W; l++) {
      if (!(x[i + l] > worst)) continue;
      if (size == k) {
        std::pop_heap(heap, heap + size, Better{});
        size--;
      }
      heap[size++] = {x[i + l], (int)(i + l)};
      std::push_heap(heap, heap + size, Better{});
      if (size == k) worst = heap[0].first;
    }
  }
  return size;
}

// The passes in W lanes, as a table.
template <int W>
constexpr SamplerKernels sampler_table() {
  return {load_body<W>, find_max_body<W>, weights_body<W>,
          cut_body<W>,  collect_body<W>,  top_k_body<W>};
}

#undef WASTE_LANE_TYPES
#undef WASTE_SELECT
#undef WASTE_INLINE

}  // namespace

}  // namespace waste
