// Image decoding and the release's preprocessing: the NaViT size rule against the worked values
// of docs/VISION.md §3 and §7.1, byte equality with Pillow (the release's library)
// on generated images of every mode, the tensor layout, and every refusal of an untrusted file.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

#include "engine/base/crc32.h"
#include "engine/base/error.h"
#include "engine/vision/image_decode.h"
#include "engine/vision/image_preprocess.h"
#include "tests/test_util.h"

namespace waste {
namespace {

using Bytes = std::vector<uint8_t>;
using namespace std::string_literals;

// --- the size rule -----------------------------------------------------------------------------

struct Worked {
  int w, h;
  int grid_w, grid_h, tokens;
};

SizeRule limit(int max_patches, bool hard = false) {
  SizeRule r;
  r.max_patches = max_patches;
  r.hard_cap = hard;
  return r;
}

TEST(SizeRule, ReleaseWorkedValues) {
  // docs/VISION.md §3.2 and §3.4, release column (limit 65536); §7.1 lists the same tokens.
  const Worked cases[] = {
      {1, 1, 2, 2, 1},
      {100, 100, 8, 8, 16},
      {354, 354, 26, 26, 169},
      {640, 480, 46, 36, 414},
      {896, 896, 64, 64, 1024},
      {1024, 768, 74, 56, 1036},
      {1920, 1080, 138, 78, 2691},
      {4000, 3000, 286, 216, 15444},
      {8000, 8000, 258, 258, 16641},
      {10000, 100, 512, 6, 768},
  };
  for (const Worked& c : cases) {
    TargetSize t = target_size(c.w, c.h);
    EXPECT_EQ(t.grid_w, c.grid_w) << c.w << "x" << c.h;
    EXPECT_EQ(t.grid_h, c.grid_h) << c.w << "x" << c.h;
    EXPECT_EQ(t.tokens, c.tokens) << c.w << "x" << c.h;
  }
  TargetSize t = target_size(640, 480);
  EXPECT_EQ(t.resized_w, 640);  // never upscaled, never shrunk when it fits
  EXPECT_EQ(t.resized_h, 480);
  EXPECT_EQ(t.pad_w, 4);
  EXPECT_EQ(t.pad_h, 24);
  t = target_size(8000, 8000);
  EXPECT_EQ(t.resized_w, 3586);
  EXPECT_EQ(t.resized_h, 3586);
  t = target_size(10000, 100);
  EXPECT_EQ(t.resized_w, 7168);
  EXPECT_EQ(t.resized_h, 71);
}

TEST(SizeRule, ReleaseRuleAtLimit1024) {
  const Worked cases[] = {
      {1, 1, 2, 2, 1},           {100, 100, 8, 8, 16},      {354, 354, 26, 26, 169},
      {640, 480, 38, 28, 266},   {896, 896, 32, 32, 256},   {1024, 768, 38, 28, 266},
      {1920, 1080, 44, 24, 264}, {4000, 3000, 38, 28, 266}, {10000, 100, 324, 4, 324},
  };
  for (const Worked& c : cases) {
    TargetSize t = target_size(c.w, c.h, limit(1024));
    EXPECT_EQ(t.grid_w, c.grid_w) << c.w << "x" << c.h;
    EXPECT_EQ(t.grid_h, c.grid_h) << c.w << "x" << c.h;
    EXPECT_EQ(t.tokens, c.tokens) << c.w << "x" << c.h;
  }
}

TEST(SizeRule, SoftLimitWorstCasesAndSquares) {
  // docs/VISION.md §3.2–§3.4: the soft limit's worst case up to 9000², and a square.
  TargetSize t = target_size(1889, 7377);
  EXPECT_EQ(t.resized_w, 1821);
  EXPECT_EQ(t.resized_h, 7113);
  EXPECT_EQ(t.grid_w, 132);
  EXPECT_EQ(t.grid_h, 510);
  EXPECT_EQ(t.tokens, 16830);
  EXPECT_EQ(target_size(3591, 3591).tokens, 129 * 129);
  // The at-limit-1024 worst case of the table: 468 tokens = 1872 patches.
  EXPECT_EQ(target_size(69, 5247, limit(1024)).tokens, 468);
}

TEST(SizeRule, EdgeCases) {
  for (auto [w, h] : std::initializer_list<std::pair<int, int>>{
           {1, 1}, {1, 5000}, {5000, 1}, {13, 4099}, {28672, 224}, {27, 29}}) {
    TargetSize t = target_size(w, h);
    EXPECT_GE(t.resized_w, 1);
    EXPECT_LE(t.resized_w, w);
    EXPECT_LE(t.resized_h, h);
    EXPECT_EQ((t.resized_w + t.pad_w) % 28, 0);
    EXPECT_EQ((t.resized_h + t.pad_h) % 28, 0);
    EXPECT_LT(t.pad_w, 28);
    EXPECT_EQ(t.grid_w % 2, 0);
    EXPECT_EQ(t.grid_h % 2, 0);
    EXPECT_LE(t.grid_w, 512);
    EXPECT_LE(t.grid_h, 512);
    EXPECT_EQ(t.tokens, t.grid_w / 2 * (t.grid_h / 2));
  }
  TargetSize t = target_size(28672, 224);  // 7168/W binds: exactly 7168 wide
  EXPECT_EQ(t.resized_w, 7168);
  EXPECT_EQ(t.resized_h, 56);
  EXPECT_EQ(t.grid_w, 512);
  EXPECT_THROW(target_size(0, 5), UsageError);
  EXPECT_THROW(target_size(5, 5, limit(0)), UsageError);
  EXPECT_THROW(target_size(5, 5, limit(3, true)), UsageError);
}

TEST(SizeRule, HalvingTheBudgetRoughlyHalvesTheTokens) {
  for (auto [w, h] : std::initializer_list<std::pair<int, int>>{
           {4000, 3000}, {1920, 1080}, {3000, 3000}, {1000, 7000}}) {
    double full = target_size(w, h, limit(4096)).tokens;
    double half = target_size(w, h, limit(2048)).tokens;
    EXPECT_NEAR(half / full, 0.5, 0.1) << w << "x" << h;
  }
}

TEST(SizeRule, HardCapBoundsTheGridAndChangesNothingThatFits) {
  for (int w = 1; w < 6000; w += 97)
    for (int h = 1; h < 6000; h += 89) {
      TargetSize soft = target_size(w, h, limit(1024));
      TargetSize hard = target_size(w, h, limit(1024, true));
      EXPECT_LE(hard.grid_w * hard.grid_h, 1024) << w << "x" << h;
      if (soft.grid_w * soft.grid_h <= 1024)
        EXPECT_EQ(hard.tokens, soft.tokens) << w << "x" << h;
      else
        EXPECT_GT(hard.tokens, 1024 / 4 * 0.6) << w << "x" << h;  // not shrunk far past it
    }
  // The release's own worst case obeys a hard cap of its limit.
  TargetSize t = target_size(1889, 7377, limit(65536, true));
  EXPECT_LE(t.grid_w * t.grid_h, 65536);
}

// --- small image writers (PNG with stored or fixed-Huffman deflate, BMP, TGA) ----------------

void put_be32(Bytes& b, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) b.push_back((uint8_t)(v >> s));
}

void put_le(Bytes& b, uint32_t v, int n) {
  for (int i = 0; i < n; i++) b.push_back((uint8_t)(v >> (8 * i)));
}

void png_chunk(Bytes& out, const char* type, const Bytes& data) {
  put_be32(out, (uint32_t)data.size());
  Bytes body(type, type + 4);
  body.insert(body.end(), data.begin(), data.end());
  out.insert(out.end(), body.begin(), body.end());
  put_be32(out, crc32(body.data(), body.size()));
}

uint32_t adler32(const Bytes& d) {
  uint32_t a = 1, b = 0;
  for (uint8_t v : d) {
    a = (a + v) % 65521;
    b = (b + a) % 65521;
  }
  return (b << 16) | a;
}

// zlib with stored blocks: any bytes, no compression.
Bytes zlib_stored(const Bytes& raw) {
  Bytes z = {0x78, 0x01};
  size_t at = 0;
  do {
    size_t n = std::min<size_t>(65535, raw.size() - at);
    z.push_back(at + n == raw.size() ? 1 : 0);
    put_le(z, (uint32_t)n, 2);
    put_le(z, (uint32_t)(~n & 0xffff), 2);
    z.insert(z.end(), raw.begin() + at, raw.begin() + at + n);
    at += n;
  } while (at < raw.size());
  put_be32(z, adler32(raw));
  return z;
}

// zlib of `n` zero bytes with fixed Huffman codes: a literal 0, then copies of 258 at distance 1.
// 13 bits per 258 bytes, so a megabyte inflates to a third of a gigabyte.
Bytes zlib_zeros(uint64_t n) {
  Bytes z = {0x78, 0x01};
  uint64_t bits = 0;
  int nbits = 0;
  auto put = [&](uint32_t v, int len) {  // LSB first
    bits |= (uint64_t)v << nbits;
    nbits += len;
    while (nbits >= 8) {
      z.push_back((uint8_t)bits);
      bits >>= 8;
      nbits -= 8;
    }
  };
  auto code = [&](uint32_t c, int len) {  // Huffman codes go MSB first
    for (int i = len - 1; i >= 0; i--) put((c >> i) & 1, 1);
  };
  put(1, 1);      // final block
  put(1, 2);      // fixed Huffman
  code(0x30, 8);  // literal 0
  uint64_t left = n - 1;
  for (; left >= 258; left -= 258) {
    code(0xc5, 8);  // length 258 (code 285)
    code(0, 5);     // distance 1
  }
  for (; left > 0; left--) code(0x30, 8);
  code(0, 7);  // end of block
  if (nbits) put(0, 8 - nbits);
  put_be32(z, (uint32_t)(((n % 65521) << 16) | 1));
  return z;
}

Bytes png(uint32_t w, uint32_t h, int color_type, const Bytes& idat_zlib, int depth = 8) {
  Bytes out = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  Bytes ihdr;
  put_be32(ihdr, w);
  put_be32(ihdr, h);
  ihdr.insert(ihdr.end(), {(uint8_t)depth, (uint8_t)color_type, 0, 0, 0});
  png_chunk(out, "IHDR", ihdr);
  png_chunk(out, "IDAT", idat_zlib);
  png_chunk(out, "IEND", {});
  return out;
}

// An RGB PNG whose pixel (x, y) is f(x, y).
template <typename F>
Bytes rgb_png(int w, int h, F f) {
  Bytes raw;
  for (int y = 0; y < h; y++) {
    raw.push_back(0);  // filter: none
    for (int x = 0; x < w; x++) {
      auto [r, g, b] = f(x, y);
      raw.insert(raw.end(), {(uint8_t)r, (uint8_t)g, (uint8_t)b});
    }
  }
  return png(w, h, 2, zlib_stored(raw));
}

Bytes tga_rgb(int w, int h, uint8_t b, uint8_t g, uint8_t r, size_t keep_pixels) {
  Bytes t = {0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  put_le(t, w, 2);
  put_le(t, h, 2);
  t.insert(t.end(), {24, 0x20});  // 24 bpp, top-left origin
  for (size_t i = 0; i < keep_pixels; i++) t.insert(t.end(), {b, g, r});
  return t;
}

// An 8-bit BMP with a `colors`-entry palette of (10, 20, 30)…, every pixel index `index`.
Bytes bmp8(int w, int h, int colors, uint8_t index) {
  int row = (w + 3) & ~3;
  uint32_t offset = 14 + 40 + 4 * colors;
  Bytes b = {'B', 'M'};
  put_le(b, offset + row * h, 4);
  put_le(b, 0, 4);
  put_le(b, offset, 4);
  put_le(b, 40, 4);
  put_le(b, w, 4);
  put_le(b, h, 4);
  put_le(b, 1, 2);
  put_le(b, 8, 2);
  put_le(b, 0, 4);  // BI_RGB
  put_le(b, row * h, 4);
  put_le(b, 2835, 4);
  put_le(b, 2835, 4);
  put_le(b, colors, 4);
  put_le(b, 0, 4);
  for (int i = 0; i < colors; i++) b.insert(b.end(), {30, 20, 10, 0});  // BGRx
  b.insert(b.end(), (size_t)row * h, index);
  return b;
}

std::string refusal(const Bytes& b, const DecodeLimits& limits = {}) {
  try {
    decode_image(b, limits);
  } catch (const FormatError& e) {
    return e.what();
  }
  return "(accepted)";
}

// --- decoding and refusals ----------------------------------------------------------------------

TEST(ImageDecode, PngPixelsAndMode) {
  Bytes file = rgb_png(5, 3, [](int x, int y) { return std::tuple{x * 50, y * 100, 7}; });
  DecodedImage img = decode_image(file);
  EXPECT_EQ(img.width, 5);
  EXPECT_EQ(img.height, 3);
  EXPECT_EQ(img.format, ImageFormat::Png);
  EXPECT_EQ(img.mode, PixelMode::RGB);
  ASSERT_EQ(img.rgba.size(), 5u * 3 * 4);
  const uint8_t* p = &img.rgba[(2 * 5 + 4) * 4];  // (4, 2)
  EXPECT_EQ(p[0], 200);
  EXPECT_EQ(p[1], 200);
  EXPECT_EQ(p[2], 7);
  EXPECT_EQ(p[3], 255);
}

TEST(ImageDecode, RefusesEmptyUnknownAndUnsupportedFormats) {
  EXPECT_NE(refusal({}).find("empty"), std::string::npos);
  std::string webp = "RIFF\x24\0\0\0WEBPVP8 "s;
  EXPECT_EQ(refusal(Bytes(webp.begin(), webp.end())), "WebP is not supported");
  std::string text = "hello world";
  EXPECT_EQ(refusal(Bytes(text.begin(), text.end())),
            "unknown image format (first bytes 68 65 6c 6c 6f 20 77 6f)");
  EXPECT_NE(refusal({'I', 'I', '*', 0, 8, 0, 0, 0}).find("TIFF"), std::string::npos);
  EXPECT_NE(refusal({'8', 'B', 'P', 'S', 0, 1}).find("PSD images are not enabled"),
            std::string::npos);
}

TEST(ImageDecode, TgaOnlyWhenAllowedAndShortFilesReadAsZeros) {
  Bytes tga = tga_rgb(4, 4, 1, 2, 3, 16);
  EXPECT_NE(refusal(tga).find("TGA images are not enabled"), std::string::npos);
  DecodeLimits allow;
  allow.allow_tga_psd = true;
  DecodedImage img = decode_image(tga, allow);
  EXPECT_EQ(img.format, ImageFormat::Tga);
  EXPECT_EQ(img.mode, PixelMode::RGB);
  EXPECT_EQ(img.rgba[0], 3);  // stored BGR
  EXPECT_EQ(img.rgba[2], 1);
  // stb 2.27 accepts a cut-short TGA (CVE-2023-45663) and returns unwritten output bytes: the
  // zeroing allocator makes them black, never leftover heap contents.
  Bytes cut = tga_rgb(64, 64, 9, 9, 9, 10);
  DecodedImage a = decode_image(cut, allow);
  for (size_t i = 10 * 4; i < a.rgba.size(); i += 4) ASSERT_EQ(a.rgba[i], 0) << i;
}

TEST(ImageDecode, ShortBmpPaletteIsDefined) {
  // Index 200 of a 2-entry palette: stb 2.27 reads an uninitialised stack entry for it.
  DecodedImage img = decode_image(bmp8(8, 2, 2, 200));
  EXPECT_EQ(img.mode, PixelMode::P);
  for (size_t i = 0; i < img.rgba.size(); i += 4) {
    ASSERT_EQ(img.rgba[i], 0);
    ASSERT_EQ(img.rgba[i + 1], 0);
    ASSERT_EQ(img.rgba[i + 2], 0);
  }
  img = decode_image(bmp8(8, 2, 2, 1));
  EXPECT_EQ(img.rgba[0], 10);
  EXPECT_EQ(img.rgba[2], 30);
}

TEST(ImageDecode, RefusesCorruptAndTruncatedFiles) {
  Bytes file = rgb_png(40, 40, [](int x, int y) { return std::tuple{x, y, x ^ y}; });
  Bytes cut(file.begin(), file.begin() + file.size() / 2);
  std::string m = refusal(cut);
  EXPECT_NE(m.find("corrupt PNG"), std::string::npos) << m;
  Bytes header_only(file.begin(), file.begin() + 20);
  EXPECT_NE(refusal(header_only).find("corrupt PNG"), std::string::npos);

  Bytes jpeg = {0xff, 0xd8, 0xff, 0xe0, 0, 16, 'J', 'F', 'I', 'F', 0, 1, 1, 0, 0, 1, 0, 1, 0, 0};
  for (int i = 0; i < 64; i++) jpeg.push_back((uint8_t)(i * 37));
  m = refusal(jpeg);
  EXPECT_NE(m.find("corrupt JPEG"), std::string::npos) << m;

  // A DHT whose 16 code counts sum past 256: stb 2.27 would write past its table.
  Bytes dht = {0xff, 0xd8, 0xff, 0xc4, 0x00, 0x13, 0x00};
  dht.insert(dht.end(), 16, 0xff);
  m = refusal(dht);
  EXPECT_EQ(m, "corrupt JPEG: a Huffman table declares 4080 codes (at most 256)");

  Bytes gif = {'G', 'I', 'F', '8', '9', 'a', 4, 0, 4, 0, 0, 0, 0, ';'};
  EXPECT_NE(refusal(gif).find("corrupt GIF"), std::string::npos);

  // A BMP header size stb does not know: refused as BMP, never handed on to stb's TGA loader.
  Bytes bmp = bmp8(4, 4, 2, 1);
  bmp[14] = 20;
  EXPECT_EQ(refusal(bmp), "corrupt BMP: unsupported header");
}

TEST(ImageDecode, RefusesSizesOverTheCapsBeforeDecoding) {
  // Headers alone: nothing behind them could be decoded, so only the header check can answer.
  Bytes zero = png(0, 10, 2, zlib_stored({0}));
  EXPECT_NE(refusal(zero).find("zero width or height"), std::string::npos);
  std::string m = refusal(png(100000, 100000, 2, zlib_stored({0})));
  EXPECT_EQ(m, "PNG image is 100000x100000; the limit is 16384 pixels per side");
  m = refusal(png(16000, 16000, 2, zlib_stored({0})));
  EXPECT_NE(m.find("256000000 pixels; the limit is 40000000"), std::string::npos) << m;
  DecodeLimits small;
  small.max_side = 64;
  EXPECT_NE(refusal(png(65, 10, 2, zlib_stored({0})), small).find("limit is 64 pixels per side"),
            std::string::npos);
  // GIF and BMP headers are read by us too.
  Bytes gif = {'G', 'I', 'F', '8', '9', 'a', 0xff, 0xff, 0xff, 0xff, 0, 0, 0};
  EXPECT_NE(refusal(gif).find("65535x65535"), std::string::npos);
}

TEST(ImageDecode, DecompressionBombIsStoppedByTheMemoryBudget) {
  // Declared 64×64 gray (4 KiB of pixels), its 1.7 MB zlib stream inflates to 256 MiB: under
  // the encoded-size cap, far past what the header's pixels need.
  uint64_t inflated = uint64_t{256} << 20;
  Bytes bomb = png(64, 64, 0, zlib_zeros(inflated));
  EXPECT_LT(bomb.size(), 20u << 20);
  std::string m = refusal(bomb);
  EXPECT_NE(m.find("memory budget"), std::string::npos) << m;
  // The same stream, honestly sized, decodes (1 byte per row for the filter).
  Bytes honest = png(1023, 1024, 0, zlib_zeros(1024 * 1024));
  DecodedImage img = decode_image(honest);
  EXPECT_EQ(img.mode, PixelMode::L);
  EXPECT_EQ(img.rgba[0], 0);
}

TEST(ImageDecode, MemoryBudgetAndEncodedSizeLimits) {
  Bytes file = rgb_png(300, 300, [](int x, int y) { return std::tuple{x, y, 0}; });
  DecodeLimits tight;
  tight.max_decode_memory = 256 << 10;
  std::string m = refusal(file, tight);
  EXPECT_NE(m.find("needs more than 0.2 MiB, its memory budget"), std::string::npos) << m;
  DecodeLimits tiny_file;
  tiny_file.max_encoded_bytes = 1000;
  EXPECT_NE(refusal(file, tiny_file).find("the limit is 1000 bytes"), std::string::npos);
  EXPECT_THROW(check_encoded_size(1001, tiny_file), FormatError);
  EXPECT_NO_THROW(check_encoded_size(1000, tiny_file));
}

// --- preprocessing: layout, normalisation, padding ---------------------------------------------

TEST(ImagePreprocess, PatchLayoutNormalisationAndPadding) {
  // 30×20 stays 30×20 (it fits the budget), pads to 56×28: a 4×2 grid, 2 tokens.
  Bytes file = rgb_png(30, 20, [](int x, int y) { return std::tuple{x * 8, y * 12, 100}; });
  PreprocessedImage p = preprocess_image(decode_image(file));
  EXPECT_EQ(p.resized_w, 30);
  EXPECT_EQ(p.padded_w, 56);
  EXPECT_EQ(p.padded_h, 28);
  EXPECT_EQ(p.grid_w, 4);
  EXPECT_EQ(p.grid_h, 2);
  EXPECT_EQ(p.tokens, 2);
  ASSERT_EQ(p.patches.size(), 8u * 588);
  auto at = [&](int x, int y, int ch) {
    int r = y / 14, c = x / 14;
    return p.patches[(size_t)(r * p.grid_w + c) * 588 + ch * 196 + (y % 14) * 14 + x % 14];
  };
  auto norm = [](int v) { return v / 127.5 - 1.0; };
  for (auto [x, y] :
       std::initializer_list<std::pair<int, int>>{{0, 0}, {13, 0}, {14, 3}, {29, 19}, {17, 15}}) {
    EXPECT_NEAR(at(x, y, 0), norm(x * 8), 1e-6) << x << "," << y;
    EXPECT_NEAR(at(x, y, 1), norm(y * 12), 1e-6) << x << "," << y;
    EXPECT_NEAR(at(x, y, 2), norm(100), 1e-6) << x << "," << y;
  }
  EXPECT_EQ(at(0, 0, 0), -1.0f);
  EXPECT_EQ(at(30, 0, 0), -1.0f);  // right padding
  EXPECT_EQ(at(55, 27, 2), -1.0f);
  EXPECT_EQ(at(3, 20, 1), -1.0f);  // bottom padding
  EXPECT_EQ(p.resized_rgb[(19 * 30 + 29) * 3 + 0], 29 * 8);

  // Other mean/std are applied per channel.
  PreprocessConfig cfg;
  cfg.mean = {0.25f, 0.5f, 0.75f};
  cfg.std = {0.5f, 0.25f, 1.0f};
  p = preprocess_image(decode_image(file), cfg);
  EXPECT_NEAR(at(29, 19, 0), (232 / 255.0 - 0.25) / 0.5, 1e-6);
  EXPECT_NEAR(at(29, 19, 1), (228 / 255.0 - 0.5) / 0.25, 1e-6);
  EXPECT_NEAR(at(40, 0, 2), -0.75, 1e-6);
}

TEST(ImagePreprocess, ResizeOfAConstantImageIsConstant) {
  std::vector<uint8_t> flat(97 * 61 * 3, 77);
  std::vector<uint8_t> out = resize_bicubic(flat, 97, 61, 3, 40, 25);
  for (uint8_t v : out) ASSERT_EQ(v, 77);
  out = resize_nearest(flat, 97, 61, 3, 13, 200);
  EXPECT_EQ(out.size(), 13u * 200 * 3);
  for (uint8_t v : out) ASSERT_EQ(v, 77);
}

// --- bit-exactness against Pillow ---------------------------------------------------------------

struct Case {
  std::string name, format, mode;
  int w, h, max_patches;
  bool transparency = false, rle = false;
};

std::string case_json(const std::vector<Case>& cases) {
  std::ostringstream s;
  s << "[";
  for (size_t i = 0; i < cases.size(); i++) {
    const Case& c = cases[i];
    s << (i ? "," : "") << "{\"name\":\"" << c.name << "\",\"format\":\"" << c.format
      << "\",\"mode\":\"" << c.mode << "\",\"w\":" << c.w << ",\"h\":" << c.h
      << ",\"seed\":" << i + 1 << ",\"max_patches\":" << c.max_patches
      << ",\"transparency\":" << (c.transparency ? "true" : "false")
      << ",\"rle\":" << (c.rle ? "true" : "false") << "}";
  }
  return s.str() + "]";
}

bool have_pillow() {
  std::string out;
  return test::run_command("/usr/bin/python3 -c 'import PIL, numpy' 2>&1", &out) == 0;
}

struct Reference {
  std::string mode;
  int w, h, new_w, new_h, tokens;
};

std::map<std::string, Reference> run_reference(const std::vector<Case>& cases,
                                               const std::filesystem::path& dir) {
  test::write_file(dir / "cases.json", case_json(cases));
  std::string out;
  std::string cmd = "/usr/bin/python3 " +
                    (test::source_dir() / "scripts/reference/pil_preprocess.py").string() +
                    " batch " + (dir / "cases.json").string() + " " + dir.string() + " 2>&1";
  EXPECT_EQ(test::run_command(cmd, &out), 0) << out;
  std::map<std::string, Reference> refs;
  std::istringstream lines(test::read_file(dir / "results.txt"));
  std::string name;
  Reference r;
  while (lines >> name >> r.mode >> r.w >> r.h >> r.new_w >> r.new_h >> r.tokens) refs[name] = r;
  return refs;
}

// Compares one case; returns the largest byte difference.
int compare_case(const Case& c, const Reference& ref, const std::filesystem::path& dir) {
  std::string file = test::read_file(dir / (c.name + "." + c.format));
  DecodeLimits limits;
  limits.allow_tga_psd = true;
  DecodedImage img = decode_image(Bytes(file.begin(), file.end()), limits);
  EXPECT_EQ(mode_name(img.mode), ref.mode) << c.name;
  EXPECT_EQ(img.width, ref.w) << c.name;
  EXPECT_EQ(img.height, ref.h) << c.name;
  PreprocessConfig cfg;
  cfg.size.max_patches = c.max_patches;
  PreprocessedImage p = preprocess_image(img, cfg);
  EXPECT_EQ(p.resized_w, ref.new_w) << c.name;
  EXPECT_EQ(p.resized_h, ref.new_h) << c.name;
  EXPECT_EQ(p.tokens, ref.tokens) << c.name;
  std::string want = test::read_file(dir / (c.name + ".rgb"));
  EXPECT_EQ(p.resized_rgb.size(), want.size()) << c.name;
  int worst = 0;
  size_t differing = 0, first = 0;
  for (size_t i = 0; i < std::min(want.size(), p.resized_rgb.size()); i++) {
    int d = std::abs((int)p.resized_rgb[i] - (uint8_t)want[i]);
    if (d && !differing++) first = i;
    worst = std::max(worst, d);
  }
  if (differing)
    ADD_FAILURE() << c.name << ": " << differing << " bytes differ, first at pixel " << first / 3
                  << " (max difference " << worst << ")";
  return worst;
}

TEST(ImagePillow, ResizedBytesEqualPillowForEveryLosslessMode) {
  if (!have_pillow()) GTEST_SKIP() << "/usr/bin/python3 with PIL and numpy is not installed";
  const std::vector<Case> cases = {
      {"rgb_odd", "png", "RGB", 97, 61, 16},
      {"rgb_vga", "png", "RGB", 640, 480, 256},
      {"rgb_wide", "png", "RGB", 1000, 3, 64},
      {"rgb_tall", "png", "RGB", 5, 900, 64},
      {"rgb_one_axis", "png", "RGB", 700, 20, 100},
      {"rgb_fits", "png", "RGB", 45, 33, 65536},
      {"rgb_1x1", "png", "RGB", 1, 1, 16},
      {"rgba", "png", "RGBA", 200, 150, 64},
      {"rgba_fits", "png", "RGBA", 50, 40, 65536},
      {"la", "png", "LA", 123, 77, 32},
      {"l", "png", "L", 300, 200, 100},
      {"l_key", "png", "L", 150, 90, 40, true},
      {"bilevel", "png", "1", 150, 100, 30},
      {"p", "png", "P", 321, 123, 64},
      {"p_trns", "png", "P", 160, 120, 48, true},
      {"gif", "gif", "P", 250, 180, 64},
      {"gif_transparent", "gif", "P", 131, 97, 30, true},
      {"gif_gray", "gif", "L", 140, 100, 36},
      {"bmp_rgb", "bmp", "RGB", 211, 97, 64},
      {"bmp_p", "bmp", "P", 130, 70, 24},
      {"bmp_l", "bmp", "L", 90, 140, 30},
      {"bmp_1", "bmp", "1", 77, 55, 12},
      {"tga_rgb", "tga", "RGB", 120, 80, 30},
      {"tga_rgba_rle", "tga", "RGBA", 99, 101, 30, false, true},
      {"tga_l", "tga", "L", 64, 200, 40},
      {"tga_la", "tga", "LA", 70, 70, 16},
      {"tga_p", "tga", "P", 90, 60, 20},
  };
  test::TempDir dir;
  auto refs = run_reference(cases, dir.path());
  for (const Case& c : cases) {
    auto it = refs.find(c.name);
    if (it == refs.end()) {
      ADD_FAILURE() << c.name << ": no reference";
      continue;
    }
    compare_case(c, it->second, dir.path());
  }
}

TEST(ImagePillow, JpegIsWithinThreeLevelsOfPillow) {
  if (!have_pillow()) GTEST_SKIP() << "/usr/bin/python3 with PIL and numpy is not installed";
  // stb's IDCT is not libjpeg-turbo's (docs/VISION.md §2.2–§2.4): sizes and tokens match, bytes
  // nearly.
  const std::vector<Case> cases = {{"jpeg", "jpeg", "RGB", 320, 240, 64},
                                   {"jpeg_gray", "jpeg", "L", 200, 300, 64}};
  test::TempDir dir;
  auto refs = run_reference(cases, dir.path());
  for (const Case& c : cases) {
    ASSERT_TRUE(refs.count(c.name)) << c.name;
    std::string file = test::read_file(dir / (c.name + ".jpeg"));
    PreprocessConfig cfg;
    cfg.size.max_patches = c.max_patches;
    PreprocessedImage p = preprocess_image(decode_image(Bytes(file.begin(), file.end())), cfg);
    const Reference& ref = refs[c.name];
    EXPECT_EQ(p.tokens, ref.tokens);
    std::string want = test::read_file(dir / (c.name + ".rgb"));
    ASSERT_EQ(p.resized_rgb.size(), want.size());
    int worst = 0;
    for (size_t i = 0; i < want.size(); i++)
      worst = std::max(worst, std::abs((int)p.resized_rgb[i] - (uint8_t)want[i]));
    EXPECT_LE(worst, 3) << c.name;
  }
}

}  // namespace
}  // namespace waste
