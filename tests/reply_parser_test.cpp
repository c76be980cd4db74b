// The reply parsers on real K3 token ids: replies rendered by our K3 template read back into the
// same reasoning, content and tool calls; streaming fed one token at a time (every prefix a
// prefix of the whole, every delta whole UTF-8, every cut-off reply still well-formed); each
// malformed shape; Kimi K2's replies (content, think channel, tool calls).

#include <gtest/gtest.h>

#include <cctype>
#include <set>
#include <string>
#include <vector>

#include "engine/base/error.h"
#include "engine/tokenizer/pretokenizer.h"
#include "engine/tokenizer/tokenizer.h"
#include "prompt_templates/chat_format.h"
#include "prompt_templates/k3/k3_reply_parser.h"
#include "prompt_templates/k3/k3_template.h"
#include "prompt_templates/kimi_k2/k2_reply_parser.h"
#include "prompt_templates/reply_parser.h"
#include "protocol/json/python_json.h"
#include "protocol/openai/request.h"
#include "tests/test_util.h"

namespace waste {
namespace {

using Ids = std::vector<TokenId>;
using K = ReplyEvent::Kind;

const Tokenizer& k3() {
  return test::k3_tokenizer();
}

const Tokenizer& kimi_linear() {
  return test::k2_tokenizer();
}

TokenId special(std::string_view s) {
  return *k3().find_special(s);
}

// Builds a reply the way the model would write it, segment by segment.
class Reply {
 public:
  Reply& text(std::string_view s) { return add(k3().encode_text(s)); }
  // One token per byte, so multi-byte characters arrive split.
  Reply& bytes(std::string_view s) {
    for (char c : s) ids_.push_back(*k3().find_rank(std::string(1, c)));
    return *this;
  }
  Reply& open(std::string_view tag, std::vector<std::pair<std::string, std::string>> attrs = {}) {
    id(special("<|open|>")).text(tag);
    for (const auto& [k, v] : attrs) text(" " + k).text("=\"").text(v).text("\"");
    return id(special("<|sep|>"));
  }
  Reply& close(std::string_view tag) {
    return id(special("<|close|>")).text(tag).id(special("<|sep|>"));
  }
  Reply& end() { return close("message").id(special("<|end_of_msg|>")); }
  Reply& id(TokenId t) {
    ids_.push_back(t);
    return *this;
  }
  const Ids& ids() const { return ids_; }

 private:
  Reply& add(const Ids& more) {
    ids_.insert(ids_.end(), more.begin(), more.end());
    return *this;
  }
  Ids ids_;
};

// The events' deltas put together independently of the parser's own accumulation.
struct Collected {
  std::string reasoning, content;
  std::vector<ParsedToolCall> calls;
  std::vector<ReplyEvent> events;
  int ends = 0;
};

void collect(Collected& c, const std::vector<ReplyEvent>& events) {
  for (const ReplyEvent& e : events) {
    if (!e.text.empty()) {
      EXPECT_TRUE(is_valid_utf8(e.text)) << e.text;
    }
    switch (e.kind) {
      case K::kReasoning:
        c.reasoning += e.text;
        break;
      case K::kContent:
        c.content += e.text;
        break;
      case K::kToolCallStart:
        EXPECT_EQ(e.tool_index, c.calls.size());
        c.calls.push_back({e.id, e.name, ""});
        break;
      case K::kToolCallArguments:
        c.calls.at(e.tool_index).arguments += e.text;
        break;
      case K::kToolCallEnd:
        break;
      case K::kEnd:
        c.ends++;
        break;
    }
    c.events.push_back(e);
  }
}

// The whole reply at once (push every id, then finish).
ParsedReply parse_reply(ReplyParser& parser, const Ids& ids) {
  for (TokenId id : ids) parser.push(id);
  parser.finish();
  return parser.reply();
}

Collected stream(ReplyParser& p, const Ids& ids, bool finish = true) {
  Collected c;
  for (TokenId id : ids) collect(c, p.push(id));
  if (finish) collect(c, p.finish());
  return c;
}

ParsedReply parse_k3(const Ids& ids, bool thinking = true, uint64_t seed = 1) {
  K3ReplyParser p(k3(), {.thinking = thinking}, Rng(seed));
  return parse_reply(p, ids);
}

void expect_same(const Collected& c, const ParsedReply& r) {
  EXPECT_EQ(c.reasoning, r.reasoning);
  EXPECT_EQ(c.content, r.content);
  EXPECT_EQ(c.calls, r.tool_calls);
}

// ---- round trip through the K3 template ----------------------------------------------------

// The ids of the assistant turn as render_k3 writes it, after the generation prompt's part
// (`<|open|>message role="assistant"<|sep|><|open|>think<|sep|>`), through <|end_of_msg|>.
Ids rendered_reply(std::string_view assistant_json, bool thinking = true) {
  const std::string body =
      R"({"messages":[{"role":"user","content":"q"},)" + std::string(assistant_json) + "]}";
  K3RenderOptions opt;
  opt.default_thinking = thinking;
  opt.default_effort = "";
  opt.add_generation_prompt = false;
  const std::vector<Segment> segs = render_k3(parse_chat_completion(body, {}).conversation, opt);
  std::size_t at = 0;
  while (segs[at].text != "assistant") at++;
  at += 2;  // `"` and <|sep|>
  at += 3;  // <|open|> think|response <|sep|>
  return tokenize_segments(k3(), std::vector<Segment>(segs.begin() + (long)at, segs.end()));
}

std::string json_quote(std::string_view s) {
  return py_dumps(PyJson::string(std::string(s)), {});
}

const char* kAllTypes =
    R"({"s": "a\"b\\c\nd é", "n": 1.5, "i": 2, "t": true, "f": false, "z": null, "o": {"u": "C"}, "a": [1, 2]})";

