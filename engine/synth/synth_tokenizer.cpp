#include "engine/synth/synth_tokenizer.h"

#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "engine/base/atomic_file.h"

namespace waste {

namespace {

// Offsets from the first special id, as in the releases' tokenizer_config.json.
const std::vector<std::pair<int, const char*>> kK3Specials = {{0, "[BOS]"},
                                                              {1, "[EOS]"},
                                                              {2, "<|end_of_msg|>"},
                                                              {3, "<|open|>"},
                                                              {4, "<|close|>"},
                                                              {5, "<|sep|>"},
                                                              {6, "[start_header_id]"},
                                                              {7, "[end_header_id]"},
                                                              {9, "[EOT]"},
                                                              {18, "<|media_begin|>"},
                                                              {19, "<|media_content|>"},
                                                              {20, "<|media_end|>"},
                                                              {21, "<|media_pad|>"},
                                                              {65, "<osagent_mode>"},
                                                              {254, "[UNK]"},
                                                              {255, "[PAD]"}};

const std::vector<std::pair<int, const char*>> kKimiLinearSpecials = {
    {0, "[BOS]"},
    {1, "[EOS]"},
    {2, "<|im_end|>"},
    {3, "<|im_user|>"},
    {4, "<|im_assistant|>"},
    {6, "<|start_header_id|>"},
    {7, "<|end_header_id|>"},
    {9, "[EOT]"},
    {10, "<|im_system|>"},
    {11, "<|tool_calls_section_begin|>"},
    {12, "<|tool_calls_section_end|>"},
    {13, "<|tool_call_begin|>"},
    {14, "<|tool_call_argument_begin|>"},
    {15, "<|tool_call_end|>"},
    {17, "<|im_middle|>"},
    {254, "[UNK]"},
    {255, "[PAD]"}};

const char* kMerges[] = {
    "th",      "he",      "in",    "er",     "an",    "re",     "on",        "at",     "en",
    "nd",      "ti",      "es",    "or",     "te",    "of",     "ed",        "is",     "it",
    "al",      "ar",      "st",    "to",     "nt",    "ng",     "se",        "ha",     "as",
    "ou",      "io",      "le",    "ve",     "co",    "me",     "de",        "hi",     "ri",
    "ro",      "ic",      "ne",    "ea",     "ra",    "ce",     " t",        " a",     " s",
    " w",      " o",      " i",    " c",     " b",    " f",     " m",        " p",     " d",
    " h",      " l",      " n",    " r",     " e",    " g",     "the",       "ing",    "and",
    "ion",     "ent",     "her",   "for",    "tha",   "ere",    "ate",       "his",    "ter",
    "hat",     " th",     " the",  " an",    " and",  " to",    " of",       " in",    " is",
    " it",     " a ",     " wh",   " be",    " co",   " re",    " on",       " for",   " that",
    " with",   " this",   " you",  " are",   " was",  " as",    "tion",      "ation",  "ed ",
    "er ",     "ly",      " he",   " we",    " not",  " can",   " at",       " by",    " or",
    "hello",   " hello",  "world", " world", "model", " model", "token",     " token", "expert",
    " expert", "json",    "true",  "false",  "null",  "user",   "assistant", "system", "tool",
    "\n\n",    "  ",      "    ",  "{\"",    "\":",   "\",",    "\"}",       "()",     "();",
    "return",  " return", "def",   " def",   "int",   " int",   "void",      " void",  "12",
    "00",      "10",      "20",    "19",     "201",
};

std::string base64(const std::string& s) {
  static const char* t = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < s.size(); i += 3) {
    uint32_t v = (uint8_t)s[i] << 16 | (uint8_t)s[i + 1] << 8 | (uint8_t)s[i + 2];
    for (int k = 18; k >= 0; k -= 6) out += t[(v >> k) & 63];
  }
  if (i + 1 == s.size()) {
    uint32_t v = (uint8_t)s[i] << 16;
    out += fmt::format("{}{}==", t[(v >> 18) & 63], t[(v >> 12) & 63]);
  } else if (i + 2 == s.size()) {
    uint32_t v = (uint8_t)s[i] << 16 | (uint8_t)s[i + 1] << 8;
    out += fmt::format("{}{}{}=", t[(v >> 18) & 63], t[(v >> 12) & 63], t[(v >> 6) & 63]);
  }
  return out;
}

std::string json_escape(const std::string& s) {
  std::string out;
  for (char ch : s) {
    if (ch == '"' || ch == '\\') out += '\\';
    out += ch;
  }
  return out;
}

}  // namespace

SynthVocab synthetic_vocab(int vocab) {
  const int ranks = 256 + (int)std::size(kMerges);
  const int first = vocab > 0 ? vocab - kSynthSpecialBlock : ranks;
  return SynthVocab{first + kSynthSpecialBlock, first, first + 2};
}

SynthVocab write_synthetic_tokenizer(const std::filesystem::path& dir, Arch arch, int vocab) {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; b++) tokens.push_back(std::string(1, (char)b));
  for (const char* m : kMerges) tokens.push_back(m);
  std::string ranks;
  for (size_t i = 0; i < tokens.size(); i++) ranks += fmt::format("{} {}\n", base64(tokens[i]), i);
  write_file_atomic(dir / "tokenizer.model", ranks);

  const SynthVocab sv = synthetic_vocab(vocab);
  const int first = sv.bos;
  const auto& specials = arch == Arch::kK3 ? kK3Specials : kKimiLinearSpecials;
  std::string js = "[\n";
  for (size_t i = 0; i < specials.size(); i++)
    js += fmt::format(" {{\"id\": {}, \"text\": \"{}\"}}{}\n", first + specials[i].first,
                      json_escape(specials[i].second), i + 1 < specials.size() ? "," : "");
  write_file_atomic(dir / "specials.json", js + "]\n");
  return sv;
}

}  // namespace waste
