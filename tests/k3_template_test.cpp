// K3's XTML rendering against the release's encoder (render_golden.json, exact segments and token
// ids), the revision-a590ce09 rules of docs/PROMPT_FORMAT.md §2 case by case, the OpenAI body
// parser's refusals, and the raw mode (Kimi K2's format: k2_template_test).

#include <gtest/gtest.h>
#include <simdjson.h>

#include <string>
#include <vector>

#include "engine/base/error.h"
#include "engine/tokenizer/tokenizer.h"
#include "prompt_templates/chat_format.h"
#include "prompt_templates/k3/k3_template.h"
#include "prompt_templates/raw_template.h"
#include "prompt_templates/segments.h"
#include "protocol/json/python_json.h"
#include "protocol/openai/request.h"
#include "tests/test_util.h"

namespace waste {
namespace {

// A chat-completions body's conversation, as the daemon parses it.
Conversation parse_chat(std::string_view body) {
  return parse_chat_completion(body, {}).conversation;
}

using Segs = std::vector<Segment>;

std::filesystem::path k3_dir() {
  return test::fixtures_dir() / "k3";
}

const Tokenizer& k3() {
  return test::k3_tokenizer();
}

// ⟨x⟩ marks markup, as in docs/PROMPT_FORMAT.md §2.16: a readable form for comparing whole renders.
std::string show(const Segs& segs) {
  std::string out;
  for (const Segment& s : segs) out += s.is_markup ? "⟨" + s.text + "⟩" : s.text;
  return out;
}

// Only the segments after the last system-note / before the generation prompt matter in most
// cases; these helpers build the expected text pieces.
std::string open(std::string_view tag, std::string_view attrs = "") {
  return "⟨<|open|>⟩" + std::string(tag) + std::string(attrs) + "⟨<|sep|>⟩";
}
std::string close(std::string_view tag) {
  return "⟨<|close|>⟩" + std::string(tag) + "⟨<|sep|>⟩";
}
std::string message_end() {
  return close("message") + "⟨<|end_of_msg|>⟩";
}

Segs render(std::string_view body, const K3RenderOptions& opt = {}) {
  return render_k3(parse_chat(body), opt);
}

// Thinking off and no effort note, so a render is just the conversation and the prompt.
K3RenderOptions plain() {
  K3RenderOptions o;
  o.default_thinking = false;
  return o;
}

std::string rendered(std::string_view body, const K3RenderOptions& opt = plain()) {
  return show(render(body, opt));
}

const std::string kPromptResponse = open("message", " role=\"assistant\"") + open("response");

// ---- the release's goldens -----------------------------------------------------------------

struct GoldenCase {
  std::string name;
  std::string request;
  K3RenderOptions options;
  Segs segments;
  std::vector<TokenId> ids;
};

std::vector<GoldenCase> golden_cases() {
  simdjson::dom::parser parser;
  simdjson::dom::element root = parser.load((k3_dir() / "render_golden.json").string()).value();
  std::vector<GoldenCase> out;
  simdjson::dom::array cases = root["cases"].get_array();
  for (simdjson::dom::element c : cases) {
    GoldenCase g;
    g.name = std::string(c["name"].get_string().value());
    g.request = "{\"messages\":" + simdjson::to_string(c["messages"].value());
    simdjson::dom::element tools = c["tools"].value();
    if (!tools.is_null()) g.request += ",\"tools\":" + simdjson::to_string(tools);
    simdjson::dom::object kwargs = c["kwargs"].get_object();
    for (auto [key, value] : kwargs) {
      if (key == "image_prompts") {
        g.options.image_prompts.emplace();
        simdjson::dom::array prompts = value.get_array();
        for (simdjson::dom::element p : prompts) {
          g.options.image_prompts->emplace_back(p.get_string().value());
        }
      } else {
        g.request += ",\"" + std::string(key) + "\":" + simdjson::to_string(value);
      }
    }
    g.request += "}";
    simdjson::dom::array segs = c["segments"].get_array();
    for (simdjson::dom::element s : segs) {
      g.segments.push_back({std::string(s.at(0).get_string().value()), s.at(1).get_bool().value()});
    }
    simdjson::dom::array ids = c["token_ids"].get_array();
    for (simdjson::dom::element id : ids) g.ids.push_back((TokenId)id.get_int64().value());
    out.push_back(std::move(g));
  }
  return out;
}

TEST(K3Golden, EveryCaseSegmentForSegmentAndIdForId) {
  const std::vector<GoldenCase> cases = golden_cases();
  ASSERT_EQ(cases.size(), 5u);
  for (const GoldenCase& g : cases) {
    SCOPED_TRACE(g.name);
    const Segs got = render(g.request, g.options);
    ASSERT_EQ(got.size(), g.segments.size()) << show(got);
    for (std::size_t i = 0; i < got.size(); i++) {
      EXPECT_EQ(got[i], g.segments[i]) << "segment " << i;
    }
    EXPECT_EQ(tokenize_segments(k3(), got), g.ids);
  }
}

TEST(K3Golden, DefaultEffortIsMax) {
  // The first golden passes effort max explicitly; leaving it out must render the same, because
  // the daemon defaults to what the release's apply_chat_template passes.
  const GoldenCase g = golden_cases()[0];
  ASSERT_EQ(g.name, "system_user_default");
  const std::string body =
      R"({"messages":[{"role":"system","content":"You are Kimi."},{"role":"user","content":"Hello"}]})";
  EXPECT_EQ(render(body), g.segments);
  EXPECT_EQ(tokenize_segments(k3(), render(body)).size(), 105u);
  K3RenderOptions no_note;
  no_note.default_effort = "";
  EXPECT_EQ(render(body, no_note).front(), (Segment{"<|open|>", true}));
  EXPECT_EQ(render(body, no_note)[4].text, "system");
  EXPECT_EQ(render(body, no_note).size(), g.segments.size() - 16);
}

TEST(K3Golden, SegmentsAreNeverMerged) {
  // docs/PROMPT_FORMAT.md §1: `="_foo"` is three tokens when encoded flat, four as the encoder's
  // separate segments.
  const Segs segs =
      render(R"({"messages":[{"role":"user","name":"_foo","content":"x"}]})", plain());
  std::vector<Segment> attr(segs.begin() + 7, segs.begin() + 10);
  EXPECT_EQ(show(attr), "=\"_foo\"");
  EXPECT_EQ(k3().encode_text("=\"_foo\"").size(), 3u);
  EXPECT_EQ(tokenize_segments(k3(), attr).size(), 4u);
}

TEST(K3Render, InjectedMarkupStaysText) {
  const Segs segs =
      render(R"({"messages":[{"role":"user","content":"<|open|>hi<|end_of_msg|>"}]})");
  for (const Segment& s : segs) {
    if (!s.is_markup) {
      for (TokenId id : k3().encode_text(s.text)) EXPECT_FALSE(k3().is_special(id)) << s.text;
    }
  }
  EXPECT_EQ(k3().encode_text("<|open|>hi"), (std::vector<TokenId>{27, 91, 4454, 91, 29, 9663}));
}

// ---- roles and channels --------------------------------------------------------------------

TEST(K3Render, AssistantHistoryChannels) {
  const std::string body = R"({"messages":[
    {"role":"user","content":"a"},
    {"role":"assistant","name":"bot","reasoning_content":"  ","content":"b"},
    {"role":"user","content":"c"}],"thinking":true,"reasoning_effort":"high"})";
  const std::string got = show(render(body));
  // Whitespace-only reasoning is rendered (a590ce09), the assistant keeps its name.
  EXPECT_NE(got.find(open("message", " role=\"assistant\" name=\"bot\"") + open("think") + "  " +
                     close("think") + open("response") + "b" + close("response") + message_end()),
            std::string::npos)
      << got;
  EXPECT_NE(got.find("`thinking_effort=high`."), std::string::npos);
  EXPECT_TRUE(got.ends_with(open("message", " role=\"assistant\"") + open("think")));
}

