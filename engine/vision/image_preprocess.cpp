#include "engine/vision/image_preprocess.h"

#include <algorithm>
#include <cmath>
#include <span>

#include "engine/base/error.h"

// The chessboard composite must round like numpy's float32 arithmetic; a fused multiply-add
// would change some results (docs/VISION.md §4.5), which the build's -ffp-contract=off prevents.

namespace waste {
namespace {

void check_rule(int w, int h, const SizeRule& r) {
  if (w <= 0 || h <= 0) fail<UsageError>("image size {}x{} is not positive", w, h);
  if (r.patch_size <= 0 || r.merge <= 0 || r.max_patches <= 0 || r.max_patches_per_side <= 0)
    fail<UsageError>(
        "size rule: patch_size, merge, max_patches and max_patches_per_side must be "
        "positive (got {}, {}, {}, {})",
        r.patch_size, r.merge, r.max_patches, r.max_patches_per_side);
  if (r.hard_cap && r.max_patches < r.merge * r.merge)
    fail<UsageError>("size rule: a hard cap of {} patches is below one merged token ({})",
                     r.max_patches, r.merge * r.merge);
}

TargetSize at_scale(int w, int h, double scale, const SizeRule& r) {
  int side = r.max_patches_per_side * r.patch_size;
  int factor = r.patch_size * r.merge;
  TargetSize t;
  t.resized_w = std::min(side, std::max(1, (int)(w * scale)));
  t.resized_h = std::min(side, std::max(1, (int)(h * scale)));
  t.pad_w = (factor - t.resized_w % factor) % factor;
  t.pad_h = (factor - t.resized_h % factor) % factor;
  t.grid_w = (t.resized_w + t.pad_w) / r.patch_size;
  t.grid_h = (t.resized_h + t.pad_h) / r.patch_size;
  t.tokens = (t.grid_h / r.merge) * (t.grid_w / r.merge);
  return t;
}

}  // namespace

TargetSize target_size(int w, int h, const SizeRule& r) {
  check_rule(w, h, r);
  // The release's order: the patch count floors each side, everything else is double.
  int64_t patches = (int64_t)std::max(1, w / r.patch_size) * std::max(1, h / r.patch_size);
  double s1 = std::sqrt((double)r.max_patches / (double)patches);
  double side = (double)r.max_patches_per_side * r.patch_size;
  double scale = std::min({1.0, s1, side / w, side / h});
  TargetSize t = at_scale(w, h, scale, r);
  if (!r.hard_cap || (int64_t)t.grid_w * t.grid_h <= r.max_patches) return t;
  // The grid only grows with the scale, so bisect for the largest scale that fits the cap;
  // scale 0 gives 1×1, one merged token, which the cap admits.
  double fits = 0, too_big = scale;
  for (int i = 0; i < 64; i++) {
    double mid = (fits + too_big) / 2;
    TargetSize m = at_scale(w, h, mid, r);
    ((int64_t)m.grid_w * m.grid_h <= r.max_patches ? fits : too_big) = mid;
  }
  return at_scale(w, h, fits, r);
}

namespace {

constexpr int kPrecision = 22;  // Pillow: 32 bits - 8 for the pixel - 2 of headroom

double bicubic(double x) {
  constexpr double a = -0.5;
  if (x < 0) x = -x;
  if (x < 1) return ((a + 2) * x - (a + 3)) * x * x + 1;
  if (x < 2) return (((x - 5) * x + 8) * x - 4) * a;
  return 0;
}

// Fixed-point weights of one axis: output i reads `count[i]` inputs from `first[i]`, with the
// weights at k[i * ksize ...].
struct Coeffs {
  int ksize = 0;
  std::vector<int> first, count;
  std::vector<int32_t> k;
};

Coeffs bicubic_coeffs(int in, int out) {
  double scale = (double)in / out;
  double fs = std::max(scale, 1.0);  // antialias: the kernel widens when shrinking
  double support = 2.0 * fs;
  double inv = 1.0 / fs;
  Coeffs c;
  c.ksize = (int)std::ceil(support) * 2 + 1;
  c.first.resize(out);
  c.count.resize(out);
  c.k.assign((size_t)out * c.ksize, 0);
  std::vector<double> w(c.ksize);
  for (int i = 0; i < out; i++) {
    double center = (i + 0.5) * scale;
    int lo = std::max(0, (int)(center - support + 0.5));
    int hi = std::min(in, (int)(center + support + 0.5));
    int n = std::min(hi - lo, c.ksize);
    double sum = 0;
    for (int x = 0; x < n; x++) {
      w[x] = bicubic((x + lo - center + 0.5) * inv);
      sum += w[x];
    }
    for (int x = 0; x < n; x++) {
      double v = sum != 0 ? w[x] / sum : w[x];
      double f = v * (1 << kPrecision);
      c.k[(size_t)i * c.ksize + x] = (int32_t)(v < 0 ? -0.5 + f : 0.5 + f);
    }
    c.first[i] = lo;
    c.count[i] = std::max(n, 0);
  }
  return c;
}

uint8_t clip8(int64_t v) {
  if (v >= (int64_t{1} << (kPrecision + 8))) return 255;
  if (v <= 0) return 0;
  return (uint8_t)(v >> kPrecision);
}

std::vector<uint8_t> horizontal(const std::vector<uint8_t>& src, int w, int h, int ch, int nw) {
  Coeffs c = bicubic_coeffs(w, nw);
  std::vector<uint8_t> out((size_t)nw * h * ch);
  for (int y = 0; y < h; y++) {
    const uint8_t* row = &src[(size_t)y * w * ch];
    uint8_t* dst = &out[(size_t)y * nw * ch];
    for (int i = 0; i < nw; i++) {
      const int32_t* k = &c.k[(size_t)i * c.ksize];
      for (int b = 0; b < ch; b++) {
        int64_t s = int64_t{1} << (kPrecision - 1);
        for (int x = 0; x < c.count[i]; x++) s += (int64_t)row[(c.first[i] + x) * ch + b] * k[x];
        dst[i * ch + b] = clip8(s);
      }
    }
  }
  return out;
}

std::vector<uint8_t> vertical(const std::vector<uint8_t>& src, int w, int h, int ch, int nh) {
  Coeffs c = bicubic_coeffs(h, nh);
  size_t stride = (size_t)w * ch;
  std::vector<uint8_t> out(stride * nh);
  std::vector<int64_t> acc(stride);
  for (int i = 0; i < nh; i++) {
    const int32_t* k = &c.k[(size_t)i * c.ksize];
    std::fill(acc.begin(), acc.end(), int64_t{1} << (kPrecision - 1));
    for (int y = 0; y < c.count[i]; y++) {
      const uint8_t* row = &src[(size_t)(c.first[i] + y) * stride];
      for (size_t j = 0; j < stride; j++) acc[j] += (int64_t)row[j] * k[y];
    }
    for (size_t j = 0; j < stride; j++) out[(size_t)i * stride + j] = clip8(acc[j]);
  }
  return out;
}

// Pillow walks the source with a double accumulator; recomputing floor((i + 0.5) * scale)
// differs on some pixels.
std::vector<int> nearest_index(int in, int out) {
  double scale = (double)in / out;
  std::vector<int> idx(out);
  double pos = scale * 0.5;
  for (int i = 0; i < out; i++, pos += scale) idx[i] = std::clamp((int)pos, 0, in - 1);
  return idx;
}

uint8_t muldiv255(int c, int a) {
  int t = c * a + 128;
  return (uint8_t)(((t >> 8) + t) >> 8);
}

// Premultiplied resize for LA and RGBA (the last channel is alpha), as Pillow does via La/RGBa.
std::vector<uint8_t> resize_premultiplied(std::vector<uint8_t> px, int w, int h, int ch, int nw,
                                          int nh) {
  for (size_t i = 0; i < px.size(); i += ch)
    for (int b = 0; b + 1 < ch; b++) px[i + b] = muldiv255(px[i + b], px[i + ch - 1]);
  std::vector<uint8_t> out = resize_bicubic(px, w, h, ch, nw, nh);
  for (size_t i = 0; i < out.size(); i += ch) {
    int a = out[i + ch - 1];
    if (a == 0 || a == 255) continue;
    for (int b = 0; b + 1 < ch; b++) out[i + b] = (uint8_t)std::min(255, 255 * out[i + b] / a);
  }
  return out;
}

uint8_t composite(uint8_t c, uint8_t a, uint8_t bg) {
  float alpha = (float)a / 255.0f;
  float over = alpha * (float)c;
  float under = (1.0f - alpha) * (float)bg;
  return (uint8_t)(over + under);
}

struct Planes {
  std::vector<uint8_t> px;
  int channels = 0;
};

// The pixels in the mode's own channels, as Pillow holds them.
Planes to_mode(const DecodedImage& img) {
  static constexpr int kRgb[] = {0, 1, 2}, kRgba[] = {0, 1, 2, 3}, kL[] = {0}, kLa[] = {0, 3};
  std::span<const int> pick;
  switch (img.mode) {
    case PixelMode::Bilevel:
    case PixelMode::L:
      pick = kL;
      break;
    case PixelMode::LA:
      pick = kLa;
      break;
    case PixelMode::RGB:
      pick = kRgb;
      break;
    case PixelMode::P:
    case PixelMode::RGBA:
      pick = kRgba;
      break;
  }
  Planes p;
  p.channels = (int)pick.size();
  size_t n = (size_t)img.width * img.height;
  p.px.resize(n * p.channels);
  for (size_t i = 0; i < n; i++)
    for (int b = 0; b < p.channels; b++) p.px[i * p.channels + b] = img.rgba[i * 4 + pick[b]];
  return p;
}

std::vector<uint8_t> fill_to_rgb(const Planes& p, const DecodedImage& img, int w, int h,
                                 const PreprocessConfig& cfg) {
  size_t n = (size_t)w * h;
  std::vector<uint8_t> rgb(n * 3);
  bool gray = p.channels <= 2;
  bool alpha_band = p.channels == 2 || p.channels == 4;
  bool keyed = (img.mode == PixelMode::L || img.mode == PixelMode::Bilevel) && img.transparency;
  // RGB returns untouched; P without transparency is converted; everything else composites.
  bool fill = keyed || img.mode == PixelMode::LA || img.mode == PixelMode::RGBA ||
              (img.mode == PixelMode::P && img.transparency);
  int sq = std::max(1, cfg.chessboard_square);
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++) {
      size_t i = (size_t)y * w + x;
      const uint8_t* s = &p.px[i * p.channels];
      uint8_t c[3] = {s[0], s[gray ? 0 : 1], s[gray ? 0 : 2]};
      if (fill) {
        uint8_t a = alpha_band ? s[p.channels - 1] : s[0] == img.transparent_value ? 0 : 255;
        uint8_t bg = ((y / sq + x / sq) & 1) ? cfg.chessboard_gray : cfg.chessboard_white;
        for (uint8_t& v : c) v = composite(v, a, bg);
      }
      std::copy(c, c + 3, &rgb[i * 3]);
    }
  return rgb;
}

std::vector<float> patchify(const std::vector<uint8_t>& rgb, int w, int h, int grid_w, int grid_h,
                            const PreprocessConfig& cfg) {
  // The release divides in double, rounds to float32, then subtracts and divides in float32.
  float lut[3][256];
  for (int c = 0; c < 3; c++)
    for (int v = 0; v < 256; v++) lut[c][v] = ((float)(v / 255.0) - cfg.mean[c]) / cfg.std[c];
  int p = cfg.size.patch_size;
  size_t per = (size_t)3 * p * p;
  std::vector<float> out((size_t)grid_w * grid_h * per);
  for (int r = 0; r < grid_h; r++)
    for (int col = 0; col < grid_w; col++) {
      float* patch = &out[((size_t)r * grid_w + col) * per];
      for (int y = 0; y < p; y++)
        for (int x = 0; x < p; x++) {
          int gy = r * p + y, gx = col * p + x;
          bool inside = gy < h && gx < w;
          for (int c = 0; c < 3; c++) {
            uint8_t v = inside ? rgb[((size_t)gy * w + gx) * 3 + c] : 0;  // black padding
            patch[(size_t)c * p * p + y * p + x] = lut[c][v];
          }
        }
    }
  return out;
}

}  // namespace

