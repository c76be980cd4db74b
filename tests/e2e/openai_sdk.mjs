// Drives `waste serve` with the official OpenAI Node SDK: chat, streaming with usage, and a
// request that declares tools. Usage: node openai_sdk.mjs BASE_URL. Exits non-zero on failure.
import OpenAI from "openai";
import assert from "node:assert/strict";

const client = new OpenAI({ baseURL: process.argv[2], apiKey: "test-key", maxRetries: 0, timeout: 60000 });

const models = await client.models.list();
const model = models.data[0].id;
assert.ok(model, "a model id");

const chat = await client.chat.completions.create({
  model,
  messages: [{ role: "user", content: "Hello from the SDK" }],
  max_tokens: 6,
  temperature: 0,
});
assert.equal(chat.object, "chat.completion");
assert.equal(chat.choices[0].message.role, "assistant");
assert.equal(chat.usage.completion_tokens, 6);
assert.ok(chat.usage.prompt_tokens > 0);

const stream = await client.chat.completions.create({
  model,
  messages: [{ role: "user", content: "Hello from the SDK" }],
  max_tokens: 6,
  temperature: 0,
  stream: true,
  stream_options: { include_usage: true },
});
let chunks = 0, usage = null, finish = null, reasoning = "", content = "";
for await (const chunk of stream) {
  chunks++;
  if (chunk.usage) usage = chunk.usage;
  const choice = chunk.choices[0];
  if (!choice) continue;
  if (choice.finish_reason) finish = choice.finish_reason;
  content += choice.delta.content ?? "";
  reasoning += choice.delta.reasoning_content ?? "";
}
assert.ok(chunks >= 3, `chunks: ${chunks}`);
assert.equal(finish, "length");
assert.equal(usage.completion_tokens, 6);
assert.equal(content + reasoning,
             (chat.choices[0].message.content ?? "") + (chat.choices[0].message.reasoning_content ?? ""));

const tools = [{
  type: "function",
  function: {
    name: "get_weather",
    description: "Weather in a city",
    parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
  },
}];
const withTools = await client.chat.completions.create({
  model,
  messages: [{ role: "user", content: "Weather in Paris?" }],
  tools,
  tool_choice: "auto",
  max_tokens: 4,
});
assert.ok(["length", "stop", "tool_calls"].includes(withTools.choices[0].finish_reason));
console.log("openai sdk: ok");
