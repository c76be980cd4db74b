// Python-compatible JSON: every expected string below is what CPython 3's json.dumps(json.loads(x))
// printed for the input (checked with python3 when the test was written), but for floats past a
// double's range, which keep the text they were given (python_json.h).

#include <gtest/gtest.h>
#include <simdjson.h>

#include <cmath>
#include <limits>
#include <string>

#include "engine/base/error.h"
#include "protocol/json/json_document.h"
#include "protocol/json/python_json.h"

namespace waste {
namespace {

std::string roundtrip(std::string_view json) {
  return py_dumps(py_loads(json), {});
}

std::string compact_sorted(std::string_view json, bool ensure_ascii = false) {
  return py_dumps(py_loads(json),
                  {.sort_keys = true, .compact = true, .ensure_ascii = ensure_ascii});
}

TEST(PythonJson, FloatsAsRepr) {
  const std::pair<const char*, const char*> cases[] = {
      {"0.1", "0.1"},
      {"1e-7", "1e-07"},
      {"1e21", "1e+21"},
      {"-0.0", "-0.0"},
      {"3.0", "3.0"},
      {"1e-05", "1e-05"},
      {"1.0", "1.0"},
      {"100000000000000000000.0", "1e+20"},
      {"1e16", "1e+16"},
      {"1e15", "1000000000000000.0"},
      {"0.0001", "0.0001"},
      {"0.00001", "1e-05"},
      {"123456789012345678.0", "1.2345678901234568e+17"},
      {"5e-324", "5e-324"},
      {"1e-320", "1e-320"},
      {"1.7976931348623157e308", "1.7976931348623157e+308"},
      {"1E2", "100.0"},
      {"100e-2", "1.0"},
      {"2.5e-3", "0.0025"},
      {"-1.5E+10", "-15000000000.0"},
      {"12345.678", "12345.678"},
      {"1e22", "1e+22"},
      {"9007199254740993.0", "9007199254740992.0"},
      {"0.30000000000000004", "0.30000000000000004"},
  };
  for (const auto& [in, want] : cases) EXPECT_EQ(roundtrip(in), want) << in;
}

TEST(PythonJson, FloatsPastADoubleKeepTheirTextAndTinyOnesBecomeZero) {
  // Python writes Infinity here: not JSON, and not what was sent.
  EXPECT_EQ(roundtrip("1e400"), "1e400");
  EXPECT_EQ(roundtrip("[-1E+400, 2.5e9999]"), "[-1E+400, 2.5e9999]");
  EXPECT_TRUE(std::isinf(py_loads("-1e400").number));
  EXPECT_EQ(roundtrip("1e-400"), "0.0");
  EXPECT_EQ(roundtrip("-1e-400"), "-0.0");
  EXPECT_EQ(roundtrip("[NaN, Infinity, -Infinity]"), "[NaN, Infinity, -Infinity]");
}

TEST(PythonJson, IntsKeepEveryDigit) {
  EXPECT_EQ(roundtrip("123456789012345678901234567890"), "123456789012345678901234567890");
  EXPECT_EQ(roundtrip("-98765432109876543210987654321"), "-98765432109876543210987654321");
  EXPECT_EQ(roundtrip("18446744073709551616"), "18446744073709551616");
  EXPECT_EQ(roundtrip("-0"), "0");
  EXPECT_EQ(roundtrip("-12"), "-12");
  EXPECT_EQ(roundtrip("[1e2, 1.5, 10]"), "[100.0, 1.5, 10]");
}

TEST(PythonJson, NestedKeysSortedRecursively) {
  EXPECT_EQ(compact_sorted(R"({"b":{"d":1,"c":[{"z":1,"y":2}]},"a":null})"),
            R"({"a":null,"b":{"c":[{"y":2,"z":1}],"d":1}})");
  // canonical_json is the encoder's deep sort + compact dump.
  EXPECT_EQ(canonical_json(R"( {"b": [ {"d": 1, "c": 2} ], "a": 1.50} )"),
            R"({"a":1.5,"b":[{"c":2,"d":1}]})");
}

TEST(PythonJson, UnicodeOrderAndEscaping) {
  const char* in = R"({"é":"ü","z":1,"Z":2,"\ud83d\ude00":3,"\uffff":4,"a":"\u2028\u2029/\u007f"})";
  // Keys sort by code point (so U+FFFF before U+1F600, unlike UTF-16 order).
  EXPECT_EQ(compact_sorted(in, false),
            "{\"Z\":2,\"a\":\"\u2028\u2029/\x7f\",\"z\":1,\"é\":\"ü\",\"\uffff\":4,\"😀\":3}");
  EXPECT_EQ(
      compact_sorted(in, true),
      R"({"Z":2,"a":"\u2028\u2029/\u007f","z":1,"\u00e9":"\u00fc","\uffff":4,"\ud83d\ude00":3})");
}

TEST(PythonJson, StringEscapes) {
  EXPECT_EQ(roundtrip(R"("\"\\\n\r\t\b\f\u0001\u001f\/x")"), R"("\"\\\n\r\t\b\f\u0001\u001f/x")");
}

TEST(PythonJson, DictSemanticsAndSeparators) {
  // A repeated key keeps its first place and takes the last value.
  EXPECT_EQ(roundtrip(R"({"a":1,"b":2,"a":3})"), R"({"a": 3, "b": 2})");
  EXPECT_EQ(roundtrip(R"({"k": [1, {"x": "y"}], "e": {}, "l": []})"),
            R"({"k": [1, {"x": "y"}], "e": {}, "l": []})");
  // Many keys (the indexed path) behave the same.
  std::string many = "{";
  for (int i = 0; i < 40; i++) many += "\"k" + std::to_string(i) + "\":" + std::to_string(i) + ",";
  many += "\"k3\":\"last\"}";
  PyJson v = py_loads(many);
  ASSERT_EQ(v.members.size(), 40u);
  EXPECT_EQ(v.members[3].key, "k3");
  EXPECT_EQ(v.members[3].value.text, "last");
}

TEST(PythonJson, RejectsWhatPythonRejects) {
  for (const char* bad : {"{", "[1,]", "{\"a\":1,}", "01", "1.", "-", "\"\\ud800\"", "\"\\udc00\"",
                          "\"a\x01\"", "[1] x", "tru", "{'a':1}", "\"\\x\"", "+1", "\"\xff\""}) {
    EXPECT_THROW(py_loads(bad), UsageError) << bad;
  }
  EXPECT_NO_THROW(py_loads(" \t\n[1]\r\n"));
}

TEST(PythonJson, ParseValueStopsAfterTheValue) {
  std::string_view text = R"(  {"a": [1, 2]} trailing)";
  std::size_t pos = 0;
  std::optional<PyJson> v = py_parse_value(text, pos);
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(text.substr(pos), " trailing");
  pos = 0;
  EXPECT_FALSE(py_parse_value("  ]", pos).has_value());
}

TEST(PythonJson, FromSimdjsonMatchesLoads) {
  const char* doc =
      R"({"b":[1,-2,18446744073709551615,-9223372036854775808,1.0,1e2,-0.0,-0,0.1],"a":{"é":true,"n":null,"s":"x\ny"},"b":"dup"})";
  json::Document parsed;
  ASSERT_EQ(parsed.parse(doc), simdjson::SUCCESS);
  const PyDumpStyle style{.sort_keys = true, .compact = false, .ensure_ascii = true};
  EXPECT_EQ(py_dumps(py_from_dom(parsed, parsed.root()), style), py_dumps(py_loads(doc), style));
}

// Numbers simdjson cannot hold come through the document as numbers with their text, and a
// string holding the same characters stays a string.
TEST(PythonJson, FromSimdjsonKeepsNumbersItCannotHold) {
  const char* doc =
      R"({"f":[1e400,-1e400,1E+400],"i":123456789012345678901234567890,"n":-999999999999999999999,"s":["1e400","123456789012345678901234567890"],"k":{"1e400":1e400}})";
  json::Document parsed;
  ASSERT_EQ(parsed.parse(doc), simdjson::SUCCESS);
  const PyDumpStyle style{.sort_keys = false, .compact = true, .ensure_ascii = false};
  const PyJson v = py_from_dom(parsed, parsed.root());
  EXPECT_EQ(py_dumps(v, style), doc);
  EXPECT_EQ(py_dumps(v, style), py_dumps(py_loads(doc), style));
  EXPECT_EQ(v.find("i")->type, PyJson::Type::kInt);
  EXPECT_EQ(v.find("f")->items[0].type, PyJson::Type::kFloat);
  EXPECT_EQ(v.find("s")->items[0].type, PyJson::Type::kString);
}

TEST(PythonJson, FloatTextDirectly) {
  EXPECT_EQ(py_float_text(0.0), "0.0");
  EXPECT_EQ(py_float_text(-0.0), "-0.0");
  EXPECT_EQ(py_float_text(1e16), "1e+16");
  EXPECT_EQ(py_float_text(9999999999999998.0), "9999999999999998.0");
  EXPECT_EQ(py_float_text(1.5e300), "1.5e+300");
  EXPECT_EQ(py_float_text(-2.5e-5), "-2.5e-05");
}

// ---- json::Document: simdjson's DOM with the numbers simdjson cannot hold -----------------------

simdjson::dom::element member(const json::Document& d, const char* key) {
  return d.root()[key].value();
}

TEST(JsonDocument, StandInsAreKnownByWhereTheyAreNotByWhatTheyHold) {
  json::Document d;
  ASSERT_EQ(d.parse(R"({"a":"x\"1e400","1e400":"1e400","b":1e400,"c":-999999999999999999999})"),
            simdjson::SUCCESS);
  EXPECT_EQ(d.big_number(member(d, "b")), "1e400");
  EXPECT_EQ(d.big_number(member(d, "c")), "-999999999999999999999");
  EXPECT_EQ(d.big_number(member(d, "1e400")), std::nullopt);
  EXPECT_EQ(d.big_number(member(d, "a")), std::nullopt);
  // In range: simdjson's own numbers, no stand-ins.
  ASSERT_EQ(d.parse("[18446744073709551615,-9223372036854775808,1e-400,1.7976931348623157e308]"),
            simdjson::SUCCESS);
  for (simdjson::dom::element e : simdjson::dom::array(d.root())) EXPECT_TRUE(e.is_number());
}

TEST(JsonDocument, MalformedTextStaysRefused) {
  json::Document d;
  for (const char* bad : {"[01]", "[1e400,01]", "[1.]", "{1e400:1}", "{\"a\":1e400", "[1e400 2]",
                          "[1e400e5]", "[--1]", "[\"1e400]"})
    EXPECT_NE(d.parse(bad), simdjson::SUCCESS) << bad;
}

TEST(JsonDocument, MinifyWritesNumbersAsGiven) {
  json::Document d;
  const char* text = R"([1e400,{"k":-123456789012345678901234567890,"s":"1e400"},1.5,"a\nb"])";
  ASSERT_EQ(d.parse(text), simdjson::SUCCESS);
  EXPECT_EQ(d.minify(d.root()), text);
}

TEST(JsonDocument, NumberValuesAreTheNearestDouble) {
  EXPECT_EQ(json::number_value("1e400"), HUGE_VAL);
  EXPECT_EQ(json::number_value("-1E+400"), -HUGE_VAL);
  EXPECT_EQ(json::number_value("123456789012345678901234567890"), 1.2345678901234568e29);
  EXPECT_EQ(json::number_value("1e-400"), 0.0);
  EXPECT_TRUE(std::signbit(json::number_value("-1e-400")));
  // Either side of the largest double's rounding boundary, a subnormal, and an exponent too long
  // for any integer type.
  EXPECT_EQ(json::number_value("1.7976931348623158e308"), std::numeric_limits<double>::max());
  EXPECT_EQ(json::number_value("1.7976931348623159e308"), HUGE_VAL);
  EXPECT_EQ(json::number_value("4.9e-324"), std::numeric_limits<double>::denorm_min());
  EXPECT_EQ(json::number_value("-0.5e-99999999999999999999"), 0.0);
  EXPECT_EQ(json::number_value("0.1"), 0.1);
  EXPECT_TRUE(json::integer_text("-99999999999999999999"));
  EXPECT_FALSE(json::integer_text("1e400"));
}

}  // namespace
}  // namespace waste
