// Drives `waste serve` with the official OpenAI SDK's Responses API, as Codex and other agents
// do: create, the stream's typed events in order, a forced function call and its
// function_call_output round trip, text.format json_schema, max_output_tokens -> incomplete
// (the cut item too, and a forced call cut before it opened), the request's settings echoed,
// a reasoning item, models.retrieve, and the error the SDK raises for a bad item.
// Usage: node responses_sdk.mjs BASE_URL [FAMILY]: FAMILY is the served model's chat family, k3
// (the default) or k2 (Kimi-Linear, which has no think channel). Exits non-zero on failure.
import OpenAI from "openai";
import assert from "node:assert/strict";

const client = new OpenAI({ baseURL: process.argv[2], apiKey: "test-key", maxRetries: 0, timeout: 60000 });
const family = process.argv[3] ?? "k3";
const model = (await client.models.list()).data[0].id;
assert.equal((await client.models.retrieve(model)).id, model);
await assert.rejects(client.models.retrieve("nope"), (e) => e.status === 404);
const quiet = { reasoning: { effort: "none" }, temperature: 0 };

const cut = await client.responses.create({ model, input: "Hello from Codex", max_output_tokens: 6, ...quiet });
assert.equal(cut.object, "response");
assert.equal(cut.status, "incomplete");
assert.equal(cut.incomplete_details.reason, "max_output_tokens");
assert.equal(cut.output[0].type, "message");
assert.equal(typeof cut.output_text, "string");  // the SDK's own helper over output_text parts
assert.equal(cut.usage.output_tokens, 6);
assert.equal(cut.output[0].status, "incomplete");  // the item the cut stopped
// What the request left out comes back as OpenAI's defaults.
assert.deepEqual([cut.top_p, cut.tools, cut.tool_choice, cut.parallel_tool_calls, cut.metadata, cut.text.format.type],
  [1, [], "auto", true, {}, "text"]);

// The stream: typed events with increasing sequence numbers, in the order clients wait for.
const events = [];
const stream = await client.responses.create({ model, input: "Hello from Codex", max_output_tokens: 6, stream: true, ...quiet });
for await (const ev of stream) events.push(ev);
const types = events.map((e) => e.type);
assert.deepEqual(types.slice(0, 4), ["response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"]);
assert.ok(types.includes("response.output_text.delta"), types.join());
assert.deepEqual(types.slice(-4), ["response.output_text.done", "response.content_part.done", "response.output_item.done", "response.incomplete"]);
events.forEach((e, i) => assert.equal(e.sequence_number, i));
assert.equal(events.at(-2).item.status, "incomplete");
const text = events.filter((e) => e.type === "response.output_text.delta").map((e) => e.delta).join("");
assert.equal(text, cut.output_text);
assert.equal(events.at(-1).response.output_text ?? text, text);

// The SDK's stream helper accumulates the same response.
const helper = client.responses.stream({ model, input: "Hello from Codex", max_output_tokens: 6, ...quiet });
const final = await helper.finalResponse();
assert.equal(final.output_text, cut.output_text);

// Thinking on: the think channel is a reasoning item with a summary part (a model without one
// answers with a message).
const thought = await client.responses.create({ model, input: "Hello", max_output_tokens: 6, reasoning: { effort: "low" }, temperature: 0 });
assert.equal(thought.output[0].type, family === "k3" ? "reasoning" : "message", JSON.stringify(thought.output));

// A forced function call, then its output sent back with the call.
const tools = [{ type: "function", name: "get_weather", description: "Weather in a city",
  parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } }];
const input = [{ role: "user", content: [{ type: "input_text", text: "Weather in Paris?" }] }];
const called = await client.responses.create({ model, input, tools, tool_choice: { type: "function", name: "get_weather" }, max_output_tokens: 300, ...quiet });
const call = called.output.find((o) => o.type === "function_call");
assert.ok(call, JSON.stringify(called.output));
assert.equal(call.name, "get_weather");
if (called.status === "completed") assert.equal(typeof JSON.parse(call.arguments).city, "string");
// The response repeats what the request set.
const echoed = await client.responses.create({ model, input, tools, tool_choice: "none", parallel_tool_calls: false,
  max_output_tokens: 2, top_p: 0.5, metadata: { run: "e2e" }, user: "u1", truncation: "auto", ...quiet });
assert.deepEqual(
  [echoed.tools, echoed.tool_choice, echoed.parallel_tool_calls, echoed.max_output_tokens, echoed.temperature,
    echoed.top_p, echoed.metadata, echoed.user, echoed.truncation, echoed.reasoning.effort],
  [tools, "none", false, 2, 0, 0.5, { run: "e2e" }, "u1", "auto", "none"]);
// A forced call cut before its opening was written keeps the call, with no arguments yet.
const cutCall = await client.responses.create({ model, input, tools, tool_choice: { type: "function", name: "get_weather" }, max_output_tokens: 1, ...quiet });
assert.deepEqual([cutCall.status, cutCall.output.at(-1)?.type, cutCall.output.at(-1)?.arguments, cutCall.output.at(-1)?.status],
  ["incomplete", "function_call", "{}", "incomplete"], JSON.stringify(cutCall.output));
const answered = await client.responses.create({ model, tools, max_output_tokens: 6, ...quiet,
  input: [...input, call, { type: "function_call_output", call_id: call.call_id, output: "sunny, 21 C" }] });
assert.equal(answered.object, "response");

// text.format json_schema holds the output to the schema.
const shaped = await client.responses.create({ model, input: "A city as JSON", max_output_tokens: 200, ...quiet,
  text: { format: { type: "json_schema", name: "city", strict: true,
    schema: { type: "object", properties: { city: { type: "string" } }, required: ["city"], additionalProperties: false } } } });
if (shaped.status === "completed") assert.equal(typeof JSON.parse(shaped.output_text).city, "string");
else assert.ok(shaped.output_text.startsWith("{"), shaped.output_text);

await assert.rejects(
  client.responses.create({ model, input: [{ type: "item_reference", id: "x" }] }),
  (e) => e.status === 400 && e.param === "input[0].type",
);
console.log("responses sdk: ok");