TEST(K3Render, ThinkingOffDropsThinkChannels) {
  const std::string body = R"({"messages":[
    {"role":"assistant","reasoning":"r","content":null},{"role":"user","content":"c"}]})";
  EXPECT_EQ(rendered(body), open("message", " role=\"assistant\"") + open("response") +
                                close("response") + message_end() +
                                open("message", " role=\"user\"") + "c" + message_end() +
                                kPromptResponse);
}

TEST(K3Render, ReasoningAliasAndEmptyThink) {
  K3RenderOptions on;
  on.default_effort = "";
  const std::string alias = rendered(
      R"({"messages":[{"role":"assistant","reasoning_content":"","reasoning":"why","content":"x"}]})",
      on);
  EXPECT_NE(alias.find(open("think") + "why" + close("think")), std::string::npos);
  const std::string empty = rendered(R"({"messages":[{"role":"assistant","content":"x"}]})", on);
  EXPECT_NE(empty.find(open("think") + close("think") + open("response") + "x"), std::string::npos);
}

TEST(K3Render, ContentPartsAreSeparateSegments) {
  const Segs segs = render(
      R"({"messages":[{"role":"developer","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}]})",
      plain());
  EXPECT_EQ(show(segs),
            open("message", " role=\"system\"") + "ab" + message_end() + kPromptResponse);
  EXPECT_EQ(segs[7], (Segment{"a", false}));
  EXPECT_EQ(segs[8], (Segment{"b", false}));
}

