// The tower's forward pass (docs/VISION.md §5.2–§5.8). Work is split over patches, weight rows or
// (head, query block) items whose results never depend on which thread computes them, so any
// thread count gives the same bits.
#include "engine/vision/vision_tower.h"

#include <algorithm>
#include <cmath>

#include "engine/base/error.h"
#include "engine/kernels/ops.h"

namespace waste {

namespace {

// RMSNorm epsilons of the release: the encoder's norms are built without one, so PyTorch uses
// float32's machine epsilon; the projector's post_norm states 1e-5 (docs/VISION.md §5.4–§5.5,
// §5.8).
constexpr float kTowerEps = 1.1920928955078125e-07f;
constexpr float kProjectorEps = 1e-5f;
// Queries per attention work item: their score rows fit in L2 for images of a few thousand patches.
constexpr int64_t kQueryBlock = 32;

// 0.5 u (1 + tanh z) written as u * sigmoid(2z): the same function, and exp is much cheaper
// than tanh (tanh was a tenth of the tower's time).
float gelu_tanh(float u) {
  const float c = 0.7978845608028654f;  // sqrt(2 / pi)
  float z = c * (u + 0.044715f * u * u * u);
  return u / (1.0f + std::exp(-2.0f * z));
}

float gelu_erf(float u) {
  return 0.5f * u * (1.0f + std::erf(u * 0.7071067811865476f));
}

// fn(i) for every row i < n, split across the pool.
template <typename Fn>
void each_row(ThreadPool& pool, int64_t n, Fn&& fn) {
  pool.parallel_for(n, 8, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; i++) fn(i);
  });
}

void add(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; i++) x[i] += y[i];
}

// Source taps of one output coordinate (half-pixel centres, clamped at both ends).
struct Tap {
  int i0, i1;
  float lambda;
};

Tap bilinear_tap(int dst, int in, int out) {
  float src = std::max(0.0f, ((float)dst + 0.5f) * ((float)in / (float)out) - 0.5f);
  int i0 = std::min((int)src, in - 1);
  return Tap{i0, std::min(i0 + 1, in - 1), src - (float)i0};
}

}  // namespace

std::vector<float> resize_pos_table(const float* table, int pos_h, int pos_w, int hidden,
                                    int grid_h, int grid_w) {
  if (grid_h == pos_h && grid_w == pos_w)
    return std::vector<float>(table, table + (int64_t)pos_h * pos_w * hidden);
  std::vector<float> out((int64_t)grid_h * grid_w * hidden);
  std::vector<float> top(hidden), bottom(hidden);
  for (int r = 0; r < grid_h; r++) {
    Tap tr = bilinear_tap(r, pos_h, grid_h);
    for (int c = 0; c < grid_w; c++) {
      Tap tc = bilinear_tap(c, pos_w, grid_w);
      auto at = [&](int i, int j) { return table + ((int64_t)i * pos_w + j) * hidden; };
      float* o = &out[((int64_t)r * grid_w + c) * hidden];
      // Along rows first, then along columns.
      for (int d = 0; d < hidden; d++) {
        float left = at(tr.i0, tc.i0)[d] * (1 - tr.lambda) + at(tr.i1, tc.i0)[d] * tr.lambda;
        float right = at(tr.i0, tc.i1)[d] * (1 - tr.lambda) + at(tr.i1, tc.i1)[d] * tr.lambda;
        o[d] = left * (1 - tc.lambda) + right * tc.lambda;
      }
    }
  }
  return out;
}

