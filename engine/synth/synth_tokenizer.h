// The small byte-level vocabulary of synthetic containers: the 256 bytes, a few hundred common
// English merges, and the model family's special tokens at their real offsets from the end of
// the vocabulary (a reserved block of 256 ids, as in the Kimi releases).
#pragma once

#include <filesystem>

#include "engine/format/model_config.h"

namespace waste {

constexpr int kSynthSpecialBlock = 256;

struct SynthVocab {
  int vocab = 0;  // total ids, specials included
  int bos = 0;
  int eos = 0;  // <|end_of_msg|> (K3) or <|im_end|> (Kimi-Linear)
};

// The ids of a vocabulary of `vocab` ids (0: just the ranks and the special block), without
// writing it.
SynthVocab synthetic_vocab(int vocab);

// Writes tokenizer.model and specials.json into `dir`. With `vocab` > 0 the specials sit at the
// top of a vocabulary of that size (the real models' layout); otherwise right after the ranks.
SynthVocab write_synthetic_tokenizer(const std::filesystem::path& dir, Arch arch, int vocab);

}  // namespace waste
