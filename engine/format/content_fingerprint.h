// The identity of what a container computes: a hash over every file that changes the logits
// (manifest, trunk, codebooks, tokenizer, special tokens, vision settings, and each expert bank's
// size and first page). Two synthetic containers with different seeds have byte-identical
// manifests, so the manifest alone cannot tell state computed by one from the other; files kept
// across restarts (prompt-cache snapshots, expert usage) carry this instead.
#pragma once

#include <cstdint>

#include "engine/format/container.h"

namespace waste {

// Reads the files in full (the bank files only in part): seconds for a large trunk, so callers
// off the serving path compute it once.
uint64_t content_fingerprint(const Container& c);

}  // namespace waste
