#include "engine/format/expert_record.h"

#include <cstring>

#include "engine/base/crc32.h"
#include "engine/base/error.h"

namespace waste {

uint64_t RecordGeometry::index_bytes(int64_t rows, int64_t cols) const {
  int64_t padded = (rows + kVqRowBlock - 1) / kVqRowBlock * kVqRowBlock;
  return (uint64_t)padded * (uint64_t)(cols / kVqDim) * (uint64_t)stages;
}

RecordGeometry record_geometry(const Manifest& m, const BankEntry& bank) {
  RecordGeometry g;
  g.inter = m.config.moe_inter;
  g.width = m.config.expert_in();
  g.stages = m.quant.stages;
  g.entries = m.quant.entries;
  g.stride = bank.stride();
  if (g.used_bytes() > g.stride)
    fail("layers.\"{}\": record stride {} is smaller than an expert of this shape needs ({})",
         bank.layer, g.stride, g.used_bytes());
  return g;
}

void check_record(const uint8_t* rec, const RecordGeometry& g, int layer, int expert,
                  int64_t codebook_base, bool verify_crc) {
  ExpertHeader h;
  std::memcpy(&h, rec, sizeof h);
  auto bad = [&](const char* field, uint64_t got, uint64_t want) {
    fail("expert {} of layer {}: record header field {} is {} (expected {})", expert, layer, field,
         got, want);
  };
  if (h.magic != kExpertMagic) bad("magic", h.magic, kExpertMagic);
  if (h.layer != layer) bad("layer", h.layer, (uint64_t)layer);
  if (h.expert_id != expert) bad("expert_id", h.expert_id, (uint64_t)expert);
  if (h.fmt != kFmtVq3r && h.fmt != kFmtVq2r) bad("fmt", h.fmt, kFmtVq3r);
  if (h.lowrank_id != 0) bad("lowrank_id", h.lowrank_id, 0);
  if ((uint64_t)h.rec_4k_blocks * 4096 != g.stride)
    bad("rec_4k_blocks", h.rec_4k_blocks, g.stride / 4096);
  if (h.codebook_id != codebook_base) bad("codebook_id", h.codebook_id, (uint64_t)codebook_base);
  uint64_t up = kExpertHeaderBytes + g.gate_bytes(), down = up + g.gate_bytes();
  uint64_t scales = down + g.down_bytes();
  if (h.gate_off != kExpertHeaderBytes) bad("gate_off", h.gate_off, kExpertHeaderBytes);
  if (h.up_off != up) bad("up_off", h.up_off, up);
  if (h.down_off != down) bad("down_off", h.down_off, down);
  if (h.chan_corr_off != scales) bad("chan_corr_off", h.chan_corr_off, scales);
  if (verify_crc) {
    uint64_t end = scales + 2 * g.scale_count();
    uint32_t crc = crc32(rec + kExpertHeaderBytes, end - kExpertHeaderBytes);
    if (crc != h.crc32)
      fail("expert {} of layer {}: checksum mismatch (stored {:08x}, computed {:08x})", expert,
           layer, h.crc32, crc);
  }
}

ExpertView view_record(const uint8_t* rec, const RecordGeometry& g) {
  ExpertHeader h;
  std::memcpy(&h, rec, sizeof h);
  auto scales = reinterpret_cast<const uint16_t*>(rec + h.chan_corr_off);
  ExpertView v;
  v.codebook_base = h.codebook_id;
  v.gate = {g.inter, g.width / kVqDim, rec + h.gate_off, scales};
  v.up = {g.inter, g.width / kVqDim, rec + h.up_off, scales + g.inter};
  v.down = {g.width, g.inter / kVqDim, rec + h.down_off, scales + 2 * g.inter};
  return v;
}

void finish_record(uint8_t* rec, const RecordGeometry& g, int layer, int expert,
                   int codebook_base) {
  ExpertHeader h{};
  h.magic = kExpertMagic;
  h.layer = (uint16_t)layer;
  h.expert_id = (uint16_t)expert;
  h.fmt = kFmtVq3r;
  h.codebook_id = (uint16_t)codebook_base;
  h.rec_4k_blocks = (uint32_t)(g.stride / 4096);
  h.gate_off = kExpertHeaderBytes;
  h.up_off = (uint32_t)(kExpertHeaderBytes + g.gate_bytes());
  h.down_off = (uint32_t)(h.up_off + g.gate_bytes());
  h.chan_corr_off = (uint32_t)(h.down_off + g.down_bytes());
  uint64_t end = h.chan_corr_off + 2 * g.scale_count();
  h.crc32 = crc32(rec + kExpertHeaderBytes, end - kExpertHeaderBytes);
  std::memcpy(rec, &h, sizeof h);
}

}  // namespace waste