// ---- tool calls ----------------------------------------------------------------------------

std::string call_body(std::string_view arguments_json) {
  return R"({"messages":[{"role":"assistant","content":"","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":)" +
         std::string(arguments_json) + "}}]}]}";
}

std::string tools_part(const std::string& rendered_text) {
  const std::size_t b = rendered_text.find(open("tools"));
  const std::size_t e = rendered_text.find(close("tools"));
  return rendered_text.substr(b + open("tools").size(), e - b - open("tools").size());
}

std::string arg(std::string_view key, std::string_view type, std::string_view text) {
  return open("argument", " key=\"" + std::string(key) + "\" type=\"" + std::string(type) + "\"") +
         std::string(text) + close("argument");
}

const std::string kCallF = open("call", " tool=\"f\" index=\"1\"");

TEST(K3ToolCalls, StringArgumentsKeepTheirTextOneLevelDeep) {
  const std::string args =
      R"("{\"s\": \"x\\ny \\u00e9\", \"n\": 1e2, \"a\": [1,2], \"o\": {\"u\":\"C\"}, \"t\": true, \"z\": null, \"s\": \"last\"} trailing")";
  EXPECT_EQ(tools_part(rendered(call_body(args))),
            kCallF + arg("s", "string", "last") + arg("n", "number", "1e2") +
                arg("a", "array", "[1,2]") + arg("o", "object", R"({"u":"C"})") +
                arg("t", "boolean", "true") + arg("z", "null", "null") + close("call"));
  EXPECT_EQ(tools_part(rendered(call_body(R"("{\"s\": \"x\\ny\"}")"))),
            kCallF + arg("s", "string", "x\ny") + close("call"));
}

TEST(K3ToolCalls, ObjectArgumentsAreRedumpedWithPythonSpacing) {
  const std::string args = R"({"n": 1e2, "a": [1,2], "o": {"u":"C","é":1.50}, "s": "v", "i": 7})";
  EXPECT_EQ(tools_part(rendered(call_body(args))),
            kCallF + arg("n", "number", "100.0") + arg("a", "array", "[1, 2]") +
                arg("o", "object", R"({"u": "C", "é": 1.5})") + arg("s", "string", "v") +
                arg("i", "number", "7") + close("call"));
}

// Numbers the body's JSON reader (simdjson) cannot hold keep the text the client wrote, whether
// the arguments are an object in the body or a JSON string.
TEST(K3ToolCalls, NumbersPastSimdjsonKeepTheirText) {
  const std::string object =
      R"({"a":1e400,"b":[-1e400],"c":123456789012345678901234567890,"d":-999999999999999999999,"s":"1e400"})";
  EXPECT_EQ(tools_part(rendered(call_body(object))),
            kCallF + arg("a", "number", "1e400") + arg("b", "array", "[-1e400]") +
                arg("c", "number", "123456789012345678901234567890") +
                arg("d", "number", "-999999999999999999999") + arg("s", "string", "1e400") +
                close("call"));
  const std::string text = R"("{\"a\": 1e400, \"b\": [-1E+400, 123456789012345678901234567890]}")";
  EXPECT_EQ(tools_part(rendered(call_body(text))),
            kCallF + arg("a", "number", "1e400") +
                arg("b", "array", "[-1E+400, 123456789012345678901234567890]") + close("call"));
}

TEST(K3ToolCalls, UnusableArgumentsBecomeARawJsonBlock) {
  const auto raw = [](std::string_view text) {
    return kCallF + open("json", " type=\"object\"") + std::string(text) + close("json") +
           close("call");
  };
  EXPECT_EQ(tools_part(rendered(call_body(R"("{bad json")"))), raw("{bad json"));
  EXPECT_EQ(tools_part(rendered(call_body(R"("   ")"))), raw("   "));
  EXPECT_EQ(tools_part(rendered(call_body(R"("[1, 2]")"))), raw("[1, 2]"));
  EXPECT_EQ(tools_part(rendered(call_body(R"("{\"a\": 1,}")"))), raw("{\"a\": 1,}"));
  EXPECT_EQ(tools_part(rendered(call_body(R"("{\"a\": [1, }")"))), raw("{\"a\": [1, }"));
}

TEST(K3ToolCalls, NoArguments) {
  for (const char* args : {R"("")", "null", R"("{}")", "{}", R"(" { } ")"}) {
    EXPECT_EQ(tools_part(rendered(call_body(args))), kCallF + close("call")) << args;
  }
}

TEST(K3ToolCalls, FlatCallsAndEscapedNames) {
  const std::string body =
      R"({"messages":[{"role":"assistant","tool_calls":[{"name":"a\"&b","arguments":{"k":false}}]}]})";
  EXPECT_EQ(tools_part(rendered(body)), open("call", " tool=\"a&quot;&amp;b\" index=\"1\"") +
                                            arg("k", "boolean", "false") + close("call"));
}

// ---- tool results --------------------------------------------------------------------------

std::string results_body(std::string_view results) {
  return R"({"messages":[{"role":"user","content":"q"},
    {"role":"assistant","content":"","tool_calls":[
      {"id":"a","type":"function","function":{"name":"fa","arguments":"{}"}},
      {"type":"function","function":{"name":"fnoid","arguments":"{}"}},
      {"id":"b","type":"function","function":{"name":"fb","arguments":"{}"}}]},)" +
         std::string(results) + "]}";
}

std::string tool_msg(std::string_view name, int index, std::string_view content) {
  return open("message", " role=\"tool\" tool=\"" + std::string(name) + "\" index=\"" +
                             std::to_string(index) + "\"") +
         std::string(content) + message_end();
}

TEST(K3ToolResults, ReorderedIntoCallOrder) {
  const std::string in_order = rendered(results_body(
      R"({"role":"tool","tool_call_id":"a","content":"ra"},{"role":"tool","tool_call_id":"b","content":"rb"})"));
  const std::string swapped = rendered(results_body(
      R"({"role":"tool","tool_call_id":"b","content":"rb"},{"role":"tool","tool_call_id":"a","name":"stale","content":"ra"})"));
  EXPECT_EQ(in_order, swapped);
  EXPECT_NE(in_order.find(tool_msg("fa", 1, "ra") + tool_msg("fb", 2, "rb")), std::string::npos)
      << in_order;
}

TEST(K3ToolResults, UnmatchedRunStaysAndNamesResolvePositionally) {
  const std::string got = rendered(results_body(
      R"({"role":"tool","tool_call_id":"b","content":"rb"},{"role":"tool","tool_call_id":"zz","content":"r2"},{"role":"user","content":"u"},{"role":"tool","content":"r3"},{"role":"tool","tool":"explicit","content":"r4"})"));
  // No reordering (one id does not match); names by position, counting on across the user turn.
  EXPECT_NE(got.find(tool_msg("fa", 1, "rb") + tool_msg("fnoid", 2, "r2") +
                     open("message", " role=\"user\"") + "u" + message_end() +
                     tool_msg("fb", 3, "r3") + tool_msg("explicit", 4, "r4")),
            std::string::npos)
      << got;
}

TEST(K3ToolResults, ReorderIsIdempotentAndReportsOrigins) {
  const Conversation req = parse_chat(results_body(
      R"({"role":"tool","tool_call_id":"b","content":"rb"},{"role":"tool","tool_call_id":"a","content":"ra"})"));
  std::vector<std::size_t> origin;
  const std::vector<ChatMessage> once = k3_reorder_tool_results(req.messages, &origin);
  EXPECT_EQ(origin, (std::vector<std::size_t>{0, 1, 3, 2}));
  EXPECT_EQ(once[2].tool, "fa");
  Conversation again = req;
  again.messages = once;
  EXPECT_EQ(render_k3(again, plain()), render_k3(req, plain()));
}

TEST(K3ToolResults, UnresolvableNameIsAnError) {
  try {
    render(R"({"messages":[{"role":"user","content":"q"},{"role":"tool","content":"r"}]})");
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("messages[1]"), std::string::npos) << e.what();
  }
}

TEST(K3Tools, StaticAndDynamicDeclarationsAreDeepSorted) {
  const std::string tool_a =
      R"({"type":"function","function":{"parameters":{"type":"object","properties":{"z":{"type":"number","maximum":1e2},"a":{"type":"string"}}},"name":"fa"}})";
  const std::string tool_b =
      R"({"function":{"name":"fb","parameters":{"properties":{"a":{"type":"string"},"z":{"maximum":100.0,"type":"number"}},"type":"object"}},"type":"function"})";
  const std::string want_tool =
      R"({"function":{"name":"fa","parameters":{"properties":{"a":{"type":"string"},"z":{"maximum":100.0,"type":"number"}},"type":"object"}},"type":"function"})";
  const std::string got = rendered(R"({"tools":[)" + tool_a + R"(],"messages":[
      {"role":"user","content":"x"},{"role":"system","content":"ignored","tools":[)" +
                                   tool_b + "]}]}");
  const std::string fence = "```";
  EXPECT_TRUE(
      got.starts_with(open("message", " role=\"system\" type=\"tool-declare\"") +
                      "# Tools\nHere are the available tools, described in JSONSchema.\n\n" +
                      fence + "json\n[" + want_tool + "]\n" + fence + message_end()))
      << got;
  std::string dyn = want_tool;
  dyn.replace(dyn.find("\"fa\""), 4, "\"fb\"");
  EXPECT_NE(got.find(open("message", " role=\"system\" type=\"tool-declare\"") +
                     "## New Tools Available\nThe system dynamically extends the toolset via "
                     "lazy-loading.\nYou have access to all existing and extended tools.\nHere are "
                     "the specs for the extended tools.\n\n" +
                     fence + "json\n[" + dyn + "]\n" + fence + message_end()),
            std::string::npos)
      << got;
  EXPECT_EQ(got.find("ignored"), std::string::npos);
}

// Tool schemas and response schemas reach the prompt with such numbers as the client wrote them.
TEST(K3Tools, NumbersPastSimdjsonKeepTheirText) {
  const std::string got = rendered(
      R"({"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"n":{"type":"integer","minimum":-999999999999999999999,"maximum":1e400,"enum":[123456789012345678901234567890,"1e400"]}}}}}],)"
      R"("response_format":{"type":"json_schema","json_schema":{"name":"r","schema":{"const":-1e400,"title":"1e400"}}}})");
  EXPECT_NE(
      got.find(
          R"([{"function":{"name":"f","parameters":{"properties":{"n":{"enum":[123456789012345678901234567890,"1e400"],"maximum":1e400,"minimum":-999999999999999999999,"type":"integer"}},"type":"object"}},"type":"function"}])"),
      std::string::npos)
      << got;
  EXPECT_NE(got.find("```json\n{\"const\":-1e400,\"title\":\"1e400\"}\n```"), std::string::npos)
      << got;
}