std::vector<uint8_t> resize_bicubic(const std::vector<uint8_t>& src, int w, int h, int channels,
                                    int new_w, int new_h) {
  std::vector<uint8_t> px = new_w != w ? horizontal(src, w, h, channels, new_w) : src;
  return new_h != h ? vertical(px, new_w, h, channels, new_h) : px;
}

std::vector<uint8_t> resize_nearest(const std::vector<uint8_t>& src, int w, int h, int channels,
                                    int new_w, int new_h) {
  std::vector<int> xs = nearest_index(w, new_w), ys = nearest_index(h, new_h);
  std::vector<uint8_t> out((size_t)new_w * new_h * channels);
  for (int y = 0; y < new_h; y++)
    for (int x = 0; x < new_w; x++)
      std::copy_n(&src[((size_t)ys[y] * w + xs[x]) * channels], channels,
                  &out[((size_t)y * new_w + x) * channels]);
  return out;
}

PreprocessedImage preprocess_image(const DecodedImage& img, const PreprocessConfig& cfg) {
  if (img.width <= 0 || img.height <= 0 || img.rgba.size() != (size_t)img.width * img.height * 4)
    fail("image pixels do not match its size {}x{}", img.width, img.height);
  TargetSize t = target_size(img.width, img.height, cfg.size);
  PreprocessedImage out;
  out.orig_w = img.width;
  out.orig_h = img.height;
  out.resized_w = t.resized_w;
  out.resized_h = t.resized_h;
  out.padded_w = t.resized_w + t.pad_w;
  out.padded_h = t.resized_h + t.pad_h;
  out.grid_w = t.grid_w;
  out.grid_h = t.grid_h;
  out.tokens = t.tokens;

  Planes p = to_mode(img);
  if (t.resized_w != img.width || t.resized_h != img.height) {
    bool nearest = img.mode == PixelMode::P || img.mode == PixelMode::Bilevel;
    bool alpha = img.mode == PixelMode::LA || img.mode == PixelMode::RGBA;
    auto resize = nearest ? resize_nearest : resize_bicubic;
    p.px = alpha ? resize_premultiplied(std::move(p.px), img.width, img.height, p.channels,
                                        t.resized_w, t.resized_h)
                 : resize(p.px, img.width, img.height, p.channels, t.resized_w, t.resized_h);
  }
  out.resized_rgb = fill_to_rgb(p, img, t.resized_w, t.resized_h, cfg);
  out.patches = patchify(out.resized_rgb, t.resized_w, t.resized_h, t.grid_w, t.grid_h, cfg);
  return out;
}

}  // namespace waste
