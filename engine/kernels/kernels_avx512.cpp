// AVX-512 kernels (16 float lanes; F, BW, VL, DQ): the vector traits kernels_body.h is written
// over. Everything here and in the body is internal to this file (see kernels_body.h).
// GCC 12's AVX-512 headers trip -W(maybe-)uninitialized on their own _mm512_undefined_* idiom
// (a known false positive, GCC PR 105593); silenced for this file only.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <cstdint>

#include "engine/kernels/kernels.h"

namespace waste {
namespace {

struct Avx512 {
  using F = __m512;
  using M = __mmask16;
  static constexpr int kLanes = 16;
  static constexpr int kDeltaVecs = 8;
  static constexpr int kRegisters = 32;

  static F zero() { return _mm512_setzero_ps(); }
  static F set1(float x) { return _mm512_set1_ps(x); }
  static F load(const float* p) { return _mm512_load_ps(p); }
  static F loadu(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, F v) { _mm512_store_ps(p, v); }
  static void storeu(float* p, F v) { _mm512_storeu_ps(p, v); }
  static F add(F a, F b) { return _mm512_add_ps(a, b); }
  static F sub(F a, F b) { return _mm512_sub_ps(a, b); }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F fma(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static void pin(F& v) { asm("" : "+v"(v)); }

  static M first(int64_t n) { return n <= 0 ? (M)0 : n >= kLanes ? (M)0xffff : (M)((1u << n) - 1); }
  static F load_m(const float* p, M m) { return _mm512_maskz_loadu_ps(m, p); }
  static void store_m(float* p, M m, F v) { _mm512_mask_storeu_ps(p, m, v); }
  static F fma_m(F a, F b, F c, M m) { return _mm512_mask3_fmadd_ps(a, b, c, m); }

  static float hsum(F v) {
    __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }

  // Normal values by moving the exponent's bias (exponent 31 included), subnormals as
  // mantissa * 2^-24, sign ORed back.
  static F f16(const uint16_t* h) {
    __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)h));
    __m512i mag = _mm512_and_si512(w, _mm512_set1_epi32(0x7fff));
    __m512i sign = _mm512_slli_epi32(_mm512_xor_si512(w, mag), 16);
    __m512i normal = _mm512_add_epi32(_mm512_slli_epi32(mag, 13), _mm512_set1_epi32(112 << 23));
    __m512 man = _mm512_cvtepi32_ps(_mm512_and_si512(w, _mm512_set1_epi32(1023)));
    __m512 sub = _mm512_mul_ps(man, _mm512_set1_ps(1.0f / 16777216.0f));
    __mmask16 is_sub = _mm512_cmplt_epi32_mask(mag, _mm512_set1_epi32(0x400));
    __m512 v = _mm512_mask_blend_ps(is_sub, _mm512_castsi512_ps(normal), sub);
    return _mm512_or_ps(v, _mm512_castsi512_ps(sign));
  }

  // Q4G, 64 bytes (a whole group) per step: nibbles are split with masks, widened by unpacking
  // with zero bytes and then with 0x4B00 words, which makes each lane the float 2^23 + code;
  // subtracting 2^23 + 8 leaves q = code - 8 exactly.
  static constexpr int kQ4StepBytes = 64, kQ4Vecs = 8;
  static int q4_input(int i, int p) {
    int byte = 16 * (p / 4) + 4 * (i % 4) + p % 4;
    return 2 * byte + i / 4;
  }
  static void q4(const uint8_t* p, F* f) {
    __m512i b = _mm512_loadu_si512(p);
    __m512i mask = _mm512_set1_epi8(15), zero = _mm512_setzero_si512();
    __m512i magic = _mm512_set1_epi16(0x4B00);
    __m512 bias = _mm512_set1_ps(8388616.0f);  // 2^23 + 8
    __m512i nib[2] = {_mm512_and_si512(b, mask), _mm512_and_si512(_mm512_srli_epi16(b, 4), mask)};
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
      __m512i w[2] = {_mm512_unpacklo_epi8(nib[h], zero), _mm512_unpackhi_epi8(nib[h], zero)};
#pragma GCC unroll 2
      for (int u = 0; u < 2; u++) {
        __m512i lo = _mm512_unpacklo_epi16(w[u], magic), hi = _mm512_unpackhi_epi16(w[u], magic);
        f[4 * h + 2 * u] = _mm512_sub_ps(_mm512_castsi512_ps(lo), bias);
        f[4 * h + 2 * u + 1] = _mm512_sub_ps(_mm512_castsi512_ps(hi), bias);
      }
    }
  }

  // A VQ tile's weight vectors hold two rows' 8 weights; each token's 8 inputs meet both.
  static F join8(const float* a, const float* b) {
    return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_loadu_ps(a)), _mm256_loadu_ps(b), 1);
  }
  static F dup8(const float* p) {
    return _mm512_broadcast_f32x8(_mm256_loadu_ps(p));
  }

  // Q8G, 64 bytes (64 inputs, in order) per step: sign-extending loads and a conversion.
  static constexpr int kQ8StepBytes = 64, kQ8Vecs = 4;
  static void q8(const uint8_t* p, F* f) {
#pragma GCC unroll 4
    for (int i = 0; i < kQ8Vecs; i++) {
      __m128i q = _mm_loadu_si128((const __m128i*)(p + 16 * i));
      f[i] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q));
    }
  }
};

}  // namespace
}  // namespace waste

#include "engine/kernels/kernels_body.h"

namespace waste::detail {

const Kernels& avx512_kernels() {
  static constexpr Kernels k = Body<Avx512>::table(Isa::kAvx512);
  return k;
}

}  // namespace waste::detail