std::string all_types_message() {
  return R"({"role":"assistant","reasoning_content":"Need the tool.","content":"Sure, 日本語 😀.","tool_calls":[
      {"id":"x","type":"function","function":{"name":"get_weather","arguments":)" +
         json_quote(kAllTypes) +
         R"(}},
      {"id":"y","type":"function","function":{"name":"raw","arguments":"{bad json"}},
      {"id":"z","type":"function","function":{"name":"none","arguments":""}}]})";
}

TEST(K3ReplyRoundTrip, RenderedTurnReadsBack) {
  const Ids ids = rendered_reply(all_types_message());
  const ParsedReply r = parse_k3(ids);
  EXPECT_EQ(r.reasoning, "Need the tool.");
  EXPECT_EQ(r.content, "Sure, 日本語 😀.");
  ASSERT_EQ(r.tool_calls.size(), 3u);
  EXPECT_EQ(r.tool_calls[0].name, "get_weather");
  EXPECT_EQ(r.tool_calls[0].arguments, kAllTypes);  // Python's json.dumps spacing, é kept
  EXPECT_EQ(r.tool_calls[1].arguments, "{bad json");
  EXPECT_EQ(r.tool_calls[2].arguments, "{}");
  EXPECT_TRUE(r.ended);
  EXPECT_TRUE(r.end_of_message);
}

TEST(K3ReplyRoundTrip, ThinkingOffStartsInResponse) {
  const Ids ids = rendered_reply(R"({"role":"assistant","content":"Hi there"})", false);
  const ParsedReply r = parse_k3(ids, false);
  EXPECT_EQ(r.reasoning, "");
  EXPECT_EQ(r.content, "Hi there");
  EXPECT_TRUE(r.tool_calls.empty());
}

TEST(K3ReplyIds, SeededUniqueAndShaped) {
  const Ids ids = rendered_reply(all_types_message());
  const ParsedReply a = parse_k3(ids, true, 42), b = parse_k3(ids, true, 42);
  const ParsedReply c = parse_k3(ids, true, 43);
  EXPECT_EQ(a.tool_calls, b.tool_calls);
  EXPECT_NE(a.tool_calls[0].id, c.tool_calls[0].id);
  std::set<std::string> seen;
  for (const ParsedToolCall& call : a.tool_calls) {
    ASSERT_EQ(call.id.size(), 29u);
    EXPECT_TRUE(call.id.starts_with("call_"));
    for (char ch : call.id.substr(5)) EXPECT_TRUE(std::isalnum((unsigned char)ch)) << call.id;
    seen.insert(call.id);
  }
  EXPECT_EQ(seen.size(), a.tool_calls.size());
}

