// The schema corpus the structured-output tests share: hand-written API-style schemas and
// deterministic generated ones (nested objects and arrays with every leaf kind).
#pragma once

#include <string>
#include <vector>

#include "engine/base/rng.h"

namespace waste::test {

inline std::vector<std::string> api_schemas() {
  return {
      R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer","minimum":0,"maximum":150}},"required":["name","age"],"additionalProperties":false})",
      R"({"type":"object","properties":{"city":{"type":"string","minLength":2,"maxLength":20},"unit":{"enum":["celsius","fahrenheit"]}},"required":["city"]})",
      R"({"type":"array","items":{"type":"integer"},"minItems":2,"maxItems":5})",
      R"({"type":"object","properties":{"tags":{"type":"array","items":{"type":"string","maxLength":8},"maxItems":4}},"required":["tags"],"additionalProperties":false})",
      R"({"type":"object","properties":{"when":{"type":"string","format":"date"},"at":{"type":"string","format":"date-time"},"id":{"type":"string","format":"uuid"}},"required":["when","at","id"],"additionalProperties":false})",
      R"({"type":"object","properties":{"email":{"type":"string","format":"email"},"site":{"type":"string","format":"uri"},"t":{"type":"string","format":"time"}},"required":["email","site","t"]})",
      R"({"type":"string","pattern":"^[A-Z]{3}-[0-9]{2,4}$"})",
      R"({"type":"string","pattern":"ab+c"})",
      R"({"type":"number","minimum":-1.5,"exclusiveMaximum":2.25})",
      R"({"type":"integer","exclusiveMinimum":10,"maximum":12})",
      R"({"type":["string","null"],"maxLength":5})",
      R"({"anyOf":[{"type":"integer"},{"type":"object","properties":{"x":{"type":"boolean"}},"required":["x"],"additionalProperties":false}]})",
      R"({"oneOf":[{"type":"object","properties":{"kind":{"const":"a"},"v":{"type":"integer"}},"required":["kind","v"],"additionalProperties":false},{"type":"object","properties":{"kind":{"const":"b"},"w":{"type":"string"}},"required":["kind","w"],"additionalProperties":false}]})",
      R"({"allOf":[{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]},{"properties":{"b":{"type":"string","maxLength":3}},"required":["b"]}],"properties":{"a":true,"b":true},"additionalProperties":false})",
      R"({"$defs":{"node":{"type":"object","properties":{"value":{"type":"integer"},"children":{"type":"array","items":{"$ref":"#/$defs/node"},"maxItems":2}},"required":["value"],"additionalProperties":false}},"$ref":"#/$defs/node"})",
      R"({"definitions":{"leaf":{"type":"string","enum":["x","y"]}},"type":"array","items":{"$ref":"#/definitions/leaf"}})",
      R"({"type":"array","prefixItems":[{"type":"string"},{"type":"integer"}],"items":false})",
      R"({"$schema":"http://json-schema.org/draft-07/schema#","type":"array","items":[{"type":"boolean"}],"additionalItems":{"type":"null"},"maxItems":3})",
      R"({"const":{"fixed":[1,2,3]}})",
      R"({"enum":[1,12,123,"1"]})",
      R"({"type":"object","additionalProperties":{"type":"integer"}})",
      R"({"type":"object","properties":{"a":{"type":"string"}},"additionalProperties":{"type":"boolean"}})",
      R"({})",
      R"(true)",
      R"({"type":"object","properties":{"q\"uote":{"type":"string"},"uni\u00e9":{"type":"integer"}},"required":["q\"uote","uni\u00e9"],"additionalProperties":false})",
      R"({"type":"string","minLength":3,"maxLength":3})",
      R"({"type":"string","pattern":"^[a-z]+$","minLength":2,"maxLength":4})",
      R"({"type":"object","properties":{"items":{"type":"array","items":{"type":"object","properties":{"sku":{"type":"string","pattern":"^[A-Z0-9]{6}$"},"qty":{"type":"integer","minimum":1,"maximum":99},"price":{"type":"number","minimum":0}},"required":["sku","qty","price"],"additionalProperties":false},"minItems":1,"maxItems":3},"total":{"type":"number"}},"required":["items","total"],"additionalProperties":false})",
      R"({"type":"object","properties":{"ok":{"type":"boolean"},"error":{"type":["string","null"]}},"required":["ok","error"],"additionalProperties":false})",
      R"({"type":"integer","minimum":-5,"maximum":-3})",
      R"({"type":"number","minimum":0.25,"maximum":0.25})",
      // What zod 4's z.toJSONSchema writes by default (string formats with their pattern,
      // records with propertyNames, a discriminated union, multipleOf, 2^53 integer bounds).
      R"({"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object","properties":{"email":{"type":"string","format":"email","pattern":"^(?:[A-Za-z0-9_'+\\-]+\\.)*[A-Za-z0-9_'+\\-]*[A-Za-z0-9_+-]@(?:[A-Za-z0-9][A-Za-z0-9\\-]*\\.)+[A-Za-z]{2,}$"},"id":{"type":"string","format":"uuid","pattern":"^([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[1-8][0-9a-fA-F]{3}-[89abAB][0-9a-fA-F]{3}-[0-9a-fA-F]{12}|00000000-0000-0000-0000-000000000000|ffffffff-ffff-ffff-ffff-ffffffffffff)$"},"at":{"type":"string","format":"date-time","pattern":"^(?:(?:\\d\\d[2468][048]|\\d\\d[13579][26]|\\d\\d0[48]|[02468][048]00|[13579][26]00)-02-29|\\d{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12]\\d|3[01])|(?:0[469]|11)-(?:0[1-9]|[12]\\d|30)|(?:02)-(?:0[1-9]|1\\d|2[0-8])))T(?:(?:[01]\\d|2[0-3]):[0-5]\\d:[0-5]\\d(?:\\.\\d+)?(?:Z))$"},"day":{"type":"string","format":"date","pattern":"^(?:(?:\\d\\d[2468][048]|\\d\\d[13579][26]|\\d\\d0[48]|[02468][048]00|[13579][26]00)-02-29|\\d{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12]\\d|3[01])|(?:0[469]|11)-(?:0[1-9]|[12]\\d|30)|(?:02)-(?:0[1-9]|1\\d|2[0-8])))$"},"counts":{"type":"object","propertyNames":{"type":"string"},"additionalProperties":{"type":"integer","minimum":-9007199254740991,"maximum":9007199254740991}},"tags":{"type":"array","items":{"type":"string","minLength":1,"maxLength":5}},"kind":{"type":"string","enum":["a","b"]},"n":{"type":"integer","exclusiveMinimum":0,"exclusiveMaximum":100,"multipleOf":5},"opt":{"type":"string"},"keyed":{"type":"object","propertyNames":{"type":"string","enum":["x","y"]},"additionalProperties":{"type":"boolean"},"required":["x","y"]},"u":{"oneOf":[{"type":"object","properties":{"type":{"type":"string","const":"cat"},"meows":{"type":"number"}},"required":["type","meows"],"additionalProperties":false},{"type":"object","properties":{"type":{"type":"string","const":"dog"},"barks":{"type":"boolean"}},"required":["type","barks"],"additionalProperties":false}]}},"required":["email","id","at","day","counts","tags","kind","n","keyed","u"],"additionalProperties":false})",
      // Pydantic 2's tagged union: oneOf over $refs, a discriminator beside it.
      R"({"$defs":{"Cat":{"properties":{"pet_type":{"const":"cat","title":"Pet Type","type":"string"},"meows":{"title":"Meows","type":"integer"}},"required":["pet_type","meows"],"title":"Cat","type":"object"},"Dog":{"properties":{"pet_type":{"const":"dog","title":"Pet Type","type":"string"},"barks":{"title":"Barks","type":"number"}},"required":["pet_type","barks"],"title":"Dog","type":"object"}},"properties":{"pet":{"discriminator":{"mapping":{"cat":"#/$defs/Cat","dog":"#/$defs/Dog"},"propertyName":"pet_type"},"oneOf":[{"$ref":"#/$defs/Cat"},{"$ref":"#/$defs/Dog"}],"title":"Pet"},"n":{"title":"N","type":"integer"}},"required":["pet","n"],"title":"Model","type":"object"})",
      R"({"type":"object","additionalProperties":{"type":"integer"},"minProperties":2,"maxProperties":3})",
      R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"},"c":{"type":"integer"}},"required":["c"],"additionalProperties":false,"minProperties":2})",
      R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"},"c":{"type":"integer"}},"required":["c"],"maxProperties":1})",
      R"({"type":"object","propertyNames":{"pattern":"^[a-z]{2,4}$"},"additionalProperties":{"type":"boolean"},"minProperties":1})",
      R"({"type":"object","propertyNames":{"maxLength":3},"properties":{"long_name":{"type":"integer"},"ok":{"type":"integer"}},"additionalProperties":{"type":"null"}})",
      R"({"type":"object","properties":{"counts":{"type":"object","propertyNames":{"type":"string","maxLength":3},"additionalProperties":{"type":"integer","minimum":-9007199254740991,"maximum":9007199254740991}}},"required":["counts"],"additionalProperties":false})",
      R"({"type":"integer","multipleOf":7,"minimum":10,"maximum":40})",
      R"({"type":"number","multipleOf":3,"exclusiveMinimum":-10})",
      R"({"type":"string","format":"date","pattern":"^2024-1"})",
      R"({"type":"string","pattern":"^[a-c]+$","allOf":[{"pattern":"b"},{"maxLength":5}]})",
      R"({"type":"array","items":{"type":"string","minLength":2,"maxLength":4},"minItems":3,"maxItems":3})",
      R"({"$ref":"#/$defs/list","$defs":{"list":{"anyOf":[{"type":"null"},{"type":"object","properties":{"head":{"type":"integer"},"tail":{"$ref":"#/$defs/list"}},"required":["head","tail"],"additionalProperties":false}]}}})",
  };
}