RopeTable rope_table(int grid_h, int grid_w, int head_dim) {
  RopeTable t;
  t.pairs = head_dim / 2;
  int64_t L = (int64_t)grid_h * grid_w;
  t.cos.resize(L * t.pairs);
  t.sin.resize(L * t.pairs);
  std::vector<float> theta(head_dim / 4);
  for (int i = 0; i < head_dim / 4; i++) theta[i] = (float)std::pow(10000.0, -4.0 * i / head_dim);
  for (int64_t p = 0; p < L; p++) {
    float row = (float)(p / grid_w), col = (float)(p % grid_w);
    for (int j = 0; j < t.pairs; j++) {
      float angle = (j % 2 == 0 ? col : row) * theta[j / 2];  // float32, as the release
      t.cos[p * t.pairs + j] = (float)std::cos((double)angle);
      t.sin[p * t.pairs + j] = (float)std::sin((double)angle);
    }
  }
  return t;
}

void apply_rope(float* v, const float* cos, const float* sin, int pairs) {
  for (int j = 0; j < pairs; j++) {
    float a = v[2 * j], b = v[2 * j + 1];
    v[2 * j] = a * cos[j] - b * sin[j];
    v[2 * j + 1] = a * sin[j] + b * cos[j];
  }
}

// Activations of one encode call.
struct VisionTower::Run {
  ThreadPool* pool = nullptr;
  Compute cp;
  int gh = 0, gw = 0;
  int64_t L = 0;
  RopeTable rope;
  std::vector<float> x;      // [L][hidden] residual stream
  std::vector<float> h;      // [L][hidden] normed input, then a sublayer's output
  std::vector<float> qkv;    // [L][3 * qkv_hidden]
  std::vector<float> keys;   // [heads][L][head_dim], rotated
  std::vector<float> vals;   // [heads][head_dim][L]: transposed, so P.V is a matrix product
  std::vector<float> att;    // [L][qkv_hidden]
  std::vector<float> inner;  // [L][intermediate]
};

VisionTower::VisionTower(const VisionConfig& cfg, const VisionWeights& w, Isa isa,
                         std::vector<std::unique_ptr<uint8_t[]>> storage)
    : cfg_(cfg), w_(w), k_(&kernels_for(isa)), storage_(std::move(storage)) {
  check_shapes();
  pos_table_.resize(w_.pos_emb.rows * w_.pos_emb.cols);
  for (int64_t r = 0; r < w_.pos_emb.rows; r++)
    dequantize_row(w_.pos_emb, r, &pos_table_[r * w_.pos_emb.cols]);
}

// The loader checks the container's shapes; this catches weights built in memory.
void VisionTower::check_shapes() const {
  const int64_t D = cfg_.hidden, Q = cfg_.qkv_hidden, I = cfg_.intermediate, M = cfg_.merged();
  auto want = [](const Matrix& m, int64_t rows, int64_t cols, const char* what) {
    if (m.rows != rows || m.cols != cols || !m.data)
      fail("vision tower: {} is {}x{}, expected {}x{}", what, m.rows, m.cols, rows, cols);
  };
  want(w_.patch_embed, D, cfg_.patch_values(), "patch_embed");
  want(w_.pos_emb, (int64_t)cfg_.pos_h * cfg_.pos_w, D, "pos_emb");
  if ((int)w_.blocks.size() != cfg_.layers)
    fail("vision tower: {} blocks given, the config has {}", w_.blocks.size(), cfg_.layers);
  for (const VisionBlockWeights& b : w_.blocks) {
    want(b.wqkv, 3 * Q, D, "wqkv");
    want(b.wo, D, Q, "wo");
    want(b.fc0, I, D, "fc0");
    want(b.fc1, D, I, "fc1");
    if (!b.norm0 || !b.norm1) fail("vision tower: a block has no norm weights");
  }
  want(w_.proj0, M, M, "proj.0");
  want(w_.proj2, cfg_.text_hidden, M, "proj.2");
  if (!w_.final_norm || !w_.post_norm) fail("vision tower: final or post norm missing");
}

