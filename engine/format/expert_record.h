// One routed expert as stored in a bank file: a 48-byte header, VQ indices for the gate, up and
// down matrices, one f16 scale per output row, zero padding to 4 KiB (docs/FORMAT.md §4).
#pragma once

#include <cstdint>
#include <string>

#include "engine/format/manifest.h"
#include "engine/kernels/kernels.h"

namespace waste {

constexpr uint32_t kExpertMagic = 0x50584557;  // "WEXP"
constexpr size_t kExpertHeaderBytes = 48;
constexpr uint8_t kFmtVq3r = 4;
constexpr uint8_t kFmtVq2r = 5;

struct ExpertHeader {
  uint32_t magic;
  uint16_t layer;
  uint16_t expert_id;
  uint8_t fmt;
  uint8_t flags;
  uint16_t codebook_id;
  uint16_t lowrank_id;
  uint16_t reserved0;
  uint32_t rec_4k_blocks;
  uint32_t gate_off;
  uint32_t up_off;
  uint32_t down_off;
  uint32_t chan_corr_off;
  uint32_t crc32;
  uint32_t reserved1[2];
};
static_assert(sizeof(ExpertHeader) == kExpertHeaderBytes);

// Sizes every record of a layer must have, derived from the config and the quantization.
struct RecordGeometry {
  int64_t inter = 0;  // moe_intermediate_size: rows of gate and up, inputs of down
  int64_t width = 0;  // expert input/output width (latent on K3)
  int stages = 0;
  int entries = 0;
  uint64_t stride = 0;

  uint64_t index_bytes(int64_t rows, int64_t cols) const;
  uint64_t gate_bytes() const { return index_bytes(inter, width); }
  uint64_t down_bytes() const { return index_bytes(width, inter); }
  uint64_t scale_count() const { return (uint64_t)(2 * inter + width); }
  // Bytes a record needs before padding.
  uint64_t used_bytes() const {
    return kExpertHeaderBytes + 2 * gate_bytes() + down_bytes() + 2 * scale_count();
  }
};

RecordGeometry record_geometry(const Manifest& m, const BankEntry& bank);

// The three matrices of a record that passed check_record, pointing into its buffer.
struct ExpertView {
  VqMatrix gate, up, down;
  int codebook_base = 0;
};

// Checks a record read for (layer, expert) against the geometry (always on, O(1)). With
// `verify_crc` also the CRC of the payload. Throws FormatError naming layer, expert and field.
void check_record(const uint8_t* rec, const RecordGeometry& g, int layer, int expert,
                  int64_t codebook_base, bool verify_crc);

ExpertView view_record(const uint8_t* rec, const RecordGeometry& g);

// Writes a header + payload (indices already blocked) for `waste synth` and tests; fills in the
// offsets and CRC. `rec` has g.stride bytes, zeroed.
void finish_record(uint8_t* rec, const RecordGeometry& g, int layer, int expert, int codebook_base);

}  // namespace waste
