// The NEON nearest-entry search (NEON is part of every arm64 CPU, so this file needs no flags).
// As in the AVX-512 one, the book is dimension-major, so one register holds 4 entries and each
// lane runs the scalar kernel's chain for its entry: acc = |c|^2, then acc = fma(-2x_d, c_d, acc)
// for d = 0..7, each vfmaq rounding once as std::fma does. Four vectors share each book load
// (32 registers: 8 for their -2x, 8 for the book block, 8 for their minima). Each vector keeps a
// per-lane minimum with strict `<` in ascending order, i.e. the first minimum of the lane's
// entries; the final merge takes the smallest distance and, among equal ones, the lowest index:
// the scalar answer.
#include <arm_neon.h>

#include "engine/convert/vq_encode_arm64.h"

namespace waste::detail {

namespace {

constexpr int kPass = 4;  // vectors per pass

// The lowest index among the lanes holding the smallest distance (no lane holds NaN: a lane
// only ever takes a distance that compared less than its minimum).
int merge_lanes(float32x4_t best, uint32x4_t id) {
  const uint32x4_t eq = vceqq_f32(best, vdupq_n_f32(vminvq_f32(best)));
  return (int)vminvq_u32(vbslq_u32(eq, id, vdupq_n_u32(1u << 30)));
}

// Vectors 0-3 of x (one dimension-major group, offset to its first lane) against the whole book.
void nearest_four(const SearchView& b, const float* x, uint8_t* idx) {
  const float* t = b.t;
  const int P = b.padded;
  float32x4_t lo[kPass], hi[kPass];  // -2x_d of each vector, dims 0-3 and 4-7
  float32x4_t best[kPass];
  uint32x4_t id[kPass];
  for (int i = 0; i < kPass; i++) {
    float m[8];
    for (int d = 0; d < 8; d++) m[d] = -2.0f * x[d * 8 + i];
    lo[i] = vld1q_f32(m);
    hi[i] = vld1q_f32(m + 4);
    best[i] = vdupq_n_f32(__builtin_inff());
    id[i] = vdupq_n_u32(0);
  }
  const uint32x4_t four = vdupq_n_u32(4);
  uint32x4_t cur = {0, 1, 2, 3};
  for (int c = 0; c < P; c += 4) {  // padded is a multiple of 16
    float32x4_t cd[8];
    for (int d = 0; d < 8; d++) cd[d] = vld1q_f32(t + d * P + c);
    const float32x4_t norms = vld1q_f32(b.norms + c);
#pragma GCC unroll 4
    for (int i = 0; i < kPass; i++) {
      float32x4_t a = vfmaq_laneq_f32(norms, cd[0], lo[i], 0);
      a = vfmaq_laneq_f32(a, cd[1], lo[i], 1);
      a = vfmaq_laneq_f32(a, cd[2], lo[i], 2);
      a = vfmaq_laneq_f32(a, cd[3], lo[i], 3);
      a = vfmaq_laneq_f32(a, cd[4], hi[i], 0);
      a = vfmaq_laneq_f32(a, cd[5], hi[i], 1);
      a = vfmaq_laneq_f32(a, cd[6], hi[i], 2);
      a = vfmaq_laneq_f32(a, cd[7], hi[i], 3);
      // Strict `<` keeps the earlier entry on ties and skips NaN distances, as the scalar does.
      const uint32x4_t lt = vcltq_f32(a, best[i]);
      best[i] = vbslq_f32(lt, a, best[i]);
      id[i] = vbslq_u32(lt, cur, id[i]);
    }
    cur = vaddq_u32(cur, four);
  }
  for (int i = 0; i < kPass; i++) idx[i] = (uint8_t)merge_lanes(best[i], id[i]);
}

}  // namespace

void nearest_neon(const SearchView& b, const float* xs, int64_t n_groups, uint8_t* idx) {
  for (int64_t g = 0; g < n_groups; g++)
    for (int lane = 0; lane < 8; lane += kPass)
      nearest_four(b, xs + g * 64 + lane, idx + g * 8 + lane);
}

}  // namespace waste::detail