// ---- notes ---------------------------------------------------------------------------------

TEST(K3Notes, ToolChoice) {
  const std::string base = R"({"messages":[{"role":"user","content":"x"}],"tool_choice":)";
  const std::string none = rendered(base + R"("none"})");
  EXPECT_TRUE(none.ends_with(open("message", " role=\"system\" type=\"tool-choice\"") +
                             "The system is invoked with `tool_choice=none`.\nYou MUST NOT call "
                             "any tools in the next message." +
                             message_end() + kPromptResponse));
  const std::string plain_render = rendered(R"({"messages":[{"role":"user","content":"x"}]})");
  EXPECT_EQ(rendered(base + R"("auto"})"), plain_render);
  EXPECT_EQ(rendered(base + R"({"type":"function","function":{"name":"f"}}})"), plain_render);
}

TEST(K3Notes, ResponseFormats) {
  const std::string base = R"({"messages":[{"role":"user","content":"x"}],"response_format":)";
  const std::string fence = "```";
  const std::string head =
      "The system is invoked with `response_format=json_schema`.\nYour response must be raw JSON "
      "data without markdown code blocks (" +
      fence +
      "json) or any additional formatting.\nThe JSON data must match the following schema:\n" +
      fence + "json\n";
  const auto note = [&](std::string_view schema) {
    return open("message", " role=\"system\" type=\"response-format\"") + head +
           std::string(schema) + "\n" + fence + message_end() + kPromptResponse;
  };
  EXPECT_TRUE(
      rendered(base +
               R"({"type":"json_schema","json_schema":{"name":"n","schema":{"b":1,"a":2}}}})")
          .ends_with(note(R"({"a":2,"b":1})")));
  EXPECT_TRUE(
      rendered(base + R"({"type":"json_schema","json_schema":{"json_schema":{"b":1,"a":[]}}}})")
          .ends_with(note(R"({"a":[],"b":1})")));
  EXPECT_TRUE(
      rendered(base + R"({"type":"json_schema","json_schema":{"type":"object","title":"t"}}})")
          .ends_with(note(R"({"title":"t","type":"object"})")));
  EXPECT_TRUE(rendered(base + R"({"type":"json_schema"}})").ends_with(note("null")));
  EXPECT_TRUE(rendered(base + R"("json_object"})")
                  .ends_with("The system is invoked with `response_format=json_object`.\nYour "
                             "response must be raw JSON data without markdown code blocks (" +
                             fence + "json) or any additional formatting." + message_end() +
                             kPromptResponse));
  EXPECT_EQ(rendered(base + R"({"type":"text"}})"),
            rendered(R"({"messages":[{"role":"user","content":"x"}]})"));
}

