// Decoding an untrusted image into 8-bit RGBA with stb_image, behind the limits of
// docs/VISION.md §8: the format is sniffed from magic bytes, the header's size is checked
// before anything is allocated, and every allocation stb makes is counted against a per-decode
// budget and zeroed. The result also records the mode Pillow would open the file in, because the
// release's preprocessing (engine/vision/image_preprocess.h) picks its resampler and alpha handling
// from that mode (docs/VISION.md §2.2–§2.4).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace waste {

enum class ImageFormat { Png, Jpeg, Gif, Bmp, Tga, Psd };
const char* format_name(ImageFormat f);  // "PNG", "JPEG", ...

// Pillow's name for how the pixels are stored; it chooses the release's resampler
// (nearest for P and 1, premultiplied bicubic for LA and RGBA, plain bicubic otherwise) and
// whether the chessboard fill applies.
enum class PixelMode { Bilevel, L, LA, P, RGB, RGBA };
const char* mode_name(PixelMode m);  // "1", "L", "LA", "P", "RGB", "RGBA"

struct DecodeLimits {
  size_t max_encoded_bytes = 20u << 20;  // the file itself, before any parsing
  int max_side = 16384;                  // also stb's compile-time ceiling; larger values are moot
  uint64_t max_pixels = 40'000'000;      // width × height from the header
  // Ceiling on what one decode may allocate. The budget of a decode is the smaller of this and
  // 24 B per header pixel + 2 × the file + 16 MiB, which covers 16-bit RGBA PNGs and
  // progressive JPEGs while stopping zlib bombs (a 16×16 PNG that inflates to 1 GiB).
  uint64_t max_decode_memory = uint64_t{1} << 30;
  // TGA has no magic number and PSD little fuzzing history; both are opt-in (docs/VISION.md §2.1,
  // §2.4).
  bool allow_tga_psd = false;
};

struct DecodedImage {
  int width = 0, height = 0;  // the stored size; EXIF orientation is not applied, as in the release
  ImageFormat format = ImageFormat::Png;
  PixelMode mode = PixelMode::RGB;
  // P, L and 1 only: the file carries a transparency entry (PNG tRNS, GIF transparency index),
  // so the release composites the resized image over the chessboard. RGBA and LA always do.
  bool transparency = false;
  // L and 1 with transparency: the pixel value that is transparent, compared after resizing as
  // Pillow does; -1 when there is none. P images carry their transparency in the alpha bytes.
  int transparent_value = -1;
  // width × height × 4 bytes, RGBA, rows top to bottom. Palettes are expanded. For RGB, L and 1
  // alpha is 255 everywhere (a PNG colour key or BMP alpha is ignored, as by the release); L and
  // 1 have R = G = B.
  std::vector<uint8_t> rgba;
};

// Refuses a file larger than limits.max_encoded_bytes; callers with a size in hand (a data URL
// after base64 decoding) use it before keeping the bytes.
void check_encoded_size(size_t bytes, const DecodeLimits& limits);

// Decodes the first frame of a PNG, JPEG, GIF or BMP (and TGA or PSD when allowed). Throws
// FormatError naming the problem: an unsupported or unknown format, a size over the limits, a
// corrupt or truncated file, or a decode that needs more memory than its budget.
DecodedImage decode_image(std::span<const uint8_t> bytes, const DecodeLimits& limits = {});

}  // namespace waste
