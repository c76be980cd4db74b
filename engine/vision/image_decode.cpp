#include "engine/vision/image_decode.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#include "engine/base/error.h"

namespace waste {
namespace {

// stb_image allocates through macros, so the budget of the decode in progress is found through a
// thread-local pointer that BudgetScope sets and clears around each call into stb.
struct DecodeBudget {
  uint64_t limit = 0;
  uint64_t used = 0;
  bool exceeded = false;
};

thread_local DecodeBudget* t_budget = nullptr;

class BudgetScope {
 public:
  explicit BudgetScope(DecodeBudget* b) { t_budget = b; }
  ~BudgetScope() { t_budget = nullptr; }
  BudgetScope(const BudgetScope&) = delete;
  BudgetScope& operator=(const BudgetScope&) = delete;
};

// Each block carries its size in a header so frees and reallocs can be accounted.
constexpr size_t kHeader = 16;

bool reserve(uint64_t n) {
  DecodeBudget* b = t_budget;
  if (!b || n > b->limit || b->used > b->limit - n) {
    if (b) b->exceeded = true;
    return false;
  }
  b->used += n;
  return true;
}

void release(uint64_t n) {
  if (t_budget) t_budget->used -= std::min<uint64_t>(n, t_budget->used);
}

// Zeroed like calloc: uninitialised heap bytes must never become pixels (stb 2.x TGA and BMP
// read past short files into their output buffers).
void* budget_malloc(size_t n) {
  if (!reserve(n)) return nullptr;
  void* p = std::calloc(1, n + kHeader);
  if (!p) {
    release(n);
    return nullptr;
  }
  std::memcpy(p, &n, sizeof n);
  return (char*)p + kHeader;
}

void budget_free(void* user) {
  if (!user) return;
  char* p = (char*)user - kHeader;
  size_t n;
  std::memcpy(&n, p, sizeof n);
  release(n);
  std::free(p);
}

void* budget_realloc(void* user, size_t n) {
  if (!user) return budget_malloc(n);
  char* p = (char*)user - kHeader;
  size_t old;
  std::memcpy(&old, p, sizeof old);
  if (n > old && !reserve(n - old)) return nullptr;
  char* q = (char*)std::realloc(p, n + kHeader);
  if (!q) {
    if (n > old) release(n - old);
    return nullptr;
  }
  if (n < old) release(old - n);
  if (n > old) std::memset(q + kHeader + old, 0, n - old);
  std::memcpy(q, &n, sizeof n);
  return q + kHeader;
}

}  // namespace
}  // namespace waste

// The one place stb_image is compiled. Only the 8-bit memory API is used: no stdio, no animated
// GIF API (most stb GIF CVEs live there), no vertical flip; HDR, PIC and PNM are left out.
#define STB_IMAGE_IMPLEMENTATION
#define STBI_NO_STDIO
#define STBI_NO_HDR
#define STBI_NO_LINEAR
#define STBI_NO_PIC
#define STBI_NO_PNM
#define STBI_MAX_DIMENSIONS 16384
#define STBI_MALLOC(n) waste::budget_malloc(n)
#define STBI_REALLOC(p, n) waste::budget_realloc(p, n)
#define STBI_FREE(p) waste::budget_free(p)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wall"
#pragma GCC diagnostic ignored "-Wextra"
#pragma GCC diagnostic ignored "-Wshadow"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wimplicit-fallthrough"
#include <stb/stb_image.h>
#pragma GCC diagnostic pop

