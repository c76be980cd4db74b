// AVX2 + FMA kernels (8 float lanes): the vector traits kernels_body.h is written over. Compiled
// with -mavx2 -mfma -mf16c; everything here and in the body is internal to this file (see
// kernels_body.h).
#include <immintrin.h>

#include <cstdint>

#include "engine/kernels/kernels.h"

namespace waste {
namespace {

struct Avx2 {
  using F = __m256;
  using M = __m256i;  // all-ones in the lanes a masked load or store touches
  static constexpr int kLanes = 8;
  static constexpr int kDeltaVecs = 4;
  static constexpr int kRegisters = 16;

  static F zero() { return _mm256_setzero_ps(); }
  static F set1(float x) { return _mm256_set1_ps(x); }
  static F load(const float* p) { return _mm256_load_ps(p); }
  static F loadu(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, F v) { _mm256_store_ps(p, v); }
  static void storeu(float* p, F v) { _mm256_storeu_ps(p, v); }
  static F add(F a, F b) { return _mm256_add_ps(a, b); }
  static F sub(F a, F b) { return _mm256_sub_ps(a, b); }
  static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F fma(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  static void pin(F& v) { asm("" : "+x"(v)); }

  static M first(int64_t n) {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    n = n < 0 ? 0 : n > kLanes ? kLanes : n;
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), lane);
  }
  static F load_m(const float* p, M m) { return _mm256_maskload_ps(p, m); }
  static void store_m(float* p, M m, F v) { _mm256_maskstore_ps(p, m, v); }
  static F fma_m(F a, F b, F c, M m) {
    return _mm256_blendv_ps(c, _mm256_fmadd_ps(a, b, c), _mm256_castsi256_ps(m));
  }

  static float hsum(F v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }

  // Normal values by moving the exponent's bias (exponent 31 included), subnormals as
  // mantissa * 2^-24, sign ORed back.
  static F f16(const uint16_t* h) {
    __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)h));
    __m256i mag = _mm256_and_si256(w, _mm256_set1_epi32(0x7fff));
    __m256i sign = _mm256_slli_epi32(_mm256_xor_si256(w, mag), 16);
    __m256i normal = _mm256_add_epi32(_mm256_slli_epi32(mag, 13), _mm256_set1_epi32(112 << 23));
    __m256 man = _mm256_cvtepi32_ps(_mm256_and_si256(w, _mm256_set1_epi32(1023)));
    __m256 sub = _mm256_mul_ps(man, _mm256_set1_ps(1.0f / 16777216.0f));
    __m256i is_sub = _mm256_cmpgt_epi32(_mm256_set1_epi32(0x400), mag);
    __m256 v = _mm256_blendv_ps(_mm256_castsi256_ps(normal), sub, _mm256_castsi256_ps(is_sub));
    return _mm256_or_ps(v, _mm256_castsi256_ps(sign));
  }

  // Q4G, 32 bytes (64 inputs) per step: nibbles are split with masks, widened by unpacking with
  // zero bytes and then with 0x4B00 words, which makes each lane the float 2^23 + code;
  // subtracting 2^23 + 8 leaves q = code - 8 exactly.
  static constexpr int kQ4StepBytes = 32, kQ4Vecs = 8;
  static int q4_input(int i, int p) {
    int byte = 16 * (p / 4) + 4 * (i % 4) + p % 4;
    return 2 * byte + i / 4;
  }
  static void q4(const uint8_t* p, F* f) {
    __m256i b = _mm256_loadu_si256((const __m256i*)p);
    __m256i mask = _mm256_set1_epi8(15), zero = _mm256_setzero_si256();
    __m256i magic = _mm256_set1_epi16(0x4B00);
    __m256 bias = _mm256_set1_ps(8388616.0f);  // 2^23 + 8
    __m256i nib[2] = {_mm256_and_si256(b, mask), _mm256_and_si256(_mm256_srli_epi16(b, 4), mask)};
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
      __m256i w[2] = {_mm256_unpacklo_epi8(nib[h], zero), _mm256_unpackhi_epi8(nib[h], zero)};
#pragma GCC unroll 2
      for (int u = 0; u < 2; u++) {
        __m256i lo = _mm256_unpacklo_epi16(w[u], magic), hi = _mm256_unpackhi_epi16(w[u], magic);
        f[4 * h + 2 * u] = _mm256_sub_ps(_mm256_castsi256_ps(lo), bias);
        f[4 * h + 2 * u + 1] = _mm256_sub_ps(_mm256_castsi256_ps(hi), bias);
      }
    }
  }

  // Q8G, 32 bytes (32 inputs, in order) per step: sign-extending loads and a conversion.
  static constexpr int kQ8StepBytes = 32, kQ8Vecs = 4;
  static void q8(const uint8_t* p, F* f) {
#pragma GCC unroll 4
    for (int i = 0; i < kQ8Vecs; i++) {
      __m128i q = _mm_loadl_epi64((const __m128i*)(p + 8 * i));
      f[i] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q));
    }
  }
};

}  // namespace
}  // namespace waste

#include "engine/kernels/kernels_body.h"

namespace waste::detail {

const Kernels& avx2_kernels() {
  static constexpr Kernels k = Body<Avx2>::table(Isa::kAvx2);
  return k;
}

}  // namespace waste::detail