// ---- thinking switches ---------------------------------------------------------------------

TEST(K3Thinking, RequestFieldsAndDefaults) {
  const std::string msgs = R"("messages":[{"role":"user","content":"x"}])";
  const auto req = [&](std::string_view extra) {
    return parse_chat("{" + msgs + std::string(extra) + "}");
  };
  EXPECT_FALSE(req("").thinking.has_value());
  EXPECT_EQ(req(R"(,"thinking":false)").thinking, false);
  EXPECT_EQ(req(R"(,"thinking":{"type":"disabled"})").thinking, false);
  EXPECT_EQ(req(R"(,"enable_thinking":true)").thinking, true);
  EXPECT_EQ(req(R"(,"thinking":true,"chat_template_kwargs":{"thinking":false})").thinking, false);
  EXPECT_EQ(req(R"(,"reasoning_effort":"none","thinking":true)").thinking, false);
  EXPECT_EQ(req(R"(,"reasoning_effort":"LOW")").thinking_effort, "low");
  EXPECT_EQ(req(R"(,"reasoning":{"effort":"high"})").thinking_effort, "high");
  EXPECT_EQ(req(R"(,"thinking":{"type":"enabled","effort":"max"})").thinking_effort, "max");
  EXPECT_EQ(req(R"(,"chat_template_kwargs":{"thinking_effort":"low"},"reasoning_effort":"high")")
                .thinking_effort,
            "low");
  // Thinking off wins over an effort, as in the encoder: no note, prompt opens response.
  const Segs off = render_k3(req(R"(,"thinking":false,"thinking_effort":"high")"));
  EXPECT_TRUE(show(off).ends_with(kPromptResponse));
  EXPECT_EQ(show(off).find("thinking_effort"), std::string::npos);
  EXPECT_TRUE(k3_thinking(req("")));
  EXPECT_FALSE(k3_thinking(req(""), plain()));
}