// ---- streaming -----------------------------------------------------------------------------

// A reply whose multi-byte characters arrive one byte per token, in every channel.
Ids byte_split_reply() {
  return Reply()
      .bytes("Réflexion 🤔 ")
      .close("think")
      .open("response")
      .bytes("Ça va? 日本")
      .close("response")
      .open("tools")
      .open("call", {{"tool", "f"}, {"index", "1"}})
      .open("argument", {{"key", "k"}, {"type", "string"}})
      .bytes("ü\"é")
      .close("argument")
      .open("argument", {{"key", "n"}, {"type", "number"}})
      .text("3")
      .close("argument")
      .close("call")
      .close("tools")
      .end()
      .ids();
}

TEST(K3ReplyStreaming, DeltasEqualTheWholeAtEveryTokenBoundary) {
  for (const Ids& ids : {rendered_reply(all_types_message()), byte_split_reply()}) {
    const ParsedReply whole = parse_k3(ids);
    K3ReplyParser p(k3(), {}, Rng(1));
    const Collected c = stream(p, ids);
    expect_same(c, whole);
    expect_same(c, p.reply());
    EXPECT_EQ(c.ends, 1);
    EXPECT_EQ(c.events.back().kind, K::kEnd);
    for (std::size_t k = 0; k <= ids.size(); k++) {
      // Fed only the first k tokens, everything said so far is a prefix of the whole.
      K3ReplyParser part(k3(), {}, Rng(1));
      const Collected pc = stream(part, Ids(ids.begin(), ids.begin() + (long)k), false);
      EXPECT_TRUE(whole.reasoning.starts_with(pc.reasoning)) << k;
      EXPECT_TRUE(whole.content.starts_with(pc.content)) << k;
      ASSERT_LE(pc.calls.size(), whole.tool_calls.size()) << k;
      for (std::size_t i = 0; i < pc.calls.size(); i++) {
        EXPECT_TRUE(whole.tool_calls[i].arguments.starts_with(pc.calls[i].arguments)) << k;
        EXPECT_EQ(whole.tool_calls[i].id, pc.calls[i].id);
      }
    }
  }
  const ParsedReply r = parse_k3(byte_split_reply());
  EXPECT_EQ(r.reasoning, "Réflexion 🤔 ");
  EXPECT_EQ(r.content, "Ça va? 日本");
  EXPECT_EQ(r.tool_calls.at(0).arguments, R"({"k": "ü\"é", "n": 3})");
}

TEST(K3ReplyStreaming, EveryCutOffReplyIsStillWellFormed) {
  const Ids ids = byte_split_reply();
  for (std::size_t k = 0; k <= ids.size(); k++) {
    const ParsedReply r = parse_k3(Ids(ids.begin(), ids.begin() + (long)k));
    EXPECT_TRUE(r.ended);
    EXPECT_EQ(r.end_of_message, k == ids.size());
    EXPECT_TRUE(is_valid_utf8(r.reasoning) && is_valid_utf8(r.content)) << k;
    for (const ParsedToolCall& call : r.tool_calls) {
      EXPECT_NO_THROW(py_loads(call.arguments)) << k << ": " << call.arguments;
    }
  }
}

TEST(K3ReplyStreaming, EventOrderForACall) {
  const Ids ids = Reply()
                      .close("think")
                      .open("tools")
                      .open("call", {{"tool", "f"}, {"index", "1"}})
                      .open("argument", {{"key", "a"}, {"type", "string"}})
                      .text("x")
                      .close("argument")
                      .close("call")
                      .close("tools")
                      .end()
                      .ids();
  K3ReplyParser p(k3(), {}, Rng(7));
  const Collected c = stream(p, ids);
  std::vector<K> kinds;
  for (const ReplyEvent& e : c.events) kinds.push_back(e.kind);
  // `{"a": "`, `x`, `"` and `}`: a string value streams, the object closes with the call.
  EXPECT_EQ(kinds, (std::vector<K>{K::kToolCallStart, K::kToolCallArguments, K::kToolCallArguments,
                                   K::kToolCallArguments, K::kToolCallArguments, K::kToolCallEnd,
                                   K::kEnd}));
  EXPECT_EQ(c.events[0].name, "f");
  EXPECT_EQ(c.calls[0].arguments, R"({"a": "x"})");
  EXPECT_FALSE(c.events[5].cut);  // the model closed the call
  EXPECT_TRUE(c.events.back().end_of_message);
  EXPECT_TRUE(p.push(special("<|open|>")).empty());  // nothing after the end
  EXPECT_TRUE(p.finish().empty());
}

