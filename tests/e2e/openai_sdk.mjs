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

// A named tool_choice: the reply is a call of that function (its arguments come from the model,
// which here is noise, so only their JSON form is checked).
const named = { type: "function", function: { name: "get_weather" } };
const forced = await client.chat.completions.create({
  model, messages: [{ role: "user", content: "Weather in Paris?" }], tools, tool_choice: named,
  max_tokens: 80,
});
const call = forced.choices[0].message.tool_calls?.[0];
assert.ok(call, JSON.stringify(forced));
assert.equal(call.type, "function");
assert.equal(call.function.name, "get_weather");
assert.match(call.id, /^call_/);
assert.equal(typeof JSON.parse(call.function.arguments), "object");

const forcedStream = await client.chat.completions.create({
  model, messages: [{ role: "user", content: "Weather in Paris?" }], tools, tool_choice: named,
  max_tokens: 80, stream: true,
});
const deltas = [];
for await (const chunk of forcedStream)
  for (const tc of chunk.choices[0]?.delta?.tool_calls ?? []) deltas.push(tc);
assert.ok(deltas.length >= 1, "tool-call deltas");
assert.equal(deltas[0].index, 0);
assert.match(deltas[0].id, /^call_/);
assert.equal(deltas[0].function.name, "get_weather");
for (const d of deltas.slice(1)) assert.equal(d.id, undefined, "id only in the first delta");
const args = deltas.map((d) => d.function?.arguments ?? "").join("");
assert.equal(typeof JSON.parse(args), "object", args);
console.log("openai sdk: ok");