// An effort asks for reasoning: it turns thinking on over the server's default, not over the
// request's own switch; a server that forbids thinking keeps it off whatever the request says.
TEST(K3Thinking, AnEffortTurnsItOnUnlessTheServerForbidsIt) {
  const auto req = [](std::string_view extra) {
    return parse_chat(R"({"messages":[{"role":"user","content":"x"}])" + std::string(extra) + "}");
  };
  EXPECT_EQ(req(R"(,"reasoning_effort":"low")").thinking, true);
  EXPECT_EQ(req(R"(,"reasoning":{"effort":"minimal"})").thinking, true);
  EXPECT_EQ(req(R"(,"reasoning_effort":"high","thinking":false)").thinking, false);
  EXPECT_EQ(req(R"(,"reasoning_effort":"none")").thinking, false);
  EXPECT_TRUE(k3_thinking(req(R"(,"reasoning_effort":"low")"), plain()));
  K3RenderOptions forbid;
  forbid.default_thinking = false;
  forbid.thinking_allowed = false;
  EXPECT_FALSE(k3_thinking(req(R"(,"thinking":true,"reasoning_effort":"max")"), forbid));
  const std::string off = show(render_k3(req(R"(,"reasoning_effort":"max")"), forbid));
  EXPECT_TRUE(off.ends_with(kPromptResponse));
  EXPECT_EQ(off.find("thinking_effort"), std::string::npos);
}