// ---- malformed output ----------------------------------------------------------------------

TEST(K3ReplyMalformed, TruncatedMidReasoning) {
  const ParsedReply r = parse_k3(Reply().text("still thinking").ids());
  EXPECT_EQ(r.reasoning, "still thinking");
  EXPECT_EQ(r.content, "");
  EXPECT_TRUE(r.ended);
  EXPECT_FALSE(r.end_of_message);
}

TEST(K3ReplyMalformed, UnclosedThinkEndsWhereTheResponseOpens) {
  const ParsedReply r =
      parse_k3(Reply().text("r").open("response").text("answer").close("response").end().ids());
  EXPECT_EQ(r.reasoning, "r");
  EXPECT_EQ(r.content, "answer");
}

TEST(K3ReplyMalformed, RepeatedThinkOpen) {
  const ParsedReply r = parse_k3(
      Reply().open("think").text("r").close("think").open("response").text("a").end().ids());
  EXPECT_EQ(r.reasoning, "r");
  EXPECT_EQ(r.content, "a");
}

TEST(K3ReplyMalformed, StrayClosesAndSepsAreIgnored) {
  const ParsedReply r = parse_k3(Reply()
                                     .close("think")
                                     .open("response")
                                     .text("a")
                                     .close("tools")
                                     .close("argument")
                                     .id(special("<|sep|>"))
                                     .text("b")
                                     .close("response")
                                     .close("think")
                                     .end()
                                     .ids());
  EXPECT_EQ(r.reasoning, "");
  EXPECT_EQ(r.content, "ab");
}

TEST(K3ReplyMalformed, TextOutsideElements) {
  const ParsedReply r = parse_k3(Reply()
                                     .text("r")
                                     .close("think")
                                     .text("\n")
                                     .open("response")
                                     .text("a")
                                     .close("response")
                                     .text("  loose")
                                     .text("\n")
                                     .open("tools")
                                     .text("\n")
                                     .close("tools")
                                     .end()
                                     .ids());
  EXPECT_EQ(r.reasoning, "r");
  EXPECT_EQ(r.content, "a  loose");  // stray whitespace between elements is dropped
}

TEST(K3ReplyMalformed, NoMarkupAtAll) {
  EXPECT_EQ(parse_k3(Reply().text("just text").ids(), false).content, "just text");
  EXPECT_EQ(parse_k3(Reply().text("just text").ids(), true).reasoning, "just text");
}

TEST(K3ReplyMalformed, TruncatedMidArgumentAndMidHeader) {
  const Reply head = Reply()
                         .close("think")
                         .open("tools")
                         .open("call", {{"tool", "f"}, {"index", "1"}})
                         .open("argument", {{"key", "city"}, {"type", "string"}})
                         .text("Par");
  ParsedReply r = parse_k3(head.ids());
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].arguments, R"({"city": "Par"})");
  // finish() closed the call, not the model: its end says so (a Responses item is incomplete).
  K3ReplyParser cut(k3(), {}, Rng(7));
  const Collected c = stream(cut, head.ids());
  ASSERT_GE(c.events.size(), 2u);
  EXPECT_EQ(c.events[c.events.size() - 2].kind, ReplyEvent::Kind::kToolCallEnd);
  EXPECT_TRUE(c.events[c.events.size() - 2].cut);

  r = parse_k3(Reply(head)
                   .close("argument")
                   .open("argument", {{"key", "n"}, {"type", "number"}})
                   .text("4")
                   .ids());
  EXPECT_EQ(r.tool_calls[0].arguments, R"({"city": "Par", "n": 4})");

  // Cut after the call's header, before any argument began: the call is kept, with an empty
  // object (finish_reason says "length"; the arguments generated so far are none).
  r = parse_k3(Reply().close("think").open("tools").open("call", {{"tool", "f"}}).ids());
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].name, "f");
  EXPECT_EQ(r.tool_calls[0].arguments, "{}");

  // A tag cut off before its <|sep|> says nothing: no call is started.
  r = parse_k3(
      Reply().close("think").open("tools").id(special("<|open|>")).text("call tool=\"f").ids());
  EXPECT_TRUE(r.tool_calls.empty());
  EXPECT_EQ(r.content, "");
}

