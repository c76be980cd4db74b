// What every API's request becomes once parsed: the conversation, the tools the reply may call
// and the shape the reply must take. It is independent of the wire (chat completions, the
// Responses API, the Messages API each parse into it) and of the model family that renders it
// (prompt_templates/).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace waste {

struct ContentPart {
  enum class Kind { kText, kImage };
  Kind kind = Kind::kText;
  std::string text;       // kText
  std::string image_ref;  // kImage: the part's url (or path / data), as the client sent it
};

// Message content: none, a string, or a list of parts.
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

// A function the model may call, parsed once: its name and argument schema for the reply
// grammar, and the whole declaration as the client sent it for the prompt (K3 shows the model
// the declaration itself).
struct Tool {
  std::string name;         // a function name (is_function_name)
  std::string description;  // empty when none
  std::string parameters;   // the JSON Schema of the arguments, compact JSON; empty when none
  std::string declaration;  // the declaration object, compact JSON, keys and numbers as sent
};

struct ChatMessage {
  Role role = Role::kUser;  // "developer" arrives as kSystem
  MessageContent content;
  std::optional<std::string> name;
  // assistant: the calls it made.
  std::vector<ToolCall> tool_calls;
  // assistant: its reasoning (K3 re-renders it in the think channel of history turns).
  std::string reasoning_content;
  // tool: the call it answers and K3's explicit function name field `tool`.
  std::optional<std::string> tool_call_id;
  std::optional<std::string> tool;
  // system: tools declared mid-conversation (K3's dynamic declaration).
  std::vector<Tool> tools;
};

struct ToolChoice {
  enum class Kind { kAuto, kNone, kRequired, kNamed };
  Kind kind = Kind::kAuto;  // also when the request says nothing
  std::string name;         // kNamed
  bool parallel = true;     // parallel_tool_calls: a reply may make more than one call
};

struct ResponseFormat {
  enum class Kind { kText, kJsonObject, kJsonSchema };
  Kind kind = Kind::kText;  // also when the request says nothing
  // kJsonSchema: the schema as compact JSON; "null" when the request carried none.
  std::string schema;
};

struct Conversation {
  std::vector<ChatMessage> messages;
  std::vector<Tool> tools;  // in request order
  ToolChoice tool_choice;
  ResponseFormat response_format;
  // What the client asked for; unset means the server's default applies. `thinking_effort` is
  // one of "low", "high", "max".
  std::optional<bool> thinking;
  std::optional<std::string> thinking_effort;
};

// Function names go verbatim into call markup (K3 writes `tool="NAME"`), so only letters,
// digits, '_', '-' and '.' are allowed (OpenAI's alphabet, plus '.').
bool is_function_name(std::string_view name);

// Whether the reply reasons, for a family with a think channel: what the request asked, else
// `by_default`; never where the server forbids it (`allowed` false, `--thinking never`).
bool thinking_on(const Conversation& c, bool by_default, bool allowed);

// Whether some message has an image part.
bool has_images(const Conversation& c);

// An image part and where it is, for errors: "messages[i].content[j]".
struct ImagePart {
  std::string where;
  std::string ref;  // ContentPart::image_ref
  Role role = Role::kUser;
};
// The image parts of `c` in prompt order.
std::vector<ImagePart> image_parts(const Conversation& c);

}  // namespace waste