TEST(K3Thinking, MediumIsRefused) {
  Conversation r = parse_chat(R"({"messages":[{"role":"user","content":"x"}]})");
  r.thinking_effort = "medium";
  EXPECT_THROW(render_k3(r), UsageError);
  r.thinking = false;
  EXPECT_NO_THROW(render_k3(r));  // the encoder checks the effort only with thinking on
}

// ---- images --------------------------------------------------------------------------------

TEST(K3Images, PromptsPlaceholdersAndCounts) {
  const std::string body = R"({"messages":[{"role":"user","content":[
      {"type":"image_url","image_url":{"url":"data:a"}},{"type":"text","text":"see <|kimi_image_placeholder|> too"},
      {"type":"image","image":"b.png"}]}]})";
  // Without prompts each image part is the placeholder markup; the needle in text stays text.
  EXPECT_EQ(rendered(body), open("message", " role=\"user\"") +
                                "⟨<|kimi_image_placeholder|>⟩see <|kimi_image_placeholder|> too"
                                "⟨<|kimi_image_placeholder|>⟩" +
                                message_end() + kPromptResponse);
  K3RenderOptions opt = plain();
  opt.image_prompts = {k3_image_prompt(640, 480), k3_image_prompt(1, 2), k3_image_prompt(3, 4)};
  const Segs segs = render(body, opt);
  EXPECT_EQ(show(segs),
            open("message", " role=\"user\"") +
                "⟨<|media_begin|>image 640x480<|media_content|><|media_pad|><|media_end|>⟩"
                "see ⟨<|media_begin|>image 1x2<|media_content|><|media_pad|><|media_end|>⟩"
                " too⟨<|media_begin|>image 3x4<|media_content|><|media_pad|><|media_end|>⟩" +
                message_end() + kPromptResponse);
  opt.image_prompts->pop_back();
  EXPECT_THROW(render(body, opt), UsageError);
  opt.image_prompts->resize(4, k3_image_prompt(5, 5));
  EXPECT_THROW(render(body, opt), UsageError);
}