TEST(K3ReplyMalformed, CallsWithoutNamesAndArgumentsWithoutKeysAreDropped) {
  const ParsedReply r = parse_k3(Reply()
                                     .close("think")
                                     .open("tools")
                                     .open("call", {{"index", "1"}})
                                     .open("argument", {{"key", "a"}})
                                     .text("lost")
                                     .close("argument")
                                     .close("call")
                                     .open("call", {{"tool", "g"}, {"index", "2"}})
                                     .open("argument", {{"type", "string"}})
                                     .text("lost too")
                                     .close("argument")
                                     .open("argument", {{"key", "b"}})
                                     .text("untyped is a string")
                                     .close("argument")
                                     .close("call")
                                     .close("tools")
                                     .end()
                                     .ids());
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].name, "g");
  EXPECT_EQ(r.tool_calls[0].arguments, R"({"b": "untyped is a string"})");
  EXPECT_EQ(r.content, "");
}

TEST(K3ReplyMalformed, TypesAreHints) {
  const ParsedReply r = parse_k3(Reply()
                                     .close("think")
                                     .open("tools")
                                     .open("call", {{"tool", "f&amp;g"}, {"index", "1"}})
                                     .open("argument", {{"key", "n"}, {"type", "number"}})
                                     .text("three")
                                     .close("argument")
                                     .open("argument", {{"key", "o"}, {"type", "object"}})
                                     .text(" {\"k\":[1,2e0]} ")
                                     .close("argument")
                                     .open("argument", {{"key", "b"}, {"type", "boolean"}})
                                     .text("True")
                                     .close("argument")
                                     .open("argument", {{"key", "q&quot;"}, {"type", "null"}})
                                     .text("null")
                                     .close("argument")
                                     .close("call")
                                     .end()
                                     .ids());
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].name, "f&g");
  EXPECT_EQ(r.tool_calls[0].arguments,
            R"({"n": "three", "o": {"k": [1, 2.0]}, "b": "True", "q\"": null})");
}

TEST(K3ReplyMalformed, RawJsonBlockAndMixedChildren) {
  const ParsedReply r = parse_k3(Reply()
                                     .close("think")
                                     .open("tools")
                                     .open("call", {{"tool", "f"}, {"index", "1"}})
                                     .open("json", {{"type", "object"}})
                                     .text("  {\"a\": 1}")
                                     .close("json")
                                     .open("argument", {{"key", "ignored"}})
                                     .text("x")
                                     .close("argument")
                                     .close("call")
                                     .open("call", {{"tool", "g"}, {"index", "2"}})
                                     .open("call", {{"tool", "h"}, {"index", "3"}})
                                     .close("tools")
                                     .end()
                                     .ids());
  ASSERT_EQ(r.tool_calls.size(), 3u);
  EXPECT_EQ(r.tool_calls[0].arguments, R"({"a": 1})");
  EXPECT_EQ(r.tool_calls[1].arguments, "{}");  // a call opened inside another ends the first
  EXPECT_EQ(r.tool_calls[2].name, "h");
  EXPECT_EQ(r.tool_calls[2].arguments, "{}");
}

TEST(K3ReplyMalformed, UnknownElementsAndOtherSpecials) {
  const ParsedReply r = parse_k3(Reply()
                                     .close("think")
                                     .open("response")
                                     .text("a")
                                     .open("b")
                                     .text("bold")
                                     .close("b")
                                     .id(special("<|media_pad|>"))
                                     .id(special("[EOS]"))
                                     .text("c")
                                     .close("response")
                                     .end()
                                     .text("after the end")
                                     .ids());
  EXPECT_EQ(r.content, "aboldc");
}

