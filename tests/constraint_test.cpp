// Structured outputs: regex DFAs, JSON Schema compilation and token masks over K3's real
// vocabulary. Outputs are checked by Python's `jsonschema` (scripts/reference/validate_json.py),
// which shares nothing with the C++ engine.
#include <gtest/gtest.h>

#include <fstream>
#include <random>

#include "engine/base/rng.h"
#include "prompt_templates/k3/k3_reply_grammar.h"
#include "prompt_templates/kimi_k2/k2_reply_grammar.h"
#include "prompt_templates/reply_grammar.h"
#include "protocol/constraint/constraint_walk.h"
#include "protocol/constraint/json_schema.h"
#include "protocol/constraint/regex_dfa.h"
#include "protocol/constraint/token_constraint.h"
#include "protocol/json/json_writer.h"
#include "tests/schema_corpus.h"
#include "tests/test_util.h"

namespace waste {
namespace {

TEST(RegexDfa, AnchorsClassesAndRepeats) {
  ByteDfa d = compile_pattern("^[a-c]{2,3}-\\d+$", StringAlphabet::kJsonUnescaped);
  EXPECT_TRUE(dfa_matches(d, "ab-1"));
  EXPECT_TRUE(dfa_matches(d, "abc-123"));
  EXPECT_FALSE(dfa_matches(d, "a-1"));
  EXPECT_FALSE(dfa_matches(d, "abcd-1"));
  EXPECT_FALSE(dfa_matches(d, "ab-"));
  ByteDfa search = compile_pattern("x(?:yz|w)", StringAlphabet::kJsonUnescaped);
  EXPECT_TRUE(dfa_matches(search, "aaxyzbb"));
  EXPECT_TRUE(dfa_matches(search, "xw"));
  EXPECT_FALSE(dfa_matches(search, "xy"));
  ByteDfa dot = compile_pattern("^.$", StringAlphabet::kJsonUnescaped);
  EXPECT_TRUE(dfa_matches(dot, "\xc3\xa9"));  // é is one character
  EXPECT_FALSE(dfa_matches(dot, "\xc3"));
  EXPECT_FALSE(dfa_matches(dot, "ab"));
  ByteDfa neg = compile_pattern("^[^0-9]+$", StringAlphabet::kJsonUnescaped);
  EXPECT_TRUE(dfa_matches(neg, "abc\xe4\xb8\xad"));
  EXPECT_FALSE(dfa_matches(neg, "a1"));
  EXPECT_FALSE(dfa_matches(neg, "a\"b"));  // never needs an escape
}

// The subset construction stops at its work budget, so a pattern whose DFA explodes costs a
// bounded time (the fuzzer's slowest took 1.3 s to reach the state limit, now tens of ms).
TEST(RegexDfa, AWorkBudgetBoundsTheConstruction) {
  const char* zod_uuid =
      "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$";
  EXPECT_NO_THROW(compile_pattern(zod_uuid, StringAlphabet::kJsonUnescaped));
  try {
    compile_pattern(zod_uuid, StringAlphabet::kJsonUnescaped, 100);
    ADD_FAILURE() << "accepted past the budget";
  } catch (const UsageError& e) {
    EXPECT_STREQ(e.what(), "pattern is too complex");
  }
  // Unanchored, each '.' doubles the states the DFA needs: refused by the budget long before.
  EXPECT_THROW(
      compile_pattern("Z]c.................................N5", StringAlphabet::kJsonUnescaped),
      UsageError);
}

TEST(RegexDfa, RefusesWhatItCannotDoByName) {
  auto message = [](const char* p) {
    try {
      compile_pattern(p, StringAlphabet::kJsonUnescaped);
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(message("(a)\\1").find("backreference"), std::string::npos);
  EXPECT_NE(message("a(?=b)").find("lookaround"), std::string::npos);
  EXPECT_NE(message("\\bword").find("\\b"), std::string::npos);
  EXPECT_NE(message("[é]").find("non-ASCII"), std::string::npos);
  EXPECT_NE(message("a^b").find("'^'"), std::string::npos);
  EXPECT_NE(message("(ab").find("unclosed"), std::string::npos);
  EXPECT_NE(message("^\"$").find("matches no string"), std::string::npos);
  EXPECT_NE(message("a{2000}").find("repeat count"), std::string::npos);
}

TEST(RegexDfa, FormatsMatchTheirExamples) {
  auto fmt_dfa = [](const char* f) {
    return compile_pattern(format_pattern(f), StringAlphabet::kJsonUnescaped);
  };
  EXPECT_TRUE(dfa_matches(fmt_dfa("date"), "2024-01-31"));
  EXPECT_FALSE(dfa_matches(fmt_dfa("date"), "2024-02-30"));
  EXPECT_FALSE(dfa_matches(fmt_dfa("date"), "2024-04-31"));
  EXPECT_TRUE(dfa_matches(fmt_dfa("date-time"), "2024-06-01T12:30:00.5+02:00"));
  EXPECT_TRUE(dfa_matches(fmt_dfa("time"), "23:59:59Z"));
  EXPECT_FALSE(dfa_matches(fmt_dfa("time"), "24:00:00Z"));
  EXPECT_TRUE(dfa_matches(fmt_dfa("uuid"), "123e4567-e89b-12d3-a456-426614174000"));
  EXPECT_TRUE(dfa_matches(fmt_dfa("email"), "first.last@example.org"));
  EXPECT_FALSE(dfa_matches(fmt_dfa("email"), "no-at-sign.org"));
  EXPECT_TRUE(dfa_matches(fmt_dfa("uri"), "https://example.org/a?b=c#d"));
  EXPECT_EQ(format_pattern("hostname"), "");
}

const TokenIndex& k3_index() {
  static std::unique_ptr<TokenIndex> index =
      make_token_index(test::k3_tokenizer(), (int)test::k3_tokenizer().vocab_size());
  return *index;
}

// The value followed by an end-of-message token, as the server's grammars end.
std::shared_ptr<const Grammar> schema_grammar(const std::string& schema) {
  auto g = std::make_shared<Grammar>();
  int value = compile_json_schema(*g, schema);
  g->root = g->seq({value, g->literal("<|end_of_msg|>")});
  return g;
}

bool allowed(const std::vector<uint8_t>& mask, int id) {
  return mask[id >> 3] >> (id & 7) & 1;
}

// Each schema is run with several seeds; every finished output must validate.
void expect_valid_outputs(const std::vector<std::string>& schemas, int seeds, int max_steps,
                          double min_finished) {
  std::vector<std::pair<std::string, std::string>> cases;
  int finished = 0, total = 0;
  for (size_t s = 0; s < schemas.size(); ++s) {
    std::shared_ptr<const Grammar> g;
    try {
      g = schema_grammar(schemas[s]);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "schema " << s << " refused: " << e.what() << "\n" << schemas[s];
      continue;
    }
    for (int seed = 0; seed < seeds; ++seed) {
      ConstraintWalk w;
      try {
        w = random_walk(g, k3_index(), 1000 * s + seed, max_steps);
      } catch (const UsageError& e) {
        ADD_FAILURE() << e.what() << "\n" << schemas[s];
        continue;
      }
      ++total;
      if (!w.finished) continue;
      ++finished;
      cases.push_back({schemas[s], w.text});
    }
  }
  std::string out;
  int rc = test::validate_json(cases, &out);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_GE(finished, (int)(min_finished * total)) << finished << " of " << total << " finished";
}

TEST(Constraint, ApiSchemasGiveValidJson) {
  expect_valid_outputs(test::api_schemas(), 3, 600, 0.8);
}

TEST(Constraint, GeneratedSchemasGiveValidJson) {
  expect_valid_outputs(test::generated_schemas(), 2, 800, 0.8);
}

// The mask is exact: every id it allows is accepted, and a sample of the ids it refuses is
// refused, at many points along random outputs.
TEST(Constraint, MaskAgreesWithAccept) {
  const TokenIndex& index = k3_index();
  Rng rng(3);
  for (const std::string& schema : test::api_schemas()) {
    auto g = schema_grammar(schema);
    TokenConstraint c(g, index);
    std::vector<uint8_t> mask(index.mask_bytes());
    for (int step = 0; step < 12 && !c.done(); ++step) {
      c.mask(mask.data());
      std::vector<int> yes;
      for (int id = 0; id < index.vocab(); ++id)
        if (allowed(mask, id)) yes.push_back(id);
      ASSERT_FALSE(yes.empty()) << schema << " step " << step;
      for (int k = 0; k < 40; ++k) {
        int id = (int)(rng.next() % index.vocab());
        TokenConstraint probe = c;
        bool accepted = true;
        try {
          probe.accept(id);
        } catch (const UsageError&) {
          accepted = false;
        }
        EXPECT_EQ(accepted, allowed(mask, id)) << "id " << id << " schema " << schema;
      }
      for (size_t k = 0; k < yes.size(); k += 1 + yes.size() / 30) {
        TokenConstraint probe = c;
        EXPECT_NO_THROW(probe.accept(yes[k])) << yes[k];
      }
      c.accept(yes[rng.next() % yes.size()]);
    }
  }
}

std::string refusal(const std::string& schema) {
  try {
    Grammar g;
    compile_json_schema(g, schema);
  } catch (const SchemaError& e) {
    return e.what();
  }
  return "accepted";
}

TEST(Constraint, UnsupportedKeywordsAreRefusedByName) {
  EXPECT_NE(
      refusal(R"({"type":"object","patternProperties":{"^a":{}}})").find("\"patternProperties\""),
      std::string::npos);
  EXPECT_NE(refusal(R"({"not":{"type":"string"}})").find("\"not\""), std::string::npos);
  EXPECT_NE(refusal(R"({"type":"array","uniqueItems":true})").find("uniqueItems"),
            std::string::npos);
  EXPECT_NE(
      refusal(R"({"properties":{"a":{"type":"string","format":"hostname"}}})").find("hostname"),
      std::string::npos);
  EXPECT_NE(refusal(R"({"properties":{"a":{"if":{}}}})").find("#/properties/a"), std::string::npos);
  EXPECT_NE(refusal(R"({"$ref":"http://example.org/s.json"})").find("local references"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"$ref":"#/$defs/missing"})").find("does not resolve"), std::string::npos);
  EXPECT_NE(refusal(R"({"oneOf":[{"type":"integer"},{"type":"number"}]})").find("overlap"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"type":"strin"})").find("unknown type"), std::string::npos);
  EXPECT_NE(refusal(R"({"type":"integer","minimum":5,"maximum":4})").find("no JSON value"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"type":"string","pattern":"^a{10}$","maxLength":5})").find("length bounds"),
            std::string::npos);
  EXPECT_NE(refusal("{not json").find("not valid JSON"), std::string::npos);
  EXPECT_NE(refusal(R"(false)").find("no JSON value"), std::string::npos);
  // additionalProperties sees only its own schema's properties, as JSON Schema says.
  EXPECT_NE(
      refusal(
          R"({"allOf":[{"properties":{"a":{}},"required":["a"]}],"additionalProperties":false})")
          .find("required property \"a\" is not allowed"),
      std::string::npos);
}

TEST(Constraint, NewKeywordsRefuseWhatTheyCannotKeep) {
  auto has = [](const std::string& schema, const std::string& words) {
    std::string r = refusal(schema);
    EXPECT_NE(r.find(words), std::string::npos) << schema << " -> " << r;
  };
  // $ref is followed into the alternatives: equal consts behind refs still overlap.
  has(R"({"$defs":{"A":{"type":"object","properties":{"k":{"const":"x"}},"required":["k"]},"B":{"type":"object","properties":{"k":{"const":"x"}},"required":["k"]}},"oneOf":[{"$ref":"#/$defs/A"},{"$ref":"#/$defs/B"}]})",
      "overlap");
  has(R"({"$defs":{"A":{"type":"object","properties":{"k":{"const":"a"}},"required":["k"]},"B":{"type":"object","properties":{"k":{"const":"b"}},"required":["k"]}},"oneOf":[{"$ref":"#/$defs/A"},{"$ref":"#/$defs/B"}],"discriminator":{"propertyName":"k","mapping":{"a":"#/$defs/B"}}})",
      "\"a\" maps to a schema whose \"k\" does not allow it");
  has(R"({"oneOf":[{"type":"object","properties":{"k":{"const":"a"}},"required":["k"]},{"type":"string"}],"discriminator":{"propertyName":"k"}})",
      "alternative 1 does not require \"k\"");
  has(R"({"type":"object","propertyNames":{"minLength":1,"minimum":3}})",
      "\"minimum\" is not supported inside propertyNames");
  has(R"({"type":"object","properties":{"Bad":{}},"required":["Bad"],"propertyNames":{"pattern":"^[a-z]+$"}})",
      "required property \"Bad\" does not satisfy propertyNames");
  has(R"({"type":"object","properties":{"a":{},"b":{}},"required":["a","b"],"maxProperties":1})",
      "maxProperties 1 is less than the 2 required properties");
  has(R"({"type":"object","properties":{"a":{}},"additionalProperties":false,"minProperties":2})",
      "minProperties 2 is more than the 1 properties allowed");
  has(R"({"type":"integer","multipleOf":0.5})", "whole number");
  has(R"({"type":"integer","multipleOf":0})", "greater than 0");
  has(R"({"type":"integer","multipleOf":10,"minimum":1,"maximum":9})", "no JSON value");
  has(R"({"type":"string","format":"date","pattern":"^x"})", "matches no string");
  // Found by schema_fuzz: a negative count was converted to unsigned (undefined behaviour).
  for (const char* word : {"minLength", "maxLength", "minItems", "maxItems", "minProperties"})
    for (const char* bad : {"-2", "1.5", "\"3\""})
      has(fmt::format(R"({{"{}":{}}})", word, bad),
          fmt::format("#/{}: must be a non-negative integer", word));
}

// Over a vocabulary of single bytes: whether the schema's grammar writes exactly `text`, then ends.
bool writes(const std::string& schema, std::string_view text) {
  static const TokenIndex bytes = [] {
    std::vector<std::string> b;
    for (int i = 0; i < 256; ++i) b.push_back(std::string(1, (char)i));
    b.push_back("<|end_of_msg|>");
    return TokenIndex(b, {{"<|end_of_msg|>", 256}});
  }();
  TokenConstraint c(schema_grammar(schema), bytes);
  try {
    for (unsigned char ch : text) c.accept(ch);
    c.accept(256);
  } catch (const UsageError&) {
    return false;
  }
  return c.done();
}

// Numbers simdjson cannot hold (json_document.h): a bound is the nearest double (±infinity past
// a double's range), a const or enum value is written exactly as the schema gives it, and such
// a number is never taken for a string.
TEST(Constraint, NumbersPastSimdjsonInSchemas) {
  EXPECT_TRUE(writes(R"({"const":1e400})", "1e400"));
  EXPECT_FALSE(writes(R"({"const":1e400})", "Infinity"));
  EXPECT_TRUE(
      writes(R"({"const":123456789012345678901234567890})", "123456789012345678901234567890"));
  EXPECT_FALSE(writes(R"({"const":123456789012345678901234567890})", "1.2345678901234568e+29"));
  const std::string listed =
      R"({"enum":[-1e400,-999999999999999999999,"1e400",[1E+400,{"k":123456789012345678901234567890}]]})";
  for (const char* v : {"-1e400", "-999999999999999999999", "\"1e400\"",
                        R"([1E+400,{"k":123456789012345678901234567890}])"})
    EXPECT_TRUE(writes(listed, v)) << v;
  EXPECT_FALSE(writes(listed, "1e400"));
  // A client's string that reads like a number stays a string, and the number stays a number.
  EXPECT_TRUE(writes(R"({"type":"string","enum":["1e400",1e400]})", "\"1e400\""));
  EXPECT_FALSE(writes(R"({"type":"string","enum":["1e400",1e400]})", "1e400"));
  EXPECT_TRUE(writes(R"({"type":"integer","enum":["1e400",-999999999999999999999]})",
                     "-999999999999999999999"));
  // Bounds past a double's range bound nothing...
  EXPECT_TRUE(writes(R"({"type":"number","minimum":-1e400,"maximum":1e400})", "-2.5"));
  EXPECT_TRUE(writes(
      R"({"type":"integer","minimum":-999999999999999999999,"maximum":123456789012345678901234567890})",
      "42"));
  // ...but still keep out the listed values they exclude.
  EXPECT_TRUE(writes(R"({"enum":[1,1e400],"maximum":10})", "1"));
  EXPECT_FALSE(writes(R"({"enum":[1,1e400],"maximum":10})", "1e400"));
  EXPECT_TRUE(writes(R"({"enum":[1,-1e400],"minimum":-1e400})", "-1e400"));
  // What cannot be honoured is refused where it is.
  const auto has = [](const std::string& schema, const std::string& words) {
    std::string r = refusal(schema);
    EXPECT_NE(r.find(words), std::string::npos) << schema << " -> " << r;
  };
  has(R"({"type":"number","minimum":1e400})", "numeric bounds beyond 1e12");
  has(R"({"type":"integer","maximum":-123456789012345678901234567890})",
      "numeric bounds beyond 1e12");
  has(R"({"type":"integer","multipleOf":123456789012345678901234567890})",
      "#/multipleOf: multipleOf is supported only as a whole number below 1e12");
  has(R"({"type":"object","required":[1e400]})", "#/required: must be an array of strings");
  has(R"({"type":1e400})", "#/type: must be a string or an array of strings");
  has(R"({"type":["string",123456789012345678901234567890]})", "#/type: must name types");
  has(R"({"type":"string","pattern":-1e400})", "#/pattern: must be a string");
  has(R"({"$ref":1e400})", "only local references");
  has(R"({"minLength":-1e400})", "#/minLength: must be a non-negative integer");
  has(R"({"const":01})", "not valid JSON");
  // A count past any output is capped, as any count above 4e9 is.
  EXPECT_EQ(refusal(R"({"type":"string","maxLength":123456789012345678901234567890})"), "accepted");
}

// JSON Schema counts code points, JavaScript's String.length UTF-16 units: a bounded string
// never takes a character past U+FFFF, so the two counts agree; an unbounded one may.
TEST(Constraint, BoundedStringsStayInTheBasicPlane) {
  const TokenIndex& index = k3_index();
  int astral = -1;
  for (int id = 0; id < index.vocab() && astral < 0; ++id)
    if (!index.is_special(id) && index.bytes(id).size() == 4 &&
        (unsigned char)index.bytes(id)[0] >= 0xF0 && (unsigned char)index.bytes(id)[0] <= 0xF4)
      astral = id;
  ASSERT_GE(astral, 0) << "the K3 vocabulary has a token for a character past U+FFFF";
  int quote = -1;
  for (int id = 0; id < index.vocab() && quote < 0; ++id)
    if (!index.is_special(id) && index.bytes(id) == "\"") quote = id;
  ASSERT_GE(quote, 0);
  auto allows_after_quote = [&](const std::string& schema) {
    TokenConstraint c(schema_grammar(schema), index);
    c.accept(quote);
    std::vector<uint8_t> mask(index.mask_bytes());
    c.mask(mask.data());
    return allowed(mask, astral);
  };
  EXPECT_TRUE(allows_after_quote(R"({"type":"string"})"));
  EXPECT_FALSE(allows_after_quote(R"({"type":"string","maxLength":10})"));
  EXPECT_FALSE(allows_after_quote(R"({"type":"string","minLength":1})"));
  EXPECT_FALSE(allows_after_quote(R"({"type":"string","pattern":"^.*$","maxLength":10})"));
  EXPECT_TRUE(allows_after_quote(R"({"type":"string","pattern":"^.*$"})"));
}

// K3 tool-call arguments come out in the XTML argument form the reply parser reads back.
TEST(Constraint, K3TypedArgumentsFollowTheToolSchema) {
  auto g = std::make_shared<Grammar>();
  int args = compile_typed_arguments(
      *g,
      R"({"type":"object","properties":{"city":{"type":"string","maxLength":6},"days":{"type":"integer","minimum":1,"maximum":7}},"required":["city","days"]})",
      k3_argument_spelling());
  g->root = g->seq({args, g->literal("<|close|>call<|sep|>")});
  const TokenIndex& index = k3_index();
  const Tokenizer& tok = test::k3_tokenizer();
  TokenConstraint c(g, index);
  // Drive it with the canonical tokens of a valid call; every one must be allowed.
  std::string text =
      "<|open|>argument key=\"city\" type=\"string\"<|sep|>Paris<|close|>argument<|sep|>"
      "<|open|>argument key=\"days\" "
      "type=\"number\"<|sep|>3<|close|>argument<|sep|><|close|>call<|sep|>";
  std::vector<uint8_t> mask(index.mask_bytes());
  for (int id : tok.encode_markup(text)) {
    c.mask(mask.data());
    ASSERT_TRUE(allowed(mask, id)) << "token " << id << " '" << index.bytes(id) << "'";
    c.accept(id);
  }
  EXPECT_TRUE(c.done());
  // A missing required argument is never allowed to close the call.
  TokenConstraint early(g, index);
  for (int id : tok.encode_markup(
           "<|open|>argument key=\"city\" type=\"string\"<|sep|>Rome<|close|>argument<|sep|>"))
    early.accept(id);
  early.mask(mask.data());
  EXPECT_FALSE(allowed(mask, *tok.find_special("<|close|>")));
}

// A reply cut while its forced or required call was opening: the markup that finishes the
// opening after what was written, so the parser still reads the call.
TEST(Constraint, K3CallOpeningRestFinishesTheCallACutLeftUnopened) {
  Conversation c;
  c.tools.push_back({"ls", "", R"({"type":"object"})", ""});
  c.tools.push_back({"grep", "", R"({"type":"object"})", ""});
  const std::string head = "<|close|>response<|sep|><|open|>tools<|sep|>";
  const std::string ls = head + "<|open|>call tool=\"ls\" index=\"1\"<|sep|>";
  const std::string leave_think = "<|close|>think<|sep|><|open|>response<|sep|>";
  c.tool_choice.kind = ToolChoice::Kind::kNamed;
  c.tool_choice.name = "ls";
  EXPECT_EQ(k3_call_opening_rest(c, false, ""), ls);
  EXPECT_EQ(k3_call_opening_rest(c, false, head + "<|open|>call to"),
            "ol=\"ls\" index=\"1\"<|sep|>");
  EXPECT_EQ(k3_call_opening_rest(c, true, leave_think), ls);
  EXPECT_EQ(k3_call_opening_rest(c, false, ls), std::nullopt);  // open already: the parser has it
  c.tool_choice.kind = ToolChoice::Kind::kRequired;
  // Which of two tools is not known until the name is.
  EXPECT_EQ(k3_call_opening_rest(c, false, head), std::nullopt);
  EXPECT_EQ(k3_call_opening_rest(c, false, head + "<|open|>call tool=\"g"),
            "rep\" index=\"1\"<|sep|>");
  // Thinking: a reply cut in its reasoning closes it first; after the close, as without.
  c.tools.pop_back();
  EXPECT_EQ(k3_call_opening_rest(c, true, "some reasoning"), leave_think + ls);
  EXPECT_EQ(k3_call_opening_rest(c, true, "some reasoning" + leave_think + head),
            "<|open|>call tool=\"ls\" index=\"1\"<|sep|>");
  c.tool_choice.kind = ToolChoice::Kind::kAuto;
  EXPECT_EQ(k3_call_opening_rest(c, false, ""), std::nullopt);  // no call was promised
}

// Drives `text` through a fresh constraint: true when every token is allowed and the grammar
// is complete at the end.
bool grammar_takes(std::shared_ptr<const Grammar> g, const std::string& text) {
  const TokenIndex& index = k3_index();
  TokenConstraint c(std::move(g), index);
  std::vector<uint8_t> mask(index.mask_bytes());
  for (int id : test::k3_tokenizer().encode_markup(text)) {
    c.mask(mask.data());
    if (!allowed(mask, id)) return false;
    c.accept(id);
  }
  return c.done();
}

// An agent with a final-answer schema (Codex's --output-schema, the AI SDK's output with tools)
// still calls its tools first: with tool_choice "auto" the K3 reply is the schema's value or
// calls; with "none" only the value.
TEST(Constraint, K3ResponseFormatWithToolsAllowsTheValueOrCalls) {
  Conversation c;
  c.response_format = {
      ResponseFormat::Kind::kJsonSchema,
      R"({"type":"object","properties":{"answer":{"type":"string"}},"required":["answer"]})"};
  c.tools.push_back({"ls", "", R"({"type":"object","properties":{"dir":{"type":"string"}}})", ""});
  const std::string value =
      "{\"answer\":\"hi\"}<|close|>response<|sep|><|close|>message<|sep|><|end_of_msg|>";
  const std::string call =
      "<|close|>response<|sep|><|open|>tools<|sep|><|open|>call tool=\"ls\" index=\"1\"<|sep|>"
      "<|open|>argument key=\"dir\" type=\"string\"<|sep|>src<|close|>argument<|sep|>"
      "<|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|><|end_of_msg|>";
  auto with_tools = k3_reply_grammar(c, false);
  EXPECT_TRUE(grammar_takes(with_tools, value));
  EXPECT_TRUE(grammar_takes(with_tools, call));
  EXPECT_FALSE(grammar_takes(with_tools, "{\"answer\":1}<|close|>response<|sep|>"));
  EXPECT_TRUE(grammar_takes(k3_reply_grammar(c, true),
                            "plan<|close|>think<|sep|><|open|>response<|sep|>" + call));
  c.tool_choice.kind = ToolChoice::Kind::kNone;
  auto no_calls = k3_reply_grammar(c, false);
  EXPECT_TRUE(grammar_takes(no_calls, value));
  EXPECT_FALSE(grammar_takes(no_calls, call));
}

// `text` through a fresh constraint over a K2 vocabulary (markers by id, the rest as text).
bool k2_grammar_takes(std::shared_ptr<const Grammar> g, const std::string& text,
                      bool think = false) {
  const Tokenizer& tok = test::k2_tokenizer(think);
  static std::unique_ptr<TokenIndex> plain =
      make_token_index(test::k2_tokenizer(false), (int)test::k2_tokenizer(false).vocab_size());
  static std::unique_ptr<TokenIndex> thinking =
      make_token_index(test::k2_tokenizer(true), (int)test::k2_tokenizer(true).vocab_size());
  const TokenIndex& index = think ? *thinking : *plain;
  TokenConstraint c(std::move(g), index);
  std::vector<uint8_t> mask(index.mask_bytes());
  for (int id : tok.encode_markup(text)) {
    c.mask(mask.data());
    if (!allowed(mask, id)) return false;
    c.accept(id);
  }
  return c.done();
}

Conversation k2_tools_request() {
  Conversation c;
  c.tools.push_back(
      {"ls", "", R"({"type":"object","properties":{"dir":{"type":"string"}},"required":["dir"]})",
       ""});
  c.tools.push_back({"now", "", "", ""});
  // One call already made: the model numbers its next call 1.
  ChatMessage m;
  m.role = Role::kAssistant;
  m.tool_calls.push_back({"functions.now:0", "now", ToolCall::ArgumentsForm::kString, "{}"});
  c.messages.push_back(m);
  return c;
}

const std::string kK2Ls =
    "<|tool_call_begin|>functions.ls:1<|tool_call_argument_begin|>{\"dir\":\"src\"}<|tool_call_end|"
    ">";
const std::string kK2Now =
    "<|tool_call_begin|>functions.now:2<|tool_call_argument_begin|>{}<|tool_call_end|>";
const std::string kK2End = "<|tool_calls_section_end|><|im_end|>";

// "required": one or more calls in a section, their arguments held to each tool's schema and
// numbered after the conversation's calls; parallel_tool_calls false allows one.
TEST(Constraint, K2RequiredCallsFollowTheSchemas) {
  Conversation c = k2_tools_request();
  c.tool_choice.kind = ToolChoice::Kind::kRequired;
  auto g = k2_reply_grammar(c, {});
  EXPECT_TRUE(k2_grammar_takes(g, "<|tool_calls_section_begin|>" + kK2Ls + kK2End));
  EXPECT_TRUE(k2_grammar_takes(g, "<|tool_calls_section_begin|>" + kK2Ls + kK2Now + kK2End));
  EXPECT_FALSE(k2_grammar_takes(g, "hello<|im_end|>"));
  EXPECT_FALSE(k2_grammar_takes(g, "<|tool_calls_section_begin|>" + kK2End));
  EXPECT_FALSE(k2_grammar_takes(
      g,
      "<|tool_calls_section_begin|><|tool_call_begin|>functions.ls:1<|tool_call_argument_begin|>"
      "{\"dir\":3}<|tool_call_end|>" +
          kK2End));
  EXPECT_FALSE(k2_grammar_takes(
      g,
      "<|tool_calls_section_begin|><|tool_call_begin|>functions.ls:0<|tool_call_argument_begin|>"
      "{\"dir\":\"a\"}<|tool_call_end|>" +
          kK2End));
  c.tool_choice.parallel = false;
  auto one = k2_reply_grammar(c, {});
  EXPECT_TRUE(k2_grammar_takes(one, "<|tool_calls_section_begin|>" + kK2Ls + kK2End));
  EXPECT_FALSE(k2_grammar_takes(one, "<|tool_calls_section_begin|>" + kK2Ls + kK2Now + kK2End));
  // With think tokens the think channel comes first.
  EXPECT_TRUE(k2_grammar_takes(k2_reply_grammar(c, {.think_tokens = true}),
                               "<think>plan</think><|tool_calls_section_begin|>" + kK2Ls + kK2End,
                               true));
  c.tools.clear();
  EXPECT_THROW(k2_reply_grammar(c, {}), UsageError);
}

// A named function: the grammar takes over after the forced opening.
TEST(Constraint, K2NamedCall) {
  Conversation c = k2_tools_request();
  c.tool_choice = {ToolChoice::Kind::kNamed, "ls", true};
  EXPECT_EQ(
      k2_forced_opening(c, {}),
      "<|tool_calls_section_begin|><|tool_call_begin|>functions.ls:1<|tool_call_argument_begin|>");
  auto g = k2_reply_grammar(c, {});
  EXPECT_TRUE(k2_grammar_takes(g, "{\"dir\":\"x\"}<|tool_call_end|>" + kK2End));
  EXPECT_FALSE(k2_grammar_takes(g, "{}<|tool_call_end|>" + kK2End));
  c.tool_choice.name = "missing";
  EXPECT_THROW(k2_reply_grammar(c, {}), UsageError);
}

// K2's counterpart of K3CallOpeningRestFinishesTheCallACutLeftUnopened: the rest of the first
// call's opening after what a cut reply wrote, numbered after the conversation's calls.
TEST(Constraint, K2CallOpeningRestFinishesTheCallACutLeftUnopened) {
  Conversation c = k2_tools_request();
  const std::string section = "<|tool_calls_section_begin|>";
  const std::string ls = section + "<|tool_call_begin|>functions.ls:1<|tool_call_argument_begin|>";
  const std::string empty_think = "<think></think>";
  const K2GrammarOptions think{.think_tokens = true};
  c.tool_choice = {ToolChoice::Kind::kNamed, "ls", true};
  EXPECT_EQ(k2_call_opening_rest(c, {}, ""), ls);
  EXPECT_EQ(k2_call_opening_rest(c, {}, section + "<|tool_call_begin|>functions.l"),
            "s:1<|tool_call_argument_begin|>");
  EXPECT_EQ(k2_call_opening_rest(c, think, "<think>"), "</think>" + ls);
  EXPECT_EQ(k2_call_opening_rest(c, {}, ls), std::nullopt);       // open already: the parser has it
  EXPECT_EQ(k2_call_opening_rest(c, {}, "hello"), std::nullopt);  // not on the way to the call
  // The same markup as the forced opening, so the two cannot drift.
  EXPECT_EQ(k2_call_opening_rest(c, think, ""), k2_forced_opening(c, think));
  c.tool_choice.kind = ToolChoice::Kind::kRequired;
  // Which of two tools is not known until the name is.
  EXPECT_EQ(k2_call_opening_rest(c, {}, section), std::nullopt);
  EXPECT_EQ(k2_call_opening_rest(c, {}, section + "<|tool_call_begin|>functions.n"),
            "ow:1<|tool_call_argument_begin|>");
  // Thinking: what counts is what follows </think>; a reply cut in its reasoning closes it first.
  c.tools.pop_back();
  EXPECT_EQ(k2_call_opening_rest(c, think, "<think>some reasoning"), "</think>" + ls);
  EXPECT_EQ(k2_call_opening_rest(c, think, "<think>some reasoning</think>" + section),
            "<|tool_call_begin|>functions.ls:1<|tool_call_argument_begin|>");
  EXPECT_EQ(k2_call_opening_rest(c, think, ""), empty_think + ls);
  // Thinking off: the empty channel was written in the model's place, the opening follows it.
  const K2GrammarOptions quiet{.think_tokens = true, .thinking = false};
  EXPECT_EQ(k2_call_opening_rest(c, quiet, empty_think), ls);
  c.tool_choice.kind = ToolChoice::Kind::kAuto;
  EXPECT_EQ(k2_call_opening_rest(c, {}, ""), std::nullopt);  // no call was promised
}

// Thinking off on a vocabulary with a think channel: the channel is written empty in the
// model's place and the grammar starts after it, with no reasoning to hold.
TEST(Constraint, K2ThinkingOffWritesTheThinkChannelEmpty) {
  Conversation c = k2_tools_request();
  c.tool_choice.kind = ToolChoice::Kind::kRequired;
  c.tool_choice.parallel = false;
  const K2GrammarOptions quiet{.think_tokens = true, .thinking = false};
  EXPECT_EQ(k2_forced_opening(c, quiet), "<think></think>");
  EXPECT_EQ(k2_forced_opening(c, {.think_tokens = true}), "");
  EXPECT_EQ(k2_forced_opening(c, {.thinking = false}), "");  // no channel to write
  const std::string calls = "<|tool_calls_section_begin|>" + kK2Ls + kK2End;
  EXPECT_TRUE(k2_grammar_takes(k2_reply_grammar(c, quiet), calls, true));
  EXPECT_FALSE(k2_grammar_takes(k2_reply_grammar(c, quiet), "<think>plan</think>" + calls, true));
  c.tool_choice = {ToolChoice::Kind::kNamed, "ls", true};
  EXPECT_EQ(k2_forced_opening(c, quiet), k2_forced_opening(c, {.think_tokens = true}));
}

// response_format beside tools under "auto": the value or calls; under "none" the value only.
TEST(Constraint, K2ResponseFormatWithToolsAllowsTheValueOrCalls) {
  Conversation c = k2_tools_request();
  c.response_format = {
      ResponseFormat::Kind::kJsonSchema,
      R"({"type":"object","properties":{"answer":{"type":"string"}},"required":["answer"]})"};
  const std::string value = "{\"answer\":\"hi\"}<|im_end|>";
  const std::string calls = "<|tool_calls_section_begin|>" + kK2Ls + kK2End;
  auto with_tools = k2_reply_grammar(c, {});
  EXPECT_TRUE(k2_grammar_takes(with_tools, value));
  EXPECT_TRUE(k2_grammar_takes(with_tools, calls));
  EXPECT_FALSE(k2_grammar_takes(with_tools, "{\"answer\":1}<|im_end|>"));
  c.tool_choice.kind = ToolChoice::Kind::kNone;
  auto no_calls = k2_reply_grammar(c, {});
  EXPECT_TRUE(k2_grammar_takes(no_calls, value));
  EXPECT_FALSE(k2_grammar_takes(no_calls, calls));
  c.response_format = {};
  EXPECT_EQ(k2_reply_grammar(c, {}), nullptr);
}

}  // namespace
}  // namespace waste