int64_t VisionTower::resident_bytes() const {
  auto bytes = [](const Matrix& m) {
    return m.rows * (m.row_bytes() + (m.scales ? m.groups() * 2 : 0));
  };
  const int64_t D = cfg_.hidden;
  int64_t n = bytes(w_.patch_embed) + bytes(w_.pos_emb) + bytes(w_.proj0) + bytes(w_.proj2);
  for (const VisionBlockWeights& b : w_.blocks)
    n += bytes(b.wqkv) + bytes(b.wo) + bytes(b.fc0) + bytes(b.fc1) + 2 * D * 4;
  n += D * 4 + (int64_t)cfg_.text_hidden * 4;
  return n + (int64_t)pos_table_.size() * 4;
}

std::vector<float> VisionTower::encode(const float* patches, int grid_h, int grid_w,
                                       ThreadPool& pool) const {
  auto side_ok = [](int s) { return s >= kVisionMerge && s <= kVisionMaxSide && s % 2 == 0; };
  if (!side_ok(grid_h) || !side_ok(grid_w))
    fail<UsageError>("image grid {}x{}: each side must be even and between {} and {} patches",
                     grid_h, grid_w, kVisionMerge, kVisionMaxSide);
  if (!patches) fail<UsageError>("image grid {}x{}: no patches given", grid_h, grid_w);
  Run r;
  r.pool = &pool;
  r.cp = Compute{k_, &pool};
  r.gh = grid_h;
  r.gw = grid_w;
  r.L = (int64_t)grid_h * grid_w;
  r.rope = rope_table(grid_h, grid_w, cfg_.head_dim());
  embed(r, patches);
  for (const VisionBlockWeights& b : w_.blocks) block(r, b);
  const int64_t D = cfg_.hidden;
  each_row(pool, r.L,
           [&](int64_t i) { rmsnorm(&r.x[i * D], w_.final_norm, D, kTowerEps, &r.x[i * D]); });
  return project(r);
}

// x = P . W_pe^T + the position table at the grid's size (no time term for a still image).
void VisionTower::embed(Run& r, const float* patches) const {
  const int64_t D = cfg_.hidden;
  r.x.resize(r.L * D);
  r.cp.linear(w_.patch_embed, patches, r.L, r.x.data());
  std::vector<float> pos =
      resize_pos_table(pos_table_.data(), cfg_.pos_h, cfg_.pos_w, cfg_.hidden, r.gh, r.gw);
  each_row(*r.pool, r.L, [&](int64_t i) { add(&r.x[i * D], &pos[i * D], D); });
}

// Pre-norm attention and MLP, each added to the residual stream.
void VisionTower::block(Run& r, const VisionBlockWeights& b) const {
  const int64_t D = cfg_.hidden, L = r.L;
  r.h.resize(L * D);
  r.qkv.resize(L * 3 * cfg_.qkv_hidden);
  r.inner.resize(L * cfg_.intermediate);
  each_row(*r.pool, L,
           [&](int64_t i) { rmsnorm(&r.x[i * D], b.norm0, D, kTowerEps, &r.h[i * D]); });
  r.cp.linear(b.wqkv, r.h.data(), L, r.qkv.data());
  attention(r);
  r.cp.linear(b.wo, r.att.data(), L, r.h.data());
  each_row(*r.pool, L, [&](int64_t i) {
    add(&r.x[i * D], &r.h[i * D], D);
    rmsnorm(&r.x[i * D], b.norm1, D, kTowerEps, &r.h[i * D]);
  });
  r.cp.linear(b.fc0, r.h.data(), L, r.inner.data());
  const int64_t I = cfg_.intermediate;
  each_row(*r.pool, L, [&](int64_t i) {
    for (int64_t j = 0; j < I; j++) r.inner[i * I + j] = gelu_tanh(r.inner[i * I + j]);
  });
  r.cp.linear(b.fc1, r.inner.data(), L, r.h.data());
  each_row(*r.pool, L, [&](int64_t i) { add(&r.x[i * D], &r.h[i * D], D); });
}