namespace waste {

const char* format_name(ImageFormat f) {
  switch (f) {
    case ImageFormat::Png:
      return "PNG";
    case ImageFormat::Jpeg:
      return "JPEG";
    case ImageFormat::Gif:
      return "GIF";
    case ImageFormat::Bmp:
      return "BMP";
    case ImageFormat::Tga:
      return "TGA";
    case ImageFormat::Psd:
      return "PSD";
  }
  return "image";
}

const char* mode_name(PixelMode m) {
  switch (m) {
    case PixelMode::Bilevel:
      return "1";
    case PixelMode::L:
      return "L";
    case PixelMode::LA:
      return "LA";
    case PixelMode::P:
      return "P";
    case PixelMode::RGB:
      return "RGB";
    case PixelMode::RGBA:
      return "RGBA";
  }
  return "?";
}

void check_encoded_size(size_t bytes, const DecodeLimits& limits) {
  if (bytes > limits.max_encoded_bytes)
    fail("image is {} bytes; the limit is {} bytes", bytes, limits.max_encoded_bytes);
}

namespace {

using namespace std::literals;
using Bytes = std::span<const uint8_t>;

uint32_t be16(Bytes b, size_t at) {
  return at + 2 <= b.size() ? (b[at] << 8) | b[at + 1] : 0;
}
uint32_t le16(Bytes b, size_t at) {
  return at + 2 <= b.size() ? b[at] | (b[at + 1] << 8) : 0;
}
uint32_t be32(Bytes b, size_t at) {
  return at + 4 <= b.size() ? (be16(b, at) << 16) | be16(b, at + 2) : 0;
}
uint32_t le32(Bytes b, size_t at) {
  return at + 4 <= b.size() ? le16(b, at) | (le16(b, at + 2) << 16) : 0;
}

bool starts_with(Bytes b, std::string_view magic, size_t at = 0) {
  return b.size() >= at + magic.size() &&
         std::memcmp(b.data() + at, magic.data(), magic.size()) == 0;
}

// What the header says, read by us: the size (for the caps, before stb allocates anything) and
// the facts Pillow's mode depends on, which stb does not report.
struct Header {
  ImageFormat format = ImageFormat::Png;
  uint64_t width = 0, height = 0;
  PixelMode mode = PixelMode::RGB;
  bool transparency = false;
  int transparent_value = -1;
  bool flip_horizontally = false;  // TGA stored right to left; stb ignores that bit, Pillow not
  // GIF: the first frame's rectangle and palette, to fill what lies outside it as Pillow does.
  uint64_t frame_x = 0, frame_y = 0, frame_w = 0, frame_h = 0;
  std::vector<uint8_t> palette;  // RGB triples
  int transparent_index = -1;
};

bool looks_like_tga(Bytes b) {
  if (b.size() < 18) return false;
  uint8_t cmap = b[1], type = b[2], depth = b[16];
  bool mapped = type == 1 || type == 9;
  bool known = mapped || type == 2 || type == 3 || type == 10 || type == 11;
  if (!known || cmap > 1 || mapped != (cmap == 1)) return false;
  if (le16(b, 12) == 0 || le16(b, 14) == 0) return false;
  return depth == 8 || depth == 15 || depth == 16 || depth == 24 || depth == 32;
}

std::string first_bytes(Bytes b) {
  std::string s;
  for (size_t i = 0; i < std::min<size_t>(b.size(), 8); i++)
    s += fmt::format("{}{:02x}", i ? " " : "", b[i]);
  return s.empty() ? "none" : s;
}

// Names formats we refuse, so a client learns what to convert from.
void refuse_known(Bytes b) {
  if (starts_with(b, "RIFF") && starts_with(b, "WEBP", 8)) fail("WebP is not supported");
  if (starts_with(b, "II*\0"sv) || starts_with(b, "MM\0*"sv)) fail("TIFF is not supported");
  if (starts_with(b, "ftyp", 4)) {
    if (starts_with(b, "avif", 8) || starts_with(b, "avis", 8)) fail("AVIF is not supported");
    if (starts_with(b, "hei", 8) || starts_with(b, "mif1", 8) || starts_with(b, "msf1", 8))
      fail("HEIF/HEIC is not supported");
  }
  if (starts_with(b, "\xff\x0a"sv) || starts_with(b, "\0\0\0\x0cJXL "sv))
    fail("JPEG XL is not supported");
  if (starts_with(b, "\0\0\1\0"sv)) fail("ICO is not supported");
  if (starts_with(b, "qoif")) fail("QOI is not supported");
  if (starts_with(b, "%PDF")) fail("PDF is not supported");
  if (starts_with(b, "<svg") || starts_with(b, "<?xml")) fail("SVG is not supported");
}

ImageFormat sniff(Bytes b, const DecodeLimits& limits) {
  if (b.empty()) fail("image is empty (0 bytes)");
  if (starts_with(b, "\x89PNG\r\n\x1a\n")) return ImageFormat::Png;
  if (starts_with(b, "\xff\xd8\xff")) return ImageFormat::Jpeg;
  if (starts_with(b, "GIF87a") || starts_with(b, "GIF89a")) return ImageFormat::Gif;
  if (starts_with(b, "BM")) return ImageFormat::Bmp;
  if (starts_with(b, "8BPS")) {
    if (!limits.allow_tga_psd) fail("PSD images are not enabled (DecodeLimits::allow_tga_psd)");
    return ImageFormat::Psd;
  }
  refuse_known(b);
  if (looks_like_tga(b)) {
    if (!limits.allow_tga_psd) fail("TGA images are not enabled (DecodeLimits::allow_tga_psd)");
    return ImageFormat::Tga;
  }
  fail("unknown image format (first bytes {})", first_bytes(b));
}

void read_png(Bytes b, Header* h) {
  if (b.size() < 33 || be32(b, 8) != 13 || !starts_with(b, "IHDR", 12))
    fail("corrupt PNG: no IHDR chunk at the start");
  h->width = be32(b, 16);
  h->height = be32(b, 20);
  int depth = b[24], color = b[25];
  // Chunks before the first IDAT: only tRNS matters here. Each step moves forward by at least
  // 12 bytes, and a length running past the end stops the walk (stb reports the damage).
  const uint8_t* trns = nullptr;
  size_t trns_len = 0;
  for (size_t at = 8; at + 12 <= b.size();) {
    uint64_t len = be32(b, at);
    if (starts_with(b, "IDAT", at + 4) || starts_with(b, "IEND", at + 4)) break;
    if (at + 12 + len > b.size()) break;
    if (starts_with(b, "tRNS", at + 4)) {
      trns = b.data() + at + 8;
      trns_len = len;
    }
    at += 12 + len;
  }
  switch (color) {
    case 0:
      // 16-bit gray is Pillow's mode I, which the release clips to white; we keep stb's >> 8
      // and drop its colour key (docs/VISION.md §2.2–§2.4, a deliberate deviation).
      h->mode = depth == 1 ? PixelMode::Bilevel : PixelMode::L;
      if (trns && trns_len >= 2 && depth != 16) {
        h->transparency = true;
        // Pillow keeps the raw key and compares it with the 8-bit pixel values.
        int key = (trns[0] << 8) | trns[1];
        h->transparent_value = key <= 255 ? key : -1;
      }
      break;
    case 3:
      h->mode = PixelMode::P;
      h->transparency = trns != nullptr;
      break;
    case 4:
      h->mode = PixelMode::LA;
      break;
    case 6:
      h->mode = PixelMode::RGBA;
      break;
    default:
      h->mode = PixelMode::RGB;
      break;  // 2, or invalid (stb refuses it)
  }
}

// Skips GIF data sub-blocks starting at `at`; returns the offset after the terminator.
size_t skip_sub_blocks(Bytes b, size_t at) {
  while (at < b.size() && b[at] != 0) at += 1 + b[at];
  return at + 1;
}

bool identity_gray(const std::vector<uint8_t>& pal) {
  for (size_t i = 0; i + 2 < pal.size(); i += 3)
    if (pal[i] != i / 3 || pal[i + 1] != i / 3 || pal[i + 2] != i / 3) return false;
  return true;
}

void read_gif(Bytes b, Header* h) {
  if (b.size() < 13) fail("corrupt GIF: the header is cut short");
  h->width = le16(b, 6);
  h->height = le16(b, 8);
  size_t at = 13;
  std::vector<uint8_t> global;
  if (b[10] & 0x80) {
    size_t n = size_t{3} << ((b[10] & 7) + 1);
    if (at + n > b.size()) fail("corrupt GIF: the global palette is cut short");
    global.assign(b.begin() + at, b.begin() + at + n);
    at += n;
  }
  // Walk extensions up to the first image descriptor; a graphic control extension before it
  // may name a transparent index.
  bool found = false;
  while (at < b.size() && !found) {
    if (b[at] == 0x21 && at + 1 < b.size()) {
      if (b[at + 1] == 0xf9 && at + 6 < b.size() && b[at + 2] >= 4 && (b[at + 3] & 1))
        h->transparent_index = b[at + 6];
      at = skip_sub_blocks(b, at + 2);
    } else if (b[at] == 0x2c && at + 10 <= b.size()) {
      h->frame_x = le16(b, at + 1);
      h->frame_y = le16(b, at + 3);
      h->frame_w = le16(b, at + 5);
      h->frame_h = le16(b, at + 7);
      uint8_t flags = b[at + 9];
      h->palette = global;
      if (flags & 0x80) {
        size_t n = size_t{3} << ((flags & 7) + 1);
        if (at + 10 + n > b.size()) fail("corrupt GIF: the local palette is cut short");
        h->palette.assign(b.begin() + at + 10, b.begin() + at + 10 + n);
      }
      found = true;
    } else {
      break;
    }
  }
  if (!found) {
    h->mode = PixelMode::P;  // stb names the damage after the size check
    return;
  }
  // Pillow opens a GIF whose palette is the identity gray ramp as L, which it resizes bicubic.
  h->mode = identity_gray(h->palette) ? PixelMode::L : PixelMode::P;
  h->transparency = h->transparent_index >= 0;
  if (h->mode == PixelMode::L) h->transparent_value = h->transparent_index;
}

void read_bmp(Bytes b, Header* h) {
  uint32_t hsz = le32(b, 14);
  if (b.size() < 26 || hsz < 12) fail("corrupt BMP: the header is cut short");
  int bpp;
  if (hsz == 12) {
    h->width = le16(b, 18);
    h->height = le16(b, 20);
    bpp = le16(b, 24);
  } else {
    int32_t w = (int32_t)le32(b, 18), hh = (int32_t)le32(b, 22);
    h->width = w < 0 ? 0 : (uint64_t)w;                            // negative width is invalid
    h->height = hh < 0 ? (uint64_t)(-(int64_t)hh) : (uint64_t)hh;  // negative = top-down rows
    bpp = le16(b, 28);
  }
  uint32_t compression = hsz == 12 ? 0 : le32(b, 30);
  if (bpp <= 8) {
    // Pillow drops a palette that is exactly the gray ramp (or black/white for two colours).
    uint64_t colors = hsz == 12 ? 0 : le32(b, 46);
    if (colors == 0) colors = uint64_t{1} << std::clamp(bpp, 1, 8);
    size_t entry = hsz == 12 ? 3 : 4, base = 14 + hsz;
    bool gray = colors <= 256 && base + colors * entry <= b.size();
    for (uint64_t i = 0; gray && i < colors; i++) {
      unsigned v = colors == 2 ? (unsigned)(i * 255) : (unsigned)i;
      const uint8_t* e = b.data() + base + i * entry;
      gray = e[0] == v && e[1] == v && e[2] == v;
    }
    h->mode = !gray ? PixelMode::P : colors == 2 ? PixelMode::Bilevel : PixelMode::L;
  } else if (bpp == 32 && compression == 3 && hsz >= 56 && le32(b, 66) != 0) {
    h->mode = PixelMode::RGBA;  // BI_BITFIELDS with an alpha mask
  } else {
    h->mode = PixelMode::RGB;  // 32-bit BI_RGB alpha is ignored by Pillow
  }
}

void read_tga(Bytes b, Header* h) {
  h->width = le16(b, 12);
  h->height = le16(b, 14);
  uint8_t type = b[2] & 7, depth = b[16];
  if (type == 3)
    h->mode = depth == 16 ? PixelMode::LA : PixelMode::L;
  else if (type == 1)
    h->mode = PixelMode::P;  // a 32-bit colour map's alpha is ignored
  else
    h->mode = depth == 32 ? PixelMode::RGBA : PixelMode::RGB;
  h->flip_horizontally = (b[17] & 0x10) != 0;
}

void read_psd(Bytes b, Header* h) {
  if (b.size() < 26) fail("corrupt PSD: the header is cut short");
  h->height = be32(b, 14);
  h->width = be32(b, 18);
  h->mode = be16(b, 12) == 4 ? PixelMode::RGBA : PixelMode::RGB;
}

// stb 2.27 builds a Huffman table from a DHT segment without checking that its code counts sum
// to at most 256, and then writes past the table (found by tests/fuzz/image_fuzz.cpp; later stb
// versions check it). Every FF C4 in the file is read as stb would read a DHT there, so no
// alignment stb could resynchronise to escapes the check.
void check_jpeg_huffman_tables(Bytes b) {
  for (size_t i = 0; i + 1 < b.size(); i++) {
    if (b[i] != 0xff || b[i + 1] != 0xc4) continue;
    int64_t left = (int64_t)be16(b, i + 2) - 2;
    size_t at = i + 4;
    while (left > 0 && at < b.size()) {
      uint8_t q = b[at];
      if ((q >> 4) > 1 || (q & 15) > 3) break;  // stb refuses this table itself
      int n = 0;
      for (size_t k = 1; k <= 16; k++) n += at + k < b.size() ? b[at + k] : 0;
      if (n > 256) fail("corrupt JPEG: a Huffman table declares {} codes (at most 256)", n);
      left -= 17 + n;
      at += 17 + n;
    }
  }
}

Header read_header(Bytes b, ImageFormat f) {
  Header h;
  h.format = f;
  switch (f) {
    case ImageFormat::Png:
      read_png(b, &h);
      break;
    case ImageFormat::Gif:
      read_gif(b, &h);
      break;
    case ImageFormat::Bmp:
      read_bmp(b, &h);
      break;
    case ImageFormat::Tga:
      read_tga(b, &h);
      break;
    case ImageFormat::Psd:
      read_psd(b, &h);
      break;
    case ImageFormat::Jpeg:  // the size comes from stb's header scan
      check_jpeg_huffman_tables(b);
      break;
  }
  return h;
}

void check_size(uint64_t w, uint64_t h, ImageFormat f, const DecodeLimits& limits) {
  const char* name = format_name(f);
  if (w == 0 || h == 0) fail("{} image has zero width or height ({}x{})", name, w, h);
  uint64_t side = std::min<uint64_t>(limits.max_side, STBI_MAX_DIMENSIONS);
  if (w > side || h > side)
    fail("{} image is {}x{}; the limit is {} pixels per side", name, w, h, side);
  if (w * h > limits.max_pixels)
    fail("{} image is {}x{} = {} pixels; the limit is {} pixels", name, w, h, w * h,
         limits.max_pixels);
}

// stb reads a short BMP palette's missing entries from an uninitialised stack array (stb issue
// #1929). Inserting zero entries up to 256 before the pixels makes every index defined; Pillow
// has no such entries, so files that use them are wrong in Pillow's way, but never random.
std::vector<uint8_t> pad_bmp_palette(Bytes b) {
  uint32_t hsz = le32(b, 14), offset = le32(b, 10);
  int bpp = hsz == 12 ? le16(b, 24) : le16(b, 28);
  if (bpp > 8 || offset > b.size()) return {};
  size_t entry = hsz == 12 ? 3 : 4;
  // stb's own count: the bytes between the headers and the pixels.
  int64_t psize = hsz == 12 ? ((int64_t)offset - 38) / 3 : ((int64_t)offset - 14 - hsz) >> 2;
  if (psize <= 0 || psize >= 256) return {};
  size_t extra = (256 - psize) * entry;
  std::vector<uint8_t> out(b.begin(), b.end());
  out.insert(out.begin() + offset, extra, 0);
  uint32_t moved = offset + (uint32_t)extra;
  for (int i = 0; i < 4; i++) out[10 + i] = (uint8_t)(moved >> (8 * i));
  return out;
}

bool stb_claims_bmp(Bytes b) {
  stbi__context s;
  stbi__start_mem(&s, b.data(), (int)b.size());
  return stbi__bmp_test(&s) != 0;
}

std::string stb_reason() {
  const char* r = stbi_failure_reason();
  return r ? r : "unknown error";
}

// Pillow paints the first frame onto a canvas filled with the transparent index (or index 0);
// stb leaves what lies outside the frame transparent black or the background colour.
void fill_outside_gif_frame(const Header& h, DecodedImage* img) {
  size_t w = img->width, hh = img->height;
  int index = h.transparent_index >= 0 ? h.transparent_index : 0;
  uint8_t px[4] = {0, 0, 0, (uint8_t)(h.transparent_index >= 0 ? 0 : 255)};
  if ((size_t)index * 3 + 2 < h.palette.size())
    for (int c = 0; c < 3; c++) px[c] = h.palette[index * 3 + c];
  for (size_t y = 0; y < hh; y++)
    for (size_t x = 0; x < w; x++) {
      bool inside = x >= h.frame_x && x < h.frame_x + h.frame_w && y >= h.frame_y &&
                    y < h.frame_y + h.frame_h;
      uint8_t* p = &img->rgba[(y * w + x) * 4];
      if (!inside) std::memcpy(p, px, 4);
      // stb leaves transparent pixels black; in L mode their value is the index itself.
      else if (img->mode == PixelMode::L && p[3] == 0)
        std::memcpy(p, px, 3);
    }
}

void flip_rows_horizontally(DecodedImage* img) {
  auto* p = reinterpret_cast<uint32_t*>(img->rgba.data());
  for (int y = 0; y < img->height; y++)
    std::reverse(p + (size_t)y * img->width, p + (size_t)(y + 1) * img->width);
}

// Makes the RGBA bytes say what the Pillow mode says: opaque where the mode has no alpha.
void settle_mode(const Header& h, DecodedImage* img) {
  if (h.format == ImageFormat::Gif) fill_outside_gif_frame(h, img);
  if (h.flip_horizontally) flip_rows_horizontally(img);
  bool keep_alpha = img->mode == PixelMode::RGBA || img->mode == PixelMode::LA ||
                    (img->mode == PixelMode::P && img->transparency);
  if (keep_alpha) return;
  for (size_t i = 3; i < img->rgba.size(); i += 4) img->rgba[i] = 255;
}

}  // namespace

DecodedImage decode_image(Bytes bytes, const DecodeLimits& limits) {
  check_encoded_size(bytes.size(), limits);
  ImageFormat f = sniff(bytes, limits);
  const char* name = format_name(f);
  if (bytes.size() > (size_t)INT32_MAX) fail("{} image is too large for the decoder", name);
  Header h = read_header(bytes, f);
  if (f != ImageFormat::Jpeg) check_size(h.width, h.height, f, limits);

  // stb tries its loaders in turn, TGA last: a BMP its own loader rejects must not reach the
  // TGA loader, which has no magic number to refuse it.
  if (f == ImageFormat::Bmp && !stb_claims_bmp(bytes)) fail("corrupt BMP: unsupported header");

  std::vector<uint8_t> padded =
      f == ImageFormat::Bmp ? pad_bmp_palette(bytes) : std::vector<uint8_t>{};
  Bytes input = padded.empty() ? bytes : Bytes(padded);

  DecodeBudget budget;
  int w = 0, hh = 0, comp = 0;
  {
    BudgetScope scope(&budget);
    budget.limit = limits.max_decode_memory;  // header scans allocate little
    if (!stbi_info_from_memory(input.data(), (int)input.size(), &w, &hh, &comp))
      fail("corrupt {}: {}", name, stb_reason());
  }
  check_size((uint64_t)w, (uint64_t)hh, f, limits);
  if (f == ImageFormat::Jpeg) h.mode = comp == 1 ? PixelMode::L : PixelMode::RGB;

  budget.used = 0;
  budget.limit = std::min<uint64_t>(limits.max_decode_memory,
                                    24 * (uint64_t)w * hh + 2 * input.size() + (16u << 20));
  DecodedImage img;
  img.format = f;
  img.mode = h.mode;
  img.transparency = h.transparency;
  img.transparent_value = h.transparent_value;
  {
    BudgetScope scope(&budget);
    int x = 0, y = 0, n = 0;
    stbi_uc* px = stbi_load_from_memory(input.data(), (int)input.size(), &x, &y, &n, 4);
    if (!px) {
      if (budget.exceeded)
        fail("decoding the {} image ({}x{}) needs more than {:.1f} MiB, its memory budget", name, w,
             hh, budget.limit / 1048576.0);
      fail("corrupt {}: {}", name, stb_reason());
    }
    if (x != w || y != hh) {
      stbi_image_free(px);
      fail("corrupt {}: the header says {}x{} but the image is {}x{}", name, w, hh, x, y);
    }
    img.width = x;
    img.height = y;
    try {
      img.rgba.assign(px, px + (size_t)x * y * 4);
    } catch (const std::bad_alloc&) {
      stbi_image_free(px);
      throw;
    }
    stbi_image_free(px);
  }
  settle_mode(h, &img);
  return img;
}

}  // namespace waste