// Deterministic random schemas: nested objects and arrays with every leaf kind.
class SchemaGen {
 public:
  explicit SchemaGen(uint64_t seed) : rng_(seed) {}
  std::string value(int depth) {
    int pick = (int)(rng_.next() % (depth > 2 ? 8 : 11));
    switch (pick) {
      case 0:
        return R"({"type":"string","maxLength":)" + std::to_string(1 + rng_.next() % 12) + "}";
      case 1:
        return R"({"type":"integer","minimum":)" + std::to_string((int)(rng_.next() % 50) - 25) +
               R"(,"maximum":)" + std::to_string(30 + rng_.next() % 1000) + "}";
      case 2:
        return R"({"type":"number"})";
      case 3:
        return R"({"type":"boolean"})";
      case 4:
        return R"({"enum":["red","green","blue",null,3]})";
      case 5: {
        const char* f[] = {"date", "time", "date-time", "email", "uuid", "uri"};
        return std::string(R"({"type":"string","format":")") + f[rng_.next() % 6] + "\"}";
      }
      case 6:
        return R"({"type":"string","pattern":"^[a-f0-9]{4,8}$"})";
      case 7:
        return R"({"type":["integer","null"]})";
      case 8:
        return object(depth + 1);
      case 9:
        return R"({"type":"array","items":)" + value(depth + 1) + R"(,"maxItems":)" +
               std::to_string(1 + rng_.next() % 4) + "}";
      default:
        return R"({"anyOf":[)" + value(depth + 1) + "," + value(depth + 1) + "]}";
    }
  }
  std::string object(int depth) {
    int n = 1 + (int)(rng_.next() % 4);
    std::string props, required;
    for (int i = 0; i < n; ++i) {
      std::string key = "k";
      key += std::to_string(i);
      if (i % 2) key += "_x";
      if (i) props += ',';
      props += "\"" + key + "\":" + value(depth);
      if (rng_.next() % 3) required += std::string(required.empty() ? "" : ",") + "\"" + key + "\"";
    }
    std::string add = rng_.next() % 4 ? "false" : "true";
    return R"({"type":"object","properties":{)" + props + R"(},"required":[)" + required +
           R"(],"additionalProperties":)" + add + "}";
  }

 private:
  Rng rng_;
};

// 80 generated object schemas, the same on every run.
inline std::vector<std::string> generated_schemas() {
  std::vector<std::string> out;
  SchemaGen gen(7);
  for (int i = 0; i < 80; ++i) out.push_back(gen.object(0));
  return out;
}

}  // namespace waste::test