TEST(K3ReplyMalformed, BrokenUtf8BecomesReplacementCharacters) {
  // A lead byte cut off by a marker, and an invalid byte.
  const ParsedReply r = parse_k3(Reply()
                                     .close("think")
                                     .open("response")
                                     .bytes("a\xe6\x97")
                                     .close("response")
                                     .bytes("\xff")
                                     .end()
                                     .ids());
  EXPECT_EQ(r.content, "a\xef\xbf\xbd\xef\xbf\xbd");
}

TEST(K3ReplyMalformed, RandomTokenSoupNeverThrows) {
  // Markers, tag names, attributes, text, split characters and other specials in random order.
  std::vector<Ids> pieces;
  for (const char* s : {"<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>", "<|media_pad|>"}) {
    pieces.push_back({special(s)});
  }
  for (const char* s : {"think", "response", "tools", "message", "json type=\"object\"",
                        "call tool=\"f\" index=\"1\"", "call", "argument key=\"k\" type=\"string\"",
                        "argument key=\"n\" type=\"number\"", " ", "\n", "x", "{\"a\":", "12"}) {
    pieces.push_back(k3().encode_text(s));
  }
  for (char c : std::string("é😀")) pieces.push_back({*k3().find_rank(std::string(1, c))});
  Rng rng(2024);
  for (int round = 0; round < 300; round++) {
    Ids ids;
    for (int i = 0; i < 40; i++) {
      const Ids& p = pieces[rng.below((uint32_t)pieces.size())];
      ids.insert(ids.end(), p.begin(), p.end());
    }
    K3ReplyParser parser(k3(), {.thinking = round % 2 == 0}, Rng(round));
    Collected c;
    ASSERT_NO_THROW(c = stream(parser, ids)) << round;
    expect_same(c, parser.reply());
    EXPECT_EQ(c.ends, 1);
  }
}

TEST(K3ReplyParserSetup, NeedsK3Markers) {
  EXPECT_THROW(K3ReplyParser p(kimi_linear(), {}, Rng(1)), FormatError);
}

// ---- Kimi K2 (and Kimi-Linear) -------------------------------------------------------------

TEST(K2Reply, ContentUntilImEnd) {
  const Tokenizer& t = kimi_linear();
  Ids ids;
  for (char c : std::string("Grüße 日本")) ids.push_back(*t.find_rank(std::string(1, c)));
  ids.push_back(*t.find_special("<|im_middle|>"));
  for (TokenId id : t.encode_text(" ok")) ids.push_back(id);
  ids.push_back(*t.find_special("<|im_end|>"));
  for (TokenId id : t.encode_text("ignored")) ids.push_back(id);

  // The parser the daemon uses: the family's, chosen by the tokenizer's specials.
  const ChatFormat format(t, std::nullopt, ChatDefaults{});
  ASSERT_EQ(format.family(), ChatFamily::kK2);
  std::unique_ptr<ReplyParser> p = format.parser(false, 1);
  const Collected c = stream(*p, ids);
  EXPECT_EQ(c.content, "Grüße 日本 ok");
  EXPECT_EQ(p->reply().content, c.content);
  EXPECT_TRUE(p->reply().end_of_message);
  EXPECT_TRUE(p->reply().tool_calls.empty());
  EXPECT_EQ(c.ends, 1);

  std::unique_ptr<ReplyParser> cut = format.parser(false, 1);
  const ParsedReply r = parse_reply(*cut, Ids(ids.begin(), ids.begin() + 3));  // "Gr" + half of ü
  EXPECT_EQ(r.content, "Gr\xef\xbf\xbd");
  EXPECT_FALSE(r.end_of_message);
}

