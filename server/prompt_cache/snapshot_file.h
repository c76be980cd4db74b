// The prompt cache's files. A snapshot of a session is split in two kinds of file, so that the
// snapshots along one conversation share what they have in common:
//
//   NAME.snap  the token history, its position keys, the KDA states (fixed size), and the list of
//              row segments that hold its MLA latent rows, in order;
//   NAME.rows  the MLA latent rows of positions [start, end) of every MLA layer. Rows depend
//              only on the keys before them, so a segment is named by (start, end, hash of the
//              keys [0, end)) and any snapshot extending those keys may reference it.
//
// Every file starts with a header (magic, version, the model's content fingerprint, what it
// holds, the payload's size and hash, and a hash of the header itself); a reader checks all of it
// and refuses, by name and reason, a file that is truncated, damaged, foreign or stale.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "engine/model/session.h"

namespace waste {

// The latent rows [start, end) of a snapshot, kept in their own file.
struct RowSegment {
  int64_t start = 0, end = 0;
  uint64_t key_hash = 0;  // chain_hash over the position keys [0, end)

  std::string file_name() const;
  bool operator==(const RowSegment&) const = default;
};

// What a .snap file's header and segment table say, read without the rest of the file (the
// index is built from these).
struct SnapshotInfo {
  int64_t n_tokens = 0;
  uint64_t key_hash = 0;  // over the position keys [0, n_tokens)
  std::vector<RowSegment> segments;

  std::string file_name() const;
};

// chain_hash of keys[0, p) for every p in 0..keys.size().
std::vector<uint64_t> prefix_hashes(std::span<const uint64_t> keys);

// Write `s` (whose position keys are `keys`) as a .snap in `dir`, its rows [0, pos) held by
// `segments`; and a .rows file of the rows [seg.start, seg.end) of `s`. Both atomic; IoError on
// failure (nothing is left under the target name).
void write_snapshot_file(const std::filesystem::path& dir, uint64_t fingerprint, const Session& s,
                         std::span<const uint64_t> keys, const SnapshotInfo& info);
void write_rows_file(const std::filesystem::path& dir, uint64_t fingerprint, const Session& s,
                     const RowSegment& seg);

// The header and segment table of a .snap file; FormatError or IoError naming what is wrong.
SnapshotInfo read_snapshot_info(const std::filesystem::path& file, uint64_t fingerprint);

// Restores into `s` (a fresh session of the model) the snapshot in `file` of `info`, checking it
// is the state of exactly `keys` (the first info.n_tokens of a request's keys), and reading its
// rows from the segment files beside it. FormatError or IoError naming the file and the reason;
// `*bad_file` then names the file at fault. `*bytes_read` counts what was read.
void read_snapshot(const std::filesystem::path& file, uint64_t fingerprint,
                   const SnapshotInfo& info, std::span<const uint64_t> keys, Session& s,
                   std::filesystem::path* bad_file, uint64_t* bytes_read);

}  // namespace waste
