// The K3 tokenizer against the real rank file: the release's golden prompts, the pre-tokenization
// pattern on multilingual text, the release's cuts of long inputs, UTF-8 repair, streaming
// decode, and every load error.
//
// Expected pieces and ids for text beyond the goldens were worked out from the pattern and the
// rank file, and checked with an independent Python implementation (the `regex` module running
// the release's pat_str with Script=Han and White_Space made explicit, plus a plain BPE).

#include <gtest/gtest.h>
#include <simdjson.h>

#include <random>
#include <string>
#include <vector>

#include "engine/base/error.h"
#include "engine/format/container.h"
#include "engine/tokenizer/pretokenizer.h"
#include "engine/tokenizer/tokenizer.h"
#include "tests/test_util.h"

namespace waste {
namespace {

using Ids = std::vector<TokenId>;
using Pieces = std::vector<std::string>;

std::filesystem::path k3_dir() {
  return test::fixtures_dir() / "k3";
}

// The release's added_tokens_decoder, as the converter writes it into specials.json. On-demand
// parsing, because the DOM parser refuses the file's 1e30-sized model_max_length integer.
std::vector<SpecialToken> k3_specials() {
  simdjson::ondemand::parser parser;
  const simdjson::padded_string json =
      simdjson::padded_string::load((k3_dir() / "tokenizer_config.json").string());
  simdjson::ondemand::document doc = parser.iterate(json);
  std::vector<SpecialToken> out;
  for (auto field : doc["added_tokens_decoder"].get_object()) {
    const std::string key(field.unescaped_key().value());
    const std::string text(field.value()["content"].get_string().value());
    out.push_back({std::stoi(key), text});
  }
  return out;
}

const Tokenizer& k3() {
  static const Tokenizer tok(k3_dir() / "tiktoken.model", k3_specials());
  return tok;
}

Pieces pieces(std::string_view text) {
  Pieces out;
  for (std::string_view p : pretokenize(text)) out.emplace_back(p);
  return out;
}

Ids cat(Ids a, const Ids& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// The ids encode_text must give if it applies no cuts: BPE of each pre-token of the whole text.
Ids without_cuts(std::string_view text) {
  Ids out;
  for (std::string_view p : pretokenize(text)) k3().encode_piece(p, out);
  return out;
}

// Pre-tokens, the encoding (which must also be the per-piece BPE) and the round trip.
void expect_split(std::string_view text, const Pieces& want_pieces, const Ids& want_ids) {
  SCOPED_TRACE(std::string(text));
  EXPECT_EQ(pieces(text), want_pieces);
  const Ids ids = k3().encode_text(text);
  EXPECT_EQ(ids, want_ids);
  EXPECT_EQ(ids, without_cuts(text));
  EXPECT_EQ(k3().decode(ids), text);
}

// A byte-level file: every byte, then the given merges.
std::string rank_file(const std::vector<std::string>& merges) {
  static const char* k = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  auto b64 = [](const std::string& s) {
    std::string out;
    for (std::size_t i = 0; i < s.size(); i += 3) {
      std::uint32_t v = (std::uint8_t)s[i] << 16;
      if (i + 1 < s.size()) v |= (std::uint8_t)s[i + 1] << 8;
      if (i + 2 < s.size()) v |= (std::uint8_t)s[i + 2];
      out += k[v >> 18 & 63];
      out += k[v >> 12 & 63];
      out += i + 1 < s.size() ? k[v >> 6 & 63] : '=';
      out += i + 2 < s.size() ? k[v & 63] : '=';
    }
    return out;
  };
  std::string out;
  for (int b = 0; b < 256; ++b)
    out += b64(std::string(1, (char)b)) + " " + std::to_string(b) + "\n";
  for (std::size_t i = 0; i < merges.size(); ++i)
    out += b64(merges[i]) + " " + std::to_string(256 + i) + "\n";
  return out;
}

// ---- vocabulary ---------------------------------------------------------------------------

TEST(TokenizerVocab, SizesAndSpecials) {
  const Tokenizer& t = k3();
  EXPECT_EQ(t.rank_count(), 163584u);
  EXPECT_EQ(t.vocab_size(), 163840u);  // ranks + the 256-id reserved block
  EXPECT_EQ(t.token_bytes(0), "!");    // the first line is "IQ== 0"
  EXPECT_EQ(t.find_special("<|end_of_msg|>"), 163586);
  EXPECT_EQ(t.find_special("<|open|>"), 163587);
  EXPECT_EQ(t.find_special("<|close|>"), 163588);
  EXPECT_EQ(t.find_special("<|sep|>"), 163589);
  EXPECT_EQ(t.find_special("<|media_pad|>"), 163605);
  EXPECT_EQ(t.find_special("[PAD]"), 163839);
  EXPECT_EQ(t.find_special("<|im_end|>"), std::nullopt);
  EXPECT_EQ(t.find_special("<|kimi_image_placeholder|>"), std::nullopt);  // plain text in K3
  EXPECT_EQ(t.find_special("hello"), std::nullopt);
  EXPECT_TRUE(t.is_special(163584));
  EXPECT_TRUE(t.is_special(163839));
  EXPECT_FALSE(t.is_special(163583));
  EXPECT_FALSE(t.is_special(163840));
  EXPECT_FALSE(t.is_special(-1));
  EXPECT_EQ(t.token_bytes(163587), "<|open|>");
}

TEST(TokenizerVocab, UnnamedReservedIdsTakeTheReleaseName) {
  const Tokenizer& t = k3();
  EXPECT_EQ(t.token_bytes(163592), "<|reserved_token_163592|>");
  EXPECT_EQ(t.token_bytes(163837), "<|reserved_token_163837|>");
  EXPECT_EQ(t.find_special("<|reserved_token_163600|>"), 163600);
  EXPECT_EQ(t.encode_markup("<|reserved_token_163600|>"), Ids{163600});
  const Ids text = t.encode_text("<|reserved_token_163600|>");
  EXPECT_EQ(text, (Ids{27, 91, 64345, 14147, 62, 18752, 6706, 91, 29}));
}

TEST(TokenizerVocab, OutOfRangeIdsAreRefused) {
  EXPECT_THROW(k3().token_bytes(163840), UsageError);
  EXPECT_THROW(k3().token_bytes(-1), UsageError);
  EXPECT_THROW(k3().decode(Ids{1, 2, 999999}), UsageError);
}

TEST(TokenizerVocab, FindRank) {
  EXPECT_EQ(k3().find_rank("!"), 0);
  EXPECT_EQ(k3().find_rank(" role"), 6244);
  EXPECT_EQ(k3().find_rank("<|open|>"), std::nullopt);
  EXPECT_EQ(k3().find_rank(""), std::nullopt);
}

// ---- the release's golden prompts ---------------------------------------------------------

TEST(TokenizerGolden, RenderGoldenSegments) {
  simdjson::dom::parser parser;
  simdjson::dom::element root = parser.load((k3_dir() / "render_golden.json").string());
  std::size_t n_cases = 0, n_segments = 0;
  for (simdjson::dom::element c : root["cases"].get_array()) {
    SCOPED_TRACE(std::string(c["name"].get_string().value()));
    std::string joined;
    Ids ids;
    for (simdjson::dom::element seg : c["segments"].get_array()) {
      const std::string_view text = seg.at(0).get_string();
      const bool markup = seg.at(1).get_bool();
      joined += text;
      ids = cat(ids, markup ? k3().encode_markup(text) : k3().encode_text(text));
      ++n_segments;
    }
    Ids want;
    for (simdjson::dom::element id : c["token_ids"].get_array())
      want.push_back((TokenId)id.get_int64().value());
    EXPECT_EQ(joined, std::string_view(c["text"].get_string()));
    EXPECT_EQ(ids, want);
    EXPECT_EQ(k3().decode(want), joined);
    ++n_cases;
  }
  EXPECT_EQ(n_cases, 5u);
  EXPECT_EQ(n_segments, 333u);
}

// Reported by the original engine's notes (docs/PROMPT_FORMAT.md §1.4), markup mode.
TEST(TokenizerGolden, MarkupExampleFromTheOriginalEngine) {
  const std::string s = "hi<|end_of_msg|><|open|>message role=\"system\"<|sep|>obey";
  EXPECT_EQ(k3().encode_markup(s),
            (Ids{9663, 163586, 163587, 2778, 6244, 878, 14062, 1, 163589, 1031, 2025}));
  EXPECT_EQ(k3().decode(k3().encode_markup(s)), s);
}

// ---- text mode never makes specials; markup mode does ---------------------------------------

TEST(TokenizerModes, SpecialStringsStayTextInTextMode) {
  const std::string s = "hi<|end_of_msg|><|open|>message role=\"system\"<|sep|>obey [BOS]";
  const Ids ids = k3().encode_text(s);
  for (TokenId id : ids) EXPECT_LT(id, 163584) << id;
  EXPECT_EQ(k3().decode(ids), s);
  // A typed <|open|> is ordinary BPE: "<|", "open", "|>".
  EXPECT_EQ(k3().encode_text("<|open|>"), (Ids{27, 91, 4454, 91, 29}));
}

TEST(TokenizerModes, MarkupModeMatchesSpecialsAnywhere) {
  // In 'role="user"<|sep|>' a pre-token would glue '"<': specials are found in the raw text first.
  const Ids ids = k3().encode_markup("x=\"user\"<|sep|>[BOS][EOS]<|media_pad|>y");
  const Ids head = k3().encode_text("x=\"user\"");
  EXPECT_EQ(ids, cat(cat(head, Ids{163589, 163584, 163585, 163605}), k3().encode_text("y")));
  EXPECT_EQ(k3().encode_markup("<|open|>"), Ids{163587});
  EXPECT_EQ(k3().encode_markup("<|open|"), k3().encode_text("<|open|"));
  EXPECT_EQ(k3().encode_markup(""), Ids{});
  // The text between specials is encoded on its own, so no pre-token spans a marker.
  EXPECT_EQ(k3().encode_markup("a <|sep|> b"),
            cat(cat(k3().encode_text("a "), Ids{163589}), k3().encode_text(" b")));
}

TEST(TokenizerModes, MediaBlock) {
  const Ids ids =
      k3().encode_markup("<|media_begin|>image 640x480<|media_content|><|media_pad|><|media_end|>");
  Ids want{163602};
  want = cat(want, k3().encode_text("image 640x480"));
  want = cat(want, Ids{163603, 163605, 163604});
  EXPECT_EQ(ids, want);
}

TEST(TokenizerModes, LongestSpecialWinsAtTheSameOffset) {
  test::TempDir dir;
  test::write_file(dir / "r.model", rank_file({}));
  const Tokenizer t(dir / "r.model", {{300, "<x>"}, {301, "<x>y"}});
  EXPECT_EQ(t.encode_markup("<x>y"), Ids{301});
  EXPECT_EQ(t.encode_markup("<x>z"), (Ids{300, 'z'}));
  EXPECT_EQ(t.encode_markup("a<x><x>y"), (Ids{'a', 300, 301}));
  EXPECT_EQ(t.vocab_size(), 302u);
  EXPECT_EQ(t.token_bytes(299), "<|reserved_token_299|>");
}

// ---- the pre-tokenization pattern -----------------------------------------------------------

TEST(Pretokenizer, CamelCaseSplitsBeforeCapitals) {
  expect_split("camelCase iPhone XMLHttpRequest getHTTPResponse",
               {"camel", "Case", " i", "Phone", " XMLHttp", "Request", " get", "HTTPResponse"},
               {156983, 8081, 1032, 11868, 160457, 3188, 922, 17819, 4323});
  expect_split("HELLO world", {"HELLO", " world"}, {95218, 2359, 2695});
  expect_split("\u01C5emal", {"\u01C5emal"}, {131, 227, 426, 283});  // titlecase, then lower
}

TEST(Pretokenizer, ContractionsInEveryCase) {
  // Only after letters; 'ſ (long s) folds to 's; "'c" is no contraction.
  expect_split("I'm you're he'S we'VE THEY'LL it'D don'T 'Re it'\u017F o'clock",
               {"I'm", " you're", " he'S", " we'VE", " THEY'LL", " it'D", " don'T", " '", "Re",
                " it'\u017F", " o", "'clock"},
               {17172, 8645, 644,   34480, 645, 6,   4571, 131665, 6,   5847, 483,
                75231, 2335, 64833, 542,   902, 483, 6,    129,    123, 298,  161223});
  for (std::string c : {"'s",  "'S",  "'t", "'T", "'re", "'rE", "'Re", "'RE", "'ve", "'vE",
                        "'Ve", "'VE", "'m", "'M", "'ll", "'lL", "'Ll", "'LL", "'d",  "'D"}) {
    EXPECT_EQ(pieces("word" + c + "x"), (Pieces{"word" + c, "x"})) << c;
    EXPECT_EQ(pieces("WORD" + c + "x"), (Pieces{"WORD" + c, "x"})) << c;
  }
  EXPECT_EQ(pieces("it'r"), (Pieces{"it", "'r"}));
  EXPECT_EQ(pieces("it'l"), (Pieces{"it", "'l"}));
  EXPECT_EQ(pieces("it'"), (Pieces{"it", "'"}));
}

TEST(Pretokenizer, HanRunsAreTheirOwnPieces) {
  expect_split("hello 日本語", {"hello", " ", "日本語"}, {22931, 220, 4546, 63011});
  expect_split(" 日本語", {" ", "日本語"}, {220, 4546, 63011});
  expect_split("\u3000日本", {"\u3000", "日本"}, {14224, 4546});
  expect_split("中文English混合", {"中文", "English", "混合"}, {16717, 44372, 13935});
  expect_split("(日本)", {"(", "日本", ")"}, {7, 4546, 8});
  expect_split("日本語。", {"日本語", "。"}, {4546, 63011, 292});
  // Kana are letters but not Han.
  expect_split("漢字かなカナ", {"漢字", "かなカナ"}, {1435, 95, 1855, 15593, 11839, 26121, 42125});
  // Plane-2 ideographs, the ideographic zero (Nl), iteration mark (Lm), a radical (So): all Han.
  expect_split("\U00020000\U00020001 〇々⺀", {"\U00020000\U00020001", " ", "〇々⺀"},
               {172, 254, 222, 222, 172, 254, 222, 223, 220, 91894, 106101, 158, 118, 222});
}

TEST(Pretokenizer, OtherScripts) {
  expect_split("Привет, мир!", {"Привет", ",", " мир", "!"}, {159025, 63694, 11, 5993, 17898, 0});
  expect_split("العربية مرحبا", {"العربية", " مرحبا"},
               {6974, 5042, 26139, 12441, 61561, 7570, 4265, 1063});
  expect_split("हिन्दी", {"हिन्दी"}, {21232, 48190, 84837, 10722});  // marks stay in the word
  expect_split("안녕하세요 세계", {"안녕하세요", " 세계"},
               {109004, 34910, 243, 13181, 102898, 110620, 73168});
  expect_split("Ünïcödé naïve café", {"Ünïcödé", " naïve", " café"},
               {89743, 77, 44187, 66, 5954, 67, 1941, 7915, 44187, 367, 70591});
  expect_split("\uFB01le", {"\uFB01le"}, {171, 102746, 281});
}

TEST(Pretokenizer, NumbersOfEveryScriptInThrees) {
  expect_split("12345", {"123", "45"}, {6694, 2899});
  expect_split("١٢٣٤٥", {"١٢٣", "٤٥"}, {111991, 161592, 149, 96, 149, 97, 149, 98});
  expect_split("१२३४", {"१२३", "४"}, {46147, 101, 87200, 99123});
  expect_split("１２３４", {"１２３", "４"}, {320, 239, 320, 240, 320, 241, 320, 242});
  expect_split("①②③④ Ⅻ", {"①②③", "④", " ", "Ⅻ"}, {16395, 16883, 20555, 28298, 220, 28819, 104});
  expect_split("x²³", {"x", "²³"}, {87, 39530, 103539});
  expect_split("$100,000.00", {"$", "100", ",", "000", ".", "00"}, {3, 1570, 11, 1476, 13, 465});
}

TEST(Pretokenizer, WhitespaceRules) {
  expect_split("a  b", {"a", " ", " b"}, {64, 220, 291});
  expect_split("a \n\n b", {"a", " \n\n", " b"}, {64, 4698, 291});
  expect_split("x   ", {"x", "   "}, {87, 274});
  expect_split("\r\n\r\n", {"\r\n\r\n"}, {2298});
  expect_split("...\n\nabc", {"...\n\n", "abc"}, {77871, 8497});
  expect_split("x=1;\ty=2\n", {"x", "=", "1", ";", "\ty", "=", "2", "\n"},
               {87, 28, 16, 26, 36181, 28, 17, 198});
  EXPECT_EQ(pieces("a \n b\n"), (Pieces{"a", " \n", " b", "\n"}));
  EXPECT_EQ(pieces("  \n\t x"), (Pieces{"  \n", "\t", " x"}));
  EXPECT_EQ(pieces(" "), (Pieces{" "}));
}

TEST(Pretokenizer, UnicodeSpaces) {
  expect_split("a\u00A0\u00A0b", {"a", "\u00A0", "\u00A0b"}, {64, 5406, 5406, 65});  // NBSP
  expect_split("x\u3000\u3000y", {"x", "\u3000", "\u3000y"}, {87, 14224, 14224, 88});
  expect_split("a\u2003\u2003b", {"a", "\u2003", "\u2003b"}, {64, 64731, 64731, 65});  // em
  expect_split("a\u2003", {"a", "\u2003"}, {64, 64731});
  expect_split(" \u0085x", {" ", "\u0085x"}, {220, 126, 227, 87});  // NEL is White_Space
  // U+001C is not White_Space (only Python's isspace says so): punctuation to the pattern.
  expect_split(
      "\x1C\x1C"
      "ab",
      {"\x1C\x1C", "ab"}, {216, 216, 424});
  // U+200B is no space at all.
  EXPECT_EQ(pieces("a\u200Bb"), (Pieces{"a", "\u200Bb"}));
}

TEST(Pretokenizer, EmojiAndMarks) {
  expect_split("hi 😀😀!", {"hi", " 😀😀!"}, {9663, 70005, 222, 134750, 222, 0});
  expect_split("👍🏽", {"👍🏽"}, {64390, 235, 92949, 121});
  // U+FE0F is a mark, so it is a "word" after the heart as its leading character.
  expect_split("❤️", {"❤️"}, {90496, 97, 31615});
  expect_split("e\u0301", {"e\u0301"}, {68, 37484});
  // A leading mark: U* L+ backtracks to the mark alone, before U+ could take "\u0301A".
  expect_split("\u0301A", {"\u0301", "A"}, {37484, 32});
  expect_split("\u02B0A", {"\u02B0", "A"}, {134, 108, 32});  // Lm is in both classes
}

TEST(Pretokenizer, PiecesCoverTheText) {
  std::mt19937 rng(7);
  const std::vector<std::string> alphabet = {"a", "Z", "7", " ",  "\n", "\r",     "\t",     "'",
                                             "s", ".", "é", "日", "😀",  "\u0301", "\u00A0", "٣"};
  for (int n = 0; n < 2000; ++n) {
    std::string s;
    for (int k = rng() % 20; k >= 0; --k) s += alphabet[rng() % alphabet.size()];
    std::string joined;
    for (std::string_view p : pretokenize(s)) {
      ASSERT_FALSE(p.empty());
      joined += p;
    }
    ASSERT_EQ(joined, s);
    ASSERT_EQ(k3().encode_text(s), without_cuts(s));
    ASSERT_EQ(k3().decode(k3().encode_text(s)), s);
  }
}

// ---- BPE --------------------------------------------------------------------------------------

TEST(Bpe, LowestRankFirstLeftmostOnTies) {
  test::TempDir dir;
  test::write_file(dir / "r.model", rank_file({"ab", "bc", "abc", "aa"}));  // 256 257 258 259
  const Tokenizer t(dir / "r.model", {});
  for (auto how : {Tokenizer::Merge::kAuto, Tokenizer::Merge::kLinear, Tokenizer::Merge::kHeap}) {
    Ids out;
    // ab(256) first, then bc(257), then abc(258): [abc, bc].
    t.encode_piece("abcbc", out, how);
    EXPECT_EQ(out, (Ids{258, 257}));
    out.clear();
    t.encode_piece("aaa", out, how);  // both pairs are "aa": the left one merges
    EXPECT_EQ(out, (Ids{259, 'a'}));
    out.clear();
    t.encode_piece("xy", out, how);
    EXPECT_EQ(out, (Ids{'x', 'y'}));
  }
  EXPECT_EQ(t.encode_text("abc"), Ids{258});  // whole piece is a rank
}

TEST(Bpe, LinearAndHeapMergeAlike) {
  std::mt19937 rng(3);
  const std::string letters = "aaaaabbbcdeeeeffghiijklmnnooprrssttuvwxyz  ..--==__日é";
  for (int n = 0; n < 400; ++n) {
    std::string piece;
    const int len = 2 + rng() % (n < 200 ? 40 : 600);
    const bool random_bytes = n % 5 == 0;
    for (int k = 0; k < len; ++k) {
      piece += random_bytes ? (char)(rng() & 0xFF) : letters[rng() % letters.size()];
    }
    Ids linear, heap;
    k3().encode_piece(piece, linear, Tokenizer::Merge::kLinear);
    k3().encode_piece(piece, heap, Tokenizer::Merge::kHeap);
    ASSERT_EQ(linear, heap) << n;
    ASSERT_EQ(k3().decode(heap), piece);
  }
  for (std::string piece :
       {std::string(3000, 'a'), std::string(2000, ' '), std::string(999, '=')}) {
    Ids linear, heap;
    k3().encode_piece(piece, linear, Tokenizer::Merge::kLinear);
    k3().encode_piece(piece, heap, Tokenizer::Merge::kHeap);
    EXPECT_EQ(linear, heap);
  }
}

// ---- the release's cuts of long input ---------------------------------------------------------

std::vector<std::string> split(std::string_view s, std::size_t max_chars, std::size_t max_run) {
  std::vector<std::string> out;
  for (std::string_view p : split_for_encoding(s, max_chars, max_run)) out.emplace_back(p);
  return out;
}

TEST(Cuts, RunsAndSlicesCountCharacters) {
  using V = std::vector<std::string>;
  EXPECT_EQ(split("aaaaaa", 100, 4), (V{"aaaa", "aa"}));
  EXPECT_EQ(split("ab  cdefgh", 100, 3), (V{"ab  cde", "fgh"}));
  EXPECT_EQ(split("a     b", 100, 2), (V{"a  ", "  ", " b"}));
  EXPECT_EQ(split("abcdefghij", 4, 100), (V{"abcd", "efgh", "ij"}));
  EXPECT_EQ(split("ééééé", 100, 2), (V{"éé", "éé", "é"}));  // characters, not bytes
  EXPECT_EQ(split("日本語日本語", 4, 100), (V{"日本語日", "本語"}));
  EXPECT_EQ(split("ab\x1C\x1C\x1C"
                  "cd",
                  100, 2),
            (V{"ab\x1C\x1C",
               "\x1C"
               "cd"}));                                       // isspace
  EXPECT_EQ(split("aaaaaaa", 5, 3), (V{"aaa", "aa", "aa"}));  // run count restarts per slice
  EXPECT_EQ(split("", 5, 3), V{});
  EXPECT_EQ(split("short", kMaxEncodeChars, kMaxRunChars), V{"short"});
}

// tokenization_kimi.py's two loops, written plainly over code points, with CPython's
// str.isspace table.
std::vector<std::string> reference_split(std::string_view s, std::size_t max_chars,
                                         std::size_t max_run) {
  auto py_space = [](char32_t c) {
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
           c == 0x202F || c == 0x205F || c == 0x3000;
  };
  std::vector<std::size_t> starts;
  std::vector<bool> space;
  for (std::size_t i = 0; i < s.size();) {
    const Utf8Step st = utf8_step(s.substr(i));
    starts.push_back(i);
    space.push_back(py_space(st.cp));
    i += st.len;
  }
  starts.push_back(s.size());
  const std::size_t n = space.size();
  std::vector<std::string> out;
  for (std::size_t a = 0; a < n; a += max_chars) {
    const std::size_t b = std::min(n, a + max_chars);
    std::size_t len = 0, slice_start = a;
    bool is_space = space[a];
    for (std::size_t i = a; i < b; ++i) {
      if (is_space != space[i]) {
        len = 1, is_space = space[i];
      } else if (++len > max_run) {
        out.emplace_back(s.substr(starts[slice_start], starts[i] - starts[slice_start]));
        slice_start = i, len = 1;
      }
    }
    out.emplace_back(s.substr(starts[slice_start], starts[b] - starts[slice_start]));
  }
  return out;
}

TEST(Cuts, AgreesWithTheReleaseLoops) {
  std::mt19937 rng(5);
  const std::vector<std::string> alphabet = {"a", "b",      " ",      " ",  "\n", "\t",    "\x1C",
                                             "é", "\u00A0", "\u3000", "日", "😀",  "\u2003"};
  for (int n = 0; n < 5000; ++n) {
    std::string s;
    const bool long_runs = n % 2;
    for (int k = rng() % 120; k >= 0; --k) {
      const std::string& c = alphabet[rng() % (n % 3 ? 6 : alphabet.size())];
      for (int r = long_runs ? rng() % 20 : 0; r >= 0; --r) s += c;
    }
    const std::size_t max_chars = 1 + rng() % 100, max_run = 1 + rng() % 40;
    ASSERT_EQ(split(s, max_chars, max_run), reference_split(s, max_chars, max_run))
        << n << " " << max_chars << " " << max_run;
  }
}

TEST(Cuts, AgreesWithTheReleaseLoopsAtRealLimits) {
  // Runs just over the limit that end at every offset within an 8-byte block.
  for (int shift = 0; shift < 8; ++shift) {
    for (const char* body : {"x", " "}) {
      std::string s(shift, body[0] == ' ' ? 'y' : ' ');
      for (int k = 0; k < 25003; ++k) s += body;
      s += body[0] == ' ' ? "tail" : " tail";
      const auto parts = reference_split(s, kMaxEncodeChars, kMaxRunChars);
      ASSERT_EQ(parts.size(), 2u);
      ASSERT_EQ(split(s, kMaxEncodeChars, kMaxRunChars), parts) << shift;
    }
  }
}

TEST(Cuts, LongNonWhitespaceRun) {
  // "ab," repeated: a 25,002-character run, cut after 25,000 characters, inside an "ab".
  std::string s;
  while (s.size() < 25002) s += "ab,";
  ASSERT_EQ(s.size(), 25002u);
  const Ids ids = k3().encode_text(s);
  EXPECT_EQ(ids, cat(k3().encode_text(s.substr(0, 25000)), k3().encode_text(s.substr(25000))));
  EXPECT_NE(ids, without_cuts(s));
  EXPECT_EQ(k3().decode(ids), s);
}

TEST(Cuts, LongWhitespaceRun) {
  const std::string s = std::string(25002, ' ') + "x";
  const Ids ids = k3().encode_text(s);
  EXPECT_EQ(ids, cat(k3().encode_text(s.substr(0, 25000)), k3().encode_text(s.substr(25000))));
  EXPECT_NE(ids, without_cuts(s));
}

TEST(Cuts, FourHundredThousandCharacterSlices) {
  // "日本 " is 3 characters and 7 bytes: character 400,000 ends inside a Han run, at a byte
  // offset that a byte count would miss.
  std::string s;
  for (int i = 0; i < 133334; ++i) s += "日本 ";
  const std::size_t cut = 133333 * 7 + 3;  // 399,999 characters, then "日"
  const Ids ids = k3().encode_text(s);
  EXPECT_EQ(ids, cat(k3().encode_text(s.substr(0, cut)), k3().encode_text(s.substr(cut))));
  EXPECT_NE(ids, without_cuts(s));
  EXPECT_EQ(k3().decode(ids), s);
}

TEST(Cuts, ComeBeforeSpecialMatching) {
  // As upstream: a marker split by a cut is no marker.
  const std::string cut_marker = std::string(24998, 'x') + "<|open|>";
  const Ids ids = k3().encode_markup(cut_marker);
  for (TokenId id : ids) EXPECT_LT(id, 163584);
  EXPECT_EQ(ids, cat(k3().encode_text(cut_marker.substr(0, 25000)),
                     k3().encode_text(cut_marker.substr(25000))));
  const std::string whole_marker = std::string(24990, 'x') + "<|open|>";
  EXPECT_EQ(k3().encode_markup(whole_marker),
            cat(k3().encode_text(std::string(24990, 'x')), Ids{163587}));
}

// ---- UTF-8 ------------------------------------------------------------------------------------

TEST(Utf8, InvalidSubpartsBecomeReplacementCharacters) {
  // Python's bytes.decode("utf-8", "replace") on the same bytes.
  EXPECT_EQ(replace_invalid_utf8("\xE6\x97"
                                 "a"),
            "\uFFFD"
            "a");
  EXPECT_EQ(replace_invalid_utf8("\xC0\xAF"), "\uFFFD\uFFFD");
  EXPECT_EQ(replace_invalid_utf8("\xF4\x90\x80\x80"), "\uFFFD\uFFFD\uFFFD\uFFFD");
  EXPECT_EQ(replace_invalid_utf8("\xED\xA0\x80"), "\uFFFD\uFFFD\uFFFD");  // a surrogate
  EXPECT_EQ(replace_invalid_utf8("\xE6\x97"), "\uFFFD");
  EXPECT_EQ(replace_invalid_utf8("\xF0\x9F\x98\x80\x80"), "😀\uFFFD");
  EXPECT_EQ(replace_invalid_utf8("ok é"), "ok é");
  EXPECT_TRUE(is_valid_utf8("ok é 日 😀"));
  EXPECT_FALSE(is_valid_utf8("abcdefgh\xFF"));
  EXPECT_FALSE(is_valid_utf8("\xE6\x97"));
}

TEST(Utf8, EncodingRepairsInvalidInput) {
  EXPECT_EQ(k3().encode_text("a\xFF"
                             "b"),
            k3().encode_text("a\uFFFD"
                             "b"));
  EXPECT_EQ(k3().encode_markup("<|sep|>\xE6\x97"), k3().encode_markup("<|sep|>\uFFFD"));
  std::mt19937 rng(11);
  for (int n = 0; n < 500; ++n) {
    std::string s;
    for (int k = rng() % 30; k >= 0; --k) s += (char)(rng() & 0xFF);
    ASSERT_EQ(k3().decode(k3().encode_text(s)), replace_invalid_utf8(s));
    ASSERT_EQ(k3().decode(k3().encode_markup(s)), replace_invalid_utf8(s));
  }
}

TEST(Utf8, ScannerSurvivesIllFormedInput) {
  // Callers must repair first, but a slip must not crash or lose bytes.
  std::mt19937 rng(13);
  for (int n = 0; n < 2000; ++n) {
    std::string s;
    for (int k = rng() % 40; k >= 0; --k) s += (char)(rng() & 0xFF);
    std::string joined;
    for (std::string_view p : pretokenize(s)) {
      ASSERT_FALSE(p.empty());
      joined += p;
    }
    ASSERT_EQ(joined, s);
    std::string parts;
    for (std::string_view p : split_for_encoding(s, 7, 3)) parts += p;
    ASSERT_EQ(parts, s);
  }
}

// ---- streaming decode -------------------------------------------------------------------------

TokenId byte_id(unsigned char b) {
  return *k3().find_rank(std::string(1, (char)b));
}

TEST(StreamDecoder, HoldsIncompleteCharactersAtEveryByteBoundary) {
  for (std::string ch : {"é", "日", "😀", "\u0301", "\uFFFD", "\U0010FFFD"}) {
    for (std::size_t cut = 1; cut < ch.size(); ++cut) {
      StreamDecoder d(k3());
      std::string got;
      for (std::size_t i = 0; i < ch.size(); ++i) {
        const std::string out = d.push(byte_id((unsigned char)ch[i]));
        if (i + 1 < ch.size()) {
          EXPECT_EQ(out, "") << ch << " byte " << i;
        }
        got += out;
      }
      EXPECT_EQ(got, ch);
      EXPECT_EQ(d.flush(), "");
      // The same character arriving as two tokens: a byte-prefix, then the rest.
      StreamDecoder two(k3());
      std::string a;
      for (std::size_t i = 0; i < cut; ++i) a += two.push(byte_id((unsigned char)ch[i]));
      EXPECT_EQ(a, "");
      Ids rest;
      k3().encode_piece(ch.substr(cut), rest, Tokenizer::Merge::kLinear);
      for (TokenId id : rest) a += two.push(id);
      EXPECT_EQ(a, ch);
    }
  }
}

TEST(StreamDecoder, WholeTextArrivesInWholeCharacters) {
  const std::string s = "Grüße, 世界! 😀👍🏽 — naïve <|open|> ١٢٣";
  const Ids ids = k3().encode_markup(s);
  StreamDecoder d(k3());
  std::string got;
  for (TokenId id : ids) {
    const std::string out = d.push(id);
    EXPECT_TRUE(is_valid_utf8(out));
    got += out;
  }
  got += d.flush();
  EXPECT_EQ(got, s);
}

TEST(StreamDecoder, InvalidBytesBecomeReplacementCharacters) {
  StreamDecoder d(k3());
  EXPECT_EQ(d.push(byte_id(0xE6)), "");
  EXPECT_EQ(d.push(byte_id('a')),
            "\uFFFD"
            "a");                              // can no longer complete: replaced now
  EXPECT_EQ(d.push(byte_id(0x80)), "\uFFFD");  // lone continuation byte
  EXPECT_EQ(d.push(byte_id(0xF0)), "");
  EXPECT_EQ(d.push(byte_id(0x9F)), "");
  EXPECT_EQ(d.flush(), "\uFFFD");  // truncated at the end: one U+FFFD
  EXPECT_EQ(d.flush(), "");
  EXPECT_EQ(d.push(163587), "<|open|>");
  EXPECT_THROW(d.push(163840), UsageError);
}

// ---- load errors ------------------------------------------------------------------------------

void expect_load_error(const std::string& file_text, const std::vector<SpecialToken>& specials,
                       const std::string& message_part) {
  test::TempDir dir;
  const auto path = dir / "tok.model";
  test::write_file(path, file_text);
  try {
    Tokenizer t(path, specials);
    ADD_FAILURE() << "no error; expected one containing: " << message_part;
  } catch (const FormatError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(path.string()), std::string::npos) << what;
    EXPECT_NE(what.find(message_part), std::string::npos) << what;
  }
}

TEST(TokenizerLoad, Errors) {
  const std::string good = rank_file({"ab"});  // 257 lines
  expect_load_error(good + "!!!! 257\n", {}, ":258: bad base64");
  expect_load_error(good + "YWJj\n", {}, ":258: expected \"base64 rank\"");
  expect_load_error(good + "YWJj 1 2\n", {}, ":258: expected \"base64 rank\"");
  expect_load_error(good + "YWJj x\n", {}, ":258: bad rank");
  expect_load_error(good + "YWJj 256\n", {}, ":258: duplicate rank 256 (also on line 257)");
  expect_load_error(good + "YWJj 300\n", {}, ":258: rank 300 leaves a gap");
  expect_load_error(good + "YWI= 257\n", {}, ":258: rank 257 has the same bytes as rank 256");
  expect_load_error(good + "YW= 257\n", {}, ":258: bad base64");
  expect_load_error("", {}, ": no tokens");
  // Without byte 0x41 ("A"): rank 65 given to "ab" instead.
  std::string no_a = good;
  no_a.replace(no_a.find("QQ== 65\n"), 8, "YWJk 65\n");
  expect_load_error(no_a, {}, "byte 0x41 has no rank");
  expect_load_error(good, {{256, "<x>"}},
                    "special token \"<x>\" has id 256, which is already a rank");
  expect_load_error(good, {{0, "<x>"}}, "already a rank");
  expect_load_error(good, {{-5, "<x>"}}, "negative id");
  expect_load_error(good, {{300, "<x>"}, {300, "<y>"}}, "special id 300 is given twice");
  expect_load_error(good, {{300, "<x>"}, {301, "<x>"}}, "\"<x>\" is given twice");
  expect_load_error(good, {{300, ""}}, "empty text");
  expect_load_error(good, {{5000000, "<x>"}}, "more than");
}

TEST(TokenizerLoad, MissingFile) {
  try {
    Tokenizer t("/nonexistent/dir/tiktoken.model", {});
    ADD_FAILURE() << "no error";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/dir/tiktoken.model"), std::string::npos);
  }
}

TEST(TokenizerLoad, AcceptsTiktokenLayoutVariants) {
  test::TempDir dir;
  // CRLF line ends, blank lines, tabs and ranks out of line order all load, as in tiktoken.
  std::string text = rank_file({"ab"});
  text = "YWI=\t256\r\n\n" + text.substr(0, text.find("YWI= 256"));
  test::write_file(dir / "r.model", text);
  const Tokenizer t(dir / "r.model", {});
  EXPECT_EQ(t.rank_count(), 257u);
  EXPECT_EQ(t.encode_text("ab"), Ids{256});
}

}  // namespace
}  // namespace waste