// A K2 reply built as the model writes it: text, and the markers by id.
class K2Reply {
 public:
  explicit K2Reply(const Tokenizer& t) : t_(t) {}
  K2Reply& text(std::string_view s) {
    for (TokenId id : t_.encode_text(s)) ids_.push_back(id);
    return *this;
  }
  K2Reply& bytes(std::string_view s) {
    for (char c : s) ids_.push_back(*t_.find_rank(std::string(1, c)));
    return *this;
  }
  K2Reply& mark(std::string_view special) {
    ids_.push_back(*t_.find_special(special));
    return *this;
  }
  K2Reply& call(std::string_view id, std::string_view args) {
    mark("<|tool_call_begin|>").text(id).mark("<|tool_call_argument_begin|>").bytes(args);
    return mark("<|tool_call_end|>");
  }
  const Ids& ids() const { return ids_; }

 private:
  const Tokenizer& t_;
  Ids ids_;
};

std::unique_ptr<ReplyParser> k2_parser(bool think = false) {
  static const ChatFormat plain(test::k2_tokenizer(false), std::nullopt, ChatDefaults{});
  static const ChatFormat thinking(test::k2_tokenizer(true), std::nullopt, ChatDefaults{});
  return (think ? thinking : plain).parser(false, 1);
}

// Content, then two calls in one section: ids as the model wrote them, names read out of them,
// arguments streamed verbatim (split multi-byte characters arrive whole), the turn's end.
TEST(K2Reply, ToolCallsStreamWithTheirIds) {
  K2Reply r(test::k2_tokenizer());
  r.text("Let me check.").mark("<|tool_calls_section_begin|>");
  r.call("functions.get_weather:0", " {\"city\": \"Zürich\"}");
  r.text("\n").call("functions.search.web:1", "{\"q\":\"x\"}");
  r.mark("<|tool_calls_section_end|>").mark("<|im_end|>").text("after");
  std::unique_ptr<ReplyParser> p = k2_parser();
  const Collected c = stream(*p, r.ids());
  expect_same(c, p->reply());
  EXPECT_EQ(c.content, "Let me check.");
  EXPECT_EQ(c.calls, (std::vector<ParsedToolCall>{
                         {"functions.get_weather:0", "get_weather", "{\"city\": \"Zürich\"}"},
                         {"functions.search.web:1", "search.web", "{\"q\":\"x\"}"}}));
  EXPECT_TRUE(p->reply().end_of_message);
  EXPECT_EQ(c.ends, 1);
  for (const ReplyEvent& e : c.events) EXPECT_FALSE(e.cut);  // the model closed both calls
  // Every cut of the reply is still a well-formed reading, and a prefix of the whole.
  for (size_t n = 0; n <= r.ids().size(); n++) {
    std::unique_ptr<ReplyParser> cut = k2_parser();
    const ParsedReply part = parse_reply(*cut, Ids(r.ids().begin(), r.ids().begin() + n));
    EXPECT_TRUE(part.ended);
    EXPECT_LE(part.tool_calls.size(), 2u);
    EXPECT_EQ(c.content.compare(0, part.content.size(), part.content), 0) << n;
  }
}

TEST(K2Reply, MalformedCalls) {
  K2Reply r(test::k2_tokenizer());
  r.mark("<|tool_calls_section_begin|>").call("functions.now:3", "");  // no arguments: {}
  r.call("  ", "{\"dropped\":1}");                                     // names nothing
  r.mark("<|tool_call_begin|>").text("functions.f:4");                 // cut in the id
  std::unique_ptr<ReplyParser> p = k2_parser();
  const ParsedReply got = parse_reply(*p, r.ids());
  EXPECT_EQ(got.tool_calls, (std::vector<ParsedToolCall>{{"functions.now:3", "now", "{}"},
                                                         {"functions.f:4", "f", "{}"}}));
  EXPECT_FALSE(got.end_of_message);
  EXPECT_EQ(got.content, "");
}

