// Drives `waste serve` with the official OpenAI Node SDK: chat, streaming with usage, a
// request that declares tools, and an image part (a PNG made here, sent as a data: URL). Usage:
// node openai_sdk.mjs BASE_URL [FAMILY]: FAMILY is the served model's chat family, k3 (the
// default: ids are call_…, images are seen) or k2 (Kimi-Linear: ids are the model's own
// functions.NAME:INDEX, images are refused). Exits non-zero on failure.
import OpenAI from "openai";
import assert from "node:assert/strict";
import zlib from "node:zlib";

const client = new OpenAI({ baseURL: process.argv[2], apiKey: "test-key", maxRetries: 0, timeout: 60000 });
const family = process.argv[3] ?? "k3";
const callId = family === "k2" ? /^functions\.get_weather:\d+$/ : /^call_/;

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
    // Bounded, so that a call the grammar holds to it ends within the replies' token budget.
    parameters: {
      type: "object", properties: { city: { type: "string", maxLength: 12 } }, required: ["city"],
      additionalProperties: false,
    },
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
assert.match(call.id, callId);
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
assert.match(deltas[0].id, callId);
assert.equal(deltas[0].function.name, "get_weather");
for (const d of deltas.slice(1)) assert.equal(d.id, undefined, "id only in the first delta");
const args = deltas.map((d) => d.function?.arguments ?? "").join("");
assert.equal(typeof JSON.parse(args), "object", args);
// An image, as the SDK sends it: a 64x48 RGB PNG encoded here (zlib from node, CRC-32 by hand).
function crc32(buf) {
  let c = ~0;
  for (const b of buf) {
    c ^= b;
    for (let k = 0; k < 8; k++) c = (c >>> 1) ^ (0xedb88320 & -(c & 1));
  }
  return ~c >>> 0;
}
function chunk(type, data) {
  const len = Buffer.alloc(4), crc = Buffer.alloc(4);
  len.writeUInt32BE(data.length);
  const body = Buffer.concat([Buffer.from(type, "latin1"), data]);
  crc.writeUInt32BE(crc32(body));
  return Buffer.concat([len, body, crc]);
}
function png(w, h) {
  const raw = Buffer.alloc((3 * w + 1) * h);
  for (let y = 0; y < h; y++)
    for (let x = 0; x < w; x++)
      raw.set([(x * 4) & 255, (y * 5) & 255, ((x ^ y) * 3) & 255], y * (3 * w + 1) + 1 + 3 * x);
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(w, 0);
  ihdr.writeUInt32BE(h, 4);
  ihdr.set([8, 2, 0, 0, 0], 8);
  return Buffer.concat([Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
                        chunk("IHDR", ihdr), chunk("IDAT", zlib.deflateSync(raw)),
                        chunk("IEND", Buffer.alloc(0))]);
}
const imageUrl = "data:image/png;base64," + png(64, 48).toString("base64");
if (family === "k2") {
  // A model without a vision tower refuses an image part by name.
  await assert.rejects(
    client.chat.completions.create({
      model, max_tokens: 2,
      messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: imageUrl } }] }],
    }),
    (e) => e.status === 400 && /image/.test(e.message),
  );
}
if (family === "k3") {
const seen = await client.chat.completions.create({
  model,
  messages: [{ role: "user", content: [
    { type: "text", text: "What is in this picture?" },
    { type: "image_url", image_url: { url: imageUrl } },
  ] }],
  max_tokens: 5,
  temperature: 0,
});
assert.equal(seen.object, "chat.completion");
assert.equal(seen.usage.completion_tokens, 5);
// 64x48 pads to 84x56: a 6x4 patch grid, 3x2 = 6 image positions, plus the media block's text.
assert.ok(seen.usage.prompt_tokens >= chat.usage.prompt_tokens + 6, JSON.stringify(seen.usage));

}
// A bad image is a 400 the SDK raises, naming the part.
await assert.rejects(
  client.chat.completions.create({
    model,
    messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: "data:image/png;base64,@@@@" } }] }],
    max_tokens: 2,
  }),
  (e) => e.status === 400 && /messages\[0\]\.content\[0\]/.test(e.message),
);
// logprobs and n as the SDK types them: two choices, each content token with its alternatives;
// streamed, the SDK's accumulated snapshot carries the logprobs too.
const scored = await client.chat.completions.create({
  model,
  messages: [{ role: "user", content: "Hello from the SDK" }],
  max_tokens: 6,
  temperature: 0.9,
  seed: 3,
  n: 2,
  logprobs: true,
  top_logprobs: 2,
  thinking: { type: "disabled" },
});
assert.equal(scored.choices.length, 2);
assert.deepEqual(scored.choices.map((c) => c.index), [0, 1]);
for (const c of scored.choices) {
  assert.ok(Array.isArray(c.logprobs.content), JSON.stringify(c));
  for (const t of c.logprobs.content) {
    assert.equal(typeof t.token, "string");
    assert.ok(t.logprob <= 0 && t.top_logprobs.length === 2, JSON.stringify(t));
  }
}
assert.equal(scored.usage.completion_tokens, 12);
const runner = client.chat.completions.stream({
  model,
  messages: [{ role: "user", content: "Hello from the SDK" }],
  max_tokens: 6,
  temperature: 0.9,
  seed: 3,
  logprobs: true,
  top_logprobs: 2,
  thinking: { type: "disabled" },
});
const final = await runner.finalChatCompletion();
assert.equal(final.choices[0].message.content, scored.choices[0].message.content);
assert.equal(final.choices[0].logprobs.content.length, scored.choices[0].logprobs.content.length);

// Legacy completions: echo and integer logprobs in their old shape.
const legacy = await client.completions.create({
  model, prompt: "Hello", max_tokens: 0, echo: true, logprobs: 1, temperature: 0,
});
assert.equal(legacy.choices[0].text, "Hello");
assert.equal(legacy.choices[0].logprobs.token_logprobs[0], null);
console.log("openai sdk: ok");
