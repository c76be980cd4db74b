// NEON kernels (4 float lanes; every AArch64 CPU has them): the vector traits kernels_body.h is
// written over. Everything here and in the body is internal to this file (see kernels_body.h).
//
// NEON has no masked loads and no gathers. Masked loads and stores go through a small stack
// copy (only the last, partial vector of a row takes that path). A VQ table has 256 fp32
// entries, far more than the 64 bytes a four-register TBL can index, so a row's table entries
// are loaded lane by lane from L1: the gather the original engine also settled on for NEON.
#include <arm_neon.h>

#include <cstdint>
#include <cstring>

#include "engine/kernels/kernels.h"

namespace waste {
namespace {

struct Neon {
  using F = float32x4_t;
  struct M {
    int n;            // lanes [0, n) are in
    uint32x4_t bits;  // all-ones in those lanes
  };
  static constexpr int kLanes = 4;
  static constexpr int kDeltaVecs = 8;
  static constexpr int kRegisters = 32;

  static F zero() { return vdupq_n_f32(0.0f); }
  static F set1(float x) { return vdupq_n_f32(x); }
  static F load(const float* p) { return vld1q_f32(p); }
  static F loadu(const float* p) { return vld1q_f32(p); }
  static void store(float* p, F v) { vst1q_f32(p, v); }
  static void storeu(float* p, F v) { vst1q_f32(p, v); }
  static F add(F a, F b) { return vaddq_f32(a, b); }
  static F sub(F a, F b) { return vsubq_f32(a, b); }
  static F mul(F a, F b) { return vmulq_f32(a, b); }
  static F fma(F a, F b, F c) { return vfmaq_f32(c, a, b); }
  static void pin(F&) {}  // fmla takes no memory operand

  static M first(int64_t n) {
    const int k = n < 0 ? 0 : n > kLanes ? kLanes : (int)n;
    const int32_t lane[4] = {0, 1, 2, 3};
    return M{k, vcltq_s32(vld1q_s32(lane), vdupq_n_s32(k))};
  }
  static F load_m(const float* p, M m) {
    if (m.n == kLanes) return vld1q_f32(p);
    float t[kLanes] = {};
    std::memcpy(t, p, (size_t)m.n * 4);
    return vld1q_f32(t);
  }
  static void store_m(float* p, M m, F v) {
    if (m.n == kLanes) return vst1q_f32(p, v);
    float t[kLanes];
    vst1q_f32(t, v);
    std::memcpy(p, t, (size_t)m.n * 4);
  }
  static F fma_m(F a, F b, F c, M m) { return vbslq_f32(m.bits, vfmaq_f32(c, a, b), c); }

  // Lanes 2 apart, then 1 apart (vaddvq_f32 pairs neighbours first: another order).
  static float hsum(F v) {
    float32x2_t h = vadd_f32(vget_low_f32(v), vget_high_f32(v));
    return vget_lane_f32(h, 0) + vget_lane_f32(h, 1);
  }

  // Normal values by moving the exponent's bias (exponent 31 included, which vcvt_f32_f16
  // would make infinite), subnormals as mantissa * 2^-24, sign ORed back.
  static F f16(const uint16_t* h) {
    uint32x4_t w = vmovl_u16(vld1_u16(h));
    uint32x4_t mag = vandq_u32(w, vdupq_n_u32(0x7fff));
    uint32x4_t sign = vshlq_n_u32(veorq_u32(w, mag), 16);
    uint32x4_t normal = vaddq_u32(vshlq_n_u32(mag, 13), vdupq_n_u32(112u << 23));
    F man = vcvtq_f32_u32(vandq_u32(w, vdupq_n_u32(1023)));
    F sub = vmulq_f32(man, vdupq_n_f32(1.0f / 16777216.0f));
    uint32x4_t is_sub = vcltq_u32(mag, vdupq_n_u32(0x400));
    F v = vbslq_f32(is_sub, sub, vreinterpretq_f32_u32(normal));
    return vreinterpretq_f32_u32(vorrq_u32(vreinterpretq_u32_f32(v), sign));
  }

  // Q4G, 16 bytes (32 inputs) per step: low nibbles (even inputs) then high nibbles (odd),
  // each widened to 32 bits four bytes at a time; code - 8 is exact in float.
  static constexpr int kQ4StepBytes = 16, kQ4Vecs = 8;
  static int q4_input(int i, int p) { return 2 * (4 * (i % 4) + p) + i / 4; }
  static void q4(const uint8_t* p, F* f) {
    const uint8x16_t b = vld1q_u8(p);
    const uint8x16_t nib[2] = {vandq_u8(b, vdupq_n_u8(15)), vshrq_n_u8(b, 4)};
    const F eight = vdupq_n_f32(8.0f);
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
      const uint16x8_t w[2] = {vmovl_u8(vget_low_u8(nib[h])), vmovl_high_u8(nib[h])};
#pragma GCC unroll 2
      for (int u = 0; u < 2; u++) {
        f[4 * h + 2 * u] = vsubq_f32(vcvtq_f32_u32(vmovl_u16(vget_low_u16(w[u]))), eight);
        f[4 * h + 2 * u + 1] = vsubq_f32(vcvtq_f32_u32(vmovl_high_u16(w[u])), eight);
      }
    }
  }

  // Q8G, 16 bytes (16 inputs, in order) per step: sign-extended to 32 bits, then converted.
  static constexpr int kQ8StepBytes = 16, kQ8Vecs = 4;
  static void q8(const uint8_t* p, F* f) {
    const int8x16_t b = vld1q_s8((const int8_t*)p);
    const int16x8_t w[2] = {vmovl_s8(vget_low_s8(b)), vmovl_high_s8(b)};
#pragma GCC unroll 2
    for (int u = 0; u < 2; u++) {
      f[2 * u] = vcvtq_f32_s32(vmovl_s16(vget_low_s16(w[u])));
      f[2 * u + 1] = vcvtq_f32_s32(vmovl_high_s16(w[u]));
    }
  }
};

}  // namespace
}  // namespace waste

#include "engine/kernels/kernels_body.h"

namespace waste::detail {

const Kernels& neon_kernels() {
  static constexpr Kernels k = Body<Neon>::table(Isa::kNeon);
  return k;
}

}  // namespace waste::detail