// Full bidirectional attention over the image's patches, per head, with 2D rotary q and k.
void VisionTower::attention(Run& r) const {
  const int64_t L = r.L, Q = cfg_.qkv_hidden, hd = cfg_.head_dim(), H = cfg_.heads;
  const int64_t stride = 3 * Q;
  r.keys.resize(H * L * hd);
  r.vals.resize(H * hd * L);
  r.att.resize(L * Q);
  each_row(*r.pool, L, [&](int64_t i) {
    float* row = &r.qkv[i * stride];
    const float* c = &r.rope.cos[i * r.rope.pairs];
    const float* s = &r.rope.sin[i * r.rope.pairs];
    for (int64_t h = 0; h < H; h++) {
      apply_rope(row + h * hd, c, s, r.rope.pairs);
      apply_rope(row + Q + h * hd, c, s, r.rope.pairs);
      std::copy_n(row + Q + h * hd, hd, &r.keys[(h * L + i) * hd]);
      for (int64_t d = 0; d < hd; d++) r.vals[(h * hd + d) * L + i] = row[2 * Q + h * hd + d];
    }
  });
  const int64_t blocks = (L + kQueryBlock - 1) / kQueryBlock;
  const float scale = 1.0f / std::sqrt((float)hd);
  r.pool->parallel_for(H * blocks, 1, [&](int64_t b, int64_t e) {
    std::vector<float> p(kQueryBlock * L);
    for (int64_t item = b; item < e; item++) {
      int64_t h = item / blocks, q0 = item % blocks * kQueryBlock;
      int64_t nq = std::min(kQueryBlock, L - q0);
      Matrix keys{TensorFormat::kF32, L, hd, &r.keys[h * L * hd], nullptr};
      Matrix vals{TensorFormat::kF32, hd, L, &r.vals[h * hd * L], nullptr};
      k_->matmul(keys, &r.qkv[q0 * stride + h * hd], nq, stride, p.data(), L, 0, L);
      for (int64_t t = 0; t < nq; t++) {
        float* s = &p[t * L];
        float best = -INFINITY, sum = 0.0f;
        for (int64_t j = 0; j < L; j++) best = std::max(best, s[j] *= scale);
        for (int64_t j = 0; j < L; j++) sum += (s[j] = std::exp(s[j] - best));
        for (int64_t j = 0; j < L; j++) s[j] /= sum;
      }
      k_->matmul(vals, p.data(), nq, L, &r.att[q0 * Q + h * hd], Q, 0, hd);
    }
  });
}

// Final 2x2 merge, then proj.0 -> erf GELU -> proj.2 -> RMSNorm (docs/VISION.md §5.7–§5.8).
std::vector<float> VisionTower::project(Run& r) const {
  const int64_t D = cfg_.hidden, M = cfg_.merged(), T = cfg_.text_hidden;
  const int gh2 = r.gh / kVisionMerge, gw2 = r.gw / kVisionMerge;
  const int64_t N = (int64_t)gh2 * gw2;
  std::vector<float> merged(N * M), inner(N * M), out(N * T);
  each_row(*r.pool, N, [&](int64_t n) {
    int64_t a = n / gw2, b = n % gw2;
    int64_t cells[4] = {2 * a * r.gw + 2 * b, 2 * a * r.gw + 2 * b + 1, (2 * a + 1) * r.gw + 2 * b,
                        (2 * a + 1) * r.gw + 2 * b + 1};
    for (int k = 0; k < 4; k++) std::copy_n(&r.x[cells[k] * D], D, &merged[n * M + k * D]);
  });
  r.cp.linear(w_.proj0, merged.data(), N, inner.data());
  each_row(*r.pool, N, [&](int64_t n) {
    for (int64_t j = 0; j < M; j++) inner[n * M + j] = gelu_erf(inner[n * M + j]);
  });
  r.cp.linear(w_.proj2, inner.data(), N, out.data());
  each_row(*r.pool, N,
           [&](int64_t n) { rmsnorm(&out[n * T], w_.post_norm, T, kProjectorEps, &out[n * T]); });
  return out;
}

}  // namespace waste
