// Drives `waste serve` with the official Anthropic TypeScript SDK (@anthropic-ai/sdk), as Claude
// Code and other Messages-API agents do: a model alias, create, the stream's event order, a
// forced tool_use and its tool_result round trip, countTokens, x-api-key, and both error shapes
// the SDK reads. Usage: node anthropic_sdk.mjs BASE_URL MODEL_ALIAS [FAMILY]: FAMILY is the served
// model's chat family, k3 (the default) or k2 (Kimi-Linear, which has no think channel). Exits
// non-zero on failure.
import Anthropic from "@anthropic-ai/sdk";
import assert from "node:assert/strict";

const [base, model, family = "k3"] = process.argv.slice(2);
const client = new Anthropic({ baseURL: base, apiKey: "test-key", maxRetries: 0, timeout: 60000 });
const hello = [{ role: "user", content: "Hello from the Anthropic SDK" }];
const quiet = { thinking: { type: "disabled" }, temperature: 0 };

const msg = await client.messages.create({ model, messages: hello, max_tokens: 8, ...quiet });
assert.equal(msg.type, "message");
assert.equal(msg.role, "assistant");
assert.equal(msg.content[0].type, "text");
assert.equal(msg.stop_reason, "max_tokens");
assert.equal(msg.usage.output_tokens, 8);

// The stream: named events in Anthropic's order, accumulated by the SDK into the same message.
const stream = client.messages.stream({ model, messages: hello, max_tokens: 8, ...quiet });
const order = [];
for await (const ev of stream) order.push(ev.type);
const streamed = await stream.finalMessage();
assert.equal(order[0], "message_start");
assert.equal(order.at(-1), "message_stop");
assert.equal(order.at(-2), "message_delta");
assert.ok(order.indexOf("content_block_start") < order.indexOf("content_block_delta"), order.join());
assert.ok(order.lastIndexOf("content_block_stop") < order.indexOf("message_delta"), order.join());
assert.equal(streamed.content[0].text, msg.content[0].text);
assert.equal(streamed.stop_reason, "max_tokens");
assert.equal(streamed.usage.output_tokens, 8);

// Thinking on: the think channel comes back as a thinking block (a model without one answers).
const thought = await client.messages.create({
  model, messages: hello, max_tokens: 8, temperature: 0, thinking: { type: "enabled", budget_tokens: 1024 },
});
assert.equal(thought.content[0].type, family === "k3" ? "thinking" : "text", JSON.stringify(thought.content));

// A forced tool_use, its input an object that fits the schema, then the tool_result round trip.
const tools = [{
  name: "get_weather",
  description: "Weather in a city",
  input_schema: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
}];
const call = await client.messages.create({
  model, max_tokens: 300, tools, tool_choice: { type: "tool", name: "get_weather" },
  messages: [{ role: "user", content: "Weather in Paris?" }], ...quiet,
});
const use = call.content.find((b) => b.type === "tool_use");
assert.ok(use, JSON.stringify(call.content));
assert.equal(use.name, "get_weather");
assert.equal(typeof use.input, "object");
if (call.stop_reason === "tool_use") assert.equal(typeof use.input.city, "string");
else assert.equal(call.stop_reason, "max_tokens");
const answer = await client.messages.create({
  model, max_tokens: 6, tools, ...quiet,
  messages: [
    { role: "user", content: "Weather in Paris?" },
    { role: "assistant", content: call.content },
    { role: "user", content: [{ type: "tool_result", tool_use_id: use.id, content: "sunny, 21 C" }] },
  ],
});
assert.equal(answer.type, "message");

// countTokens counts the prompt create() computed or restored.
const counted = await client.messages.countTokens({ model, messages: hello, ...quiet });
assert.equal(counted.input_tokens, msg.usage.input_tokens + msg.usage.cache_read_input_tokens);

// Errors in Anthropic's shape, as the SDK's error classes read them.
await assert.rejects(
  client.messages.create({ model: "claude-unknown", messages: hello, max_tokens: 2 }),
  (e) => e.status === 404 && e.error?.error?.type === "not_found_error",
);
await assert.rejects(
  client.messages.create({ model, max_tokens: 2, messages: [{ role: "user", content: [{ type: "video" }] }] }),
  (e) => e.status === 400 && e.error?.error?.type === "invalid_request_error" &&
         /messages\[0\]\.content\[0\]\.type/.test(e.message),
);
const wrongKey = new Anthropic({ baseURL: base, apiKey: "wrong", maxRetries: 0 });
await assert.rejects(
  wrongKey.messages.create({ model, messages: hello, max_tokens: 2 }),
  (e) => e.status === 401 && e.error?.error?.type === "authentication_error",
);
console.log("anthropic sdk: ok");