// ---- raw ------------------------------------------------------------------------------------

// Two snapshot points: after the system prompt and the tools, which an agent sends unchanged
// whatever its user message says, and after the last complete message.
TEST(ChatFormatSnapshots, AtThePreambleAndAtTheLastMessage) {
  ChatFormat format(test::k3_tokenizer(), std::nullopt, ChatDefaults{false, "max"});
  const std::string tools =
      R"("tools":[{"type":"function","function":{"name":"read","parameters":{"type":"object"}}}])";
  auto render = [&](const std::string& messages, const std::string& extra) {
    return format.render(parse_chat(R"({"messages":[)" + messages + "]" + extra + "}"));
  };
  RenderedPrompt a = render(R"({"role":"system","content":"You are an agent."},
                               {"role":"user","content":"Fix the bug"})",
                            "," + tools);
  RenderedPrompt b = render(R"({"role":"system","content":"You are an agent."},
                               {"role":"user","content":"Write the tests, then run them"})",
                            "," + tools);
  ASSERT_EQ(a.snapshots.size(), 2u);
  ASSERT_EQ(b.snapshots.size(), 2u);
  EXPECT_EQ(a.snapshots[0], b.snapshots[0]);
  EXPECT_TRUE(std::equal(a.ids.begin(), a.ids.begin() + (ptrdiff_t)a.snapshots[0], b.ids.begin()));
  // The prompts part within the user message's opening markup after the point.
  size_t common = 0;
  while (a.ids[common] == b.ids[common]) common++;
  EXPECT_GE(common, a.snapshots[0]);
  EXPECT_LT(common, a.snapshots[0] + 8);
  RenderedPrompt history = render(R"({"role":"system","content":"You are an agent."},
                                     {"role":"user","content":"Fix the bug"},
                                     {"role":"assistant","content":"Done."})",
                                  "," + tools);
  EXPECT_GT(a.snapshots[1], a.snapshots[0]);
  EXPECT_TRUE(
      std::equal(a.ids.begin(), a.ids.begin() + (ptrdiff_t)a.snapshots[1], history.ids.begin()));
  // Tools alone are a preamble too; a user message alone has only the last-message point.
  EXPECT_EQ(render(R"({"role":"user","content":"Fix the bug"})", "," + tools).snapshots.size(), 2u);
  EXPECT_EQ(render(R"({"role":"user","content":"Fix the bug"})", "").snapshots.size(), 1u);
}

TEST(RawTemplate, OneTextSegment) {
  const Conversation r = parse_chat(
      R"({"messages":[{"role":"system","content":"a<|open|>"},{"role":"user","content":[{"type":"text","text":"b"}]},{"role":"assistant","content":null}]})");
  EXPECT_EQ(render_raw(r), (Segs{{"a<|open|>b", false}}));
}

}  // namespace
}  // namespace waste
