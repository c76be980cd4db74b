// What a chat template consumes and produces. A template turns a ChatRequest (an OpenAI chat
// body, parsed once, independent of HTTP) into Segments; each segment is tokenized on its own,
// markup with specials allowed and text with specials disabled, so client text can never forge
// a control token, and segments are never merged (BPE is not associative).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "engine/tokenizer.h"

namespace waste {

struct Segment {
  std::string text;
  bool is_markup = false;

  bool operator==(const Segment&) const = default;
};

// Each segment through its own entry point (encode_markup or encode_text), concatenated.
std::vector<TokenId> tokenize_segments(const Tokenizer& tok, const std::vector<Segment>& segments);

struct ContentPart {
  enum class Kind { kText, kImage };
  Kind kind = Kind::kText;
  std::string text;       // kText
  std::string image_ref;  // kImage: the part's url (or path / data), as the client sent it
};

// OpenAI message content: null, a string, or a list of parts.
using MessageContent = std::variant<std::monostate, std::string, std::vector<ContentPart>>;

struct ToolCall {
  // How `arguments` arrived. The K3 encoder renders an object and a string differently (an
  // object's values are re-dumped, a string's are kept as written), so the form is kept.
  enum class ArgumentsForm { kNone, kString, kObject };

  std::optional<std::string> id;
  std::string name;
  ArgumentsForm form = ArgumentsForm::kNone;
  std::string arguments;  // kString: as sent; kObject: the object as compact JSON text
};

enum class Role { kSystem, kUser, kAssistant, kTool };

struct ChatMessage {
  Role role = Role::kUser;  // "developer" arrives as kSystem
  MessageContent content;
  std::optional<std::string> name;
  // assistant: the calls it made.
  std::vector<ToolCall> tool_calls;
  // assistant: its reasoning, from `reasoning_content`, else the alias `reasoning` (K3 re-renders
  // it in the think channel of history turns).
  std::string reasoning_content;
  // tool: the call it answers (`tool_call_id`, else the message's `id`) and K3's explicit
  // function name field `tool`.
  std::optional<std::string> tool_call_id;
  std::optional<std::string> tool;
  // system: tools declared mid-conversation (K3's dynamic declaration), each as compact JSON.
  std::vector<std::string> tools;
};

struct ToolChoice {
  enum class Kind { kAuto, kNone, kRequired, kNamed };
  Kind kind = Kind::kAuto;  // also when the field is absent
  std::string name;         // kNamed
};

struct ResponseFormat {
  enum class Kind { kText, kJsonObject, kJsonSchema };
  Kind kind = Kind::kText;  // also when the field is absent
  // kJsonSchema: the schema (json_schema.schema, else json_schema.json_schema, else json_schema
  // itself) as compact JSON; "null" when the request carried none.
  std::string schema;
};

struct ChatRequest {
  std::vector<ChatMessage> messages;
  std::vector<std::string> tools;  // each tool as compact JSON, in request order
  ToolChoice tool_choice;
  ResponseFormat response_format;
  // What the client asked for; unset means the server's default applies. `thinking_effort` is
  // one of "low", "high", "max".
  std::optional<bool> thinking;
  std::optional<std::string> thinking_effort;
};

// Parses an OpenAI chat-completions body. Fields the templates do not read (model, stream,
// sampling options, ...) are accepted and ignored. Throws UsageError naming the field for bad
// input, e.g. "messages[1].content[0].type: ...".
//
// Thinking is read from `chat_template_kwargs.thinking` / `.enable_thinking`, then `thinking`
// (a bool, or an object whose `type` is "enabled" / "disabled"), then `enable_thinking`. The
// effort from `chat_template_kwargs.thinking_effort`, `reasoning_effort`, `thinking_effort`,
// `reasoning.effort`, then `thinking.effort`: "none" turns thinking off; "medium" is refused
// because K3's encoder rejects it although its prompt advertises it.
ChatRequest parse_chat_request(std::string_view json);

}  // namespace waste