// A call cut by the token budget ends as K3's does: with the arguments written so far, `{}` when
// the cut came right after the call opened.
TEST(K2Reply, ACallCutInItsArgumentsKeepsWhatWasWritten) {
  K2Reply r(test::k2_tokenizer());
  r.mark("<|tool_calls_section_begin|>").mark("<|tool_call_begin|>").text("functions.ls:0");
  r.mark("<|tool_call_argument_begin|>");
  std::unique_ptr<ReplyParser> opened = k2_parser();
  EXPECT_EQ(parse_reply(*opened, r.ids()).tool_calls,
            (std::vector<ParsedToolCall>{{"functions.ls:0", "ls", "{}"}}));
  r.bytes("{\"dir\": \"sr");
  std::unique_ptr<ReplyParser> p = k2_parser();
  const Collected c = stream(*p, r.ids());
  const ParsedReply& got = p->reply();
  EXPECT_EQ(got.tool_calls,
            (std::vector<ParsedToolCall>{{"functions.ls:0", "ls", "{\"dir\": \"sr"}}));
  EXPECT_FALSE(got.end_of_message);
  // finish() closed the call, not the model: its end says so (a Responses item is incomplete).
  ASSERT_GE(c.events.size(), 2u);
  EXPECT_EQ(c.events[c.events.size() - 2].kind, ReplyEvent::Kind::kToolCallEnd);
  EXPECT_TRUE(c.events[c.events.size() - 2].cut);
}

// <think>…</think> is the think channel where the vocabulary has both as tokens (K2-Thinking);
// elsewhere the model can only have written them as text, which is content.
TEST(K2Reply, ThinkChannel) {
  K2Reply r(test::k2_tokenizer(true));
  r.mark("<think>").text("plan it").mark("</think>").text("answer").mark("<|im_end|>");
  std::unique_ptr<ReplyParser> p = k2_parser(true);
  const Collected c = stream(*p, r.ids());
  EXPECT_EQ(c.reasoning, "plan it");
  EXPECT_EQ(c.content, "answer");
  // A think channel cut off before it closes is reasoning only.
  std::unique_ptr<ReplyParser> cut = k2_parser(true);
  EXPECT_EQ(parse_reply(*cut, Ids(r.ids().begin(), r.ids().begin() + 3)).content, "");

  K2Reply plain(test::k2_tokenizer());
  plain.text("<think>x</think>y");
  std::unique_ptr<ReplyParser> q = k2_parser();
  EXPECT_EQ(parse_reply(*q, plain.ids()).content, "<think>x</think>y");
}

TEST(K2Reply, RandomTokenSoupNeverThrows) {
  // Markers, ids, arguments, text, split characters and the think pair in random order.
  auto pieces_of = [](const Tokenizer& t) {
    std::vector<Ids> pieces;
    for (const char* s : {"<|tool_calls_section_begin|>", "<|tool_calls_section_end|>",
                          "<|tool_call_begin|>", "<|tool_call_argument_begin|>",
                          "<|tool_call_end|>", "<think>", "</think>", "<|im_middle|>"})
      pieces.push_back(t.encode_markup(s));
    for (const char* s : {"functions.f:0", "functions.", ":1", " ", "\n", "x", "{\"a\":", "12"})
      pieces.push_back(t.encode_text(s));
    for (char c : std::string("é😀")) pieces.push_back({*t.find_rank(std::string(1, c))});
    return pieces;
  };
  const std::vector<Ids> plain = pieces_of(test::k2_tokenizer(false));
  const std::vector<Ids> thinking = pieces_of(test::k2_tokenizer(true));
  Rng rng(2025);
  for (int round = 0; round < 300; round++) {
    const bool think = round % 2 == 0;
    const std::vector<Ids>& pieces = think ? thinking : plain;
    Ids ids;
    for (int i = 0; i < 40; i++) {
      const Ids& p = pieces[rng.below((uint32_t)pieces.size())];
      ids.insert(ids.end(), p.begin(), p.end());
    }
    std::unique_ptr<ReplyParser> parser = k2_parser(think);
    Collected c;
    ASSERT_NO_THROW(c = stream(*parser, ids)) << round;
    expect_same(c, parser->reply());
    EXPECT_EQ(c.ends, 1);
  }
}

TEST(K2Reply, FunctionNameFromId) {
  EXPECT_EQ(k2_function_name("functions.get_weather:0"), "get_weather");
  EXPECT_EQ(k2_function_name(" functions.search.web:12\n"), "search.web");
  EXPECT_EQ(k2_function_name("get_weather"), "get_weather");
  EXPECT_EQ(k2_function_name("functions.a:b"), "a:b");
  EXPECT_EQ(k2_function_name("functions.:1"), "");
}

}  // namespace
}  // namespace waste
