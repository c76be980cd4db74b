// Structured outputs through the libraries people use, with zod 4 schemas as they write them:
// the openai SDK's zodResponseFormat + parse, the Vercel AI SDK's generateText/generateObject (its
// chat provider) and LangChain's withStructuredOutput. Each result is checked by zod itself, and a
// tool_choice "required" request through the AI SDK must call a tool. The daemon runs on
// random weights with thinking off; every string is bounded so that replies finish.
// Usage: node structured_sdks.mjs BASE_URL. Exits non-zero on failure.
import OpenAI from "openai";
import { zodResponseFormat } from "openai/helpers/zod";
import { createOpenAI } from "@ai-sdk/openai";
import { generateObject, generateText, Output, tool } from "ai";
import { ChatOpenAI } from "@langchain/openai";
import { z } from "zod";
import assert from "node:assert/strict";

const baseURL = process.argv[2];
const apiKey = "test-key";

// What zod 4 writes by default for these: format + pattern on strings, propertyNames on a
// record, a discriminated union (oneOf with const tags), multipleOf, ±2^53 integer bounds.
const Contact = z.object({
  email: z.string().email().max(24),
  id: z.string().uuid(),
  day: z.string().date(),
  at: z.string().datetime(),
  kind: z.enum(["a", "b"]),
  n: z.number().int().multipleOf(5).gt(0).lt(100),
  tags: z.array(z.string().min(1).max(5)).max(3),
  pet: z.discriminatedUnion("type", [
    z.object({ type: z.literal("cat"), lives: z.number().int().min(0).max(9) }),
    z.object({ type: z.literal("dog"), good: z.boolean() }),
  ]),
  note: z.string().max(12).nullable(),
});
// Records join for LangChain only: the openai SDK's strict mode refuses them, and the AI SDK
// drops propertyNames before sending, which leaves random weights free to write keys forever.
const WithRecords = Contact.extend({ flags: z.record(z.enum(["x", "y"]), z.boolean()) });
const messages = [{ role: "user", content: "Make up a contact." }];

// 1. The official SDK: zodResponseFormat, parsed and validated by the SDK.
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 120000 });
const model = (await client.models.list()).data[0].id;
for (let seed = 0; seed < 3; seed++) {
  const done = await client.chat.completions.parse({
    model, messages, seed, temperature: 1, max_tokens: 400,
    response_format: zodResponseFormat(Contact, "contact"),
  });
  const choice = done.choices[0];
  assert.equal(choice.finish_reason, "stop", JSON.stringify(choice));
  Contact.parse(choice.message.parsed);
}

// 2. The AI SDK through its chat-completions provider: generateText with an object output, and
// the older generateObject.
const provider = createOpenAI({ baseURL, apiKey });
for (let seed = 0; seed < 3; seed++) {
  const settings = { model: provider.chat(model), prompt: "Make up a contact.", seed,
                     temperature: 1, maxOutputTokens: 400, maxRetries: 0 };
  const { output } = await generateText({ ...settings, output: Output.object({ schema: Contact }) });
  Contact.parse(output);
  const { object } = await generateObject({ ...settings, schema: Contact });
  Contact.parse(object);
}

// 3. LangChain's withStructuredOutput (json_schema and function calling).
const chat = new ChatOpenAI({
  model, apiKey, configuration: { baseURL }, temperature: 1, maxTokens: 1200, maxRetries: 0,
});
for (const method of ["jsonSchema", "functionCalling"]) {
  const out = await chat.withStructuredOutput(WithRecords, { method, name: "contact" })
    .invoke("Make up a contact.");
  WithRecords.parse(out);
}

// 4. tool_choice "required" through the AI SDK: a call, no text (else ToolChoiceViolationError).
for (let seed = 0; seed < 3; seed++) {
  const result = await generateText({
    model: provider.chat(model), prompt: "Weather in Paris?", seed, temperature: 1,
    maxOutputTokens: 300, maxRetries: 0, toolChoice: "required",
    // One call, so random weights do not spend the budget on eight.
    providerOptions: { openai: { parallelToolCalls: false } },
    tools: {
      weather: tool({
        description: "weather for a city",
        inputSchema: z.object({ city: z.string().max(8), days: z.number().int().min(1).max(7) }),
      }),
    },
  });
  assert.equal(result.finishReason, "tool-calls", JSON.stringify(result.response.body));
  assert.equal(result.toolCalls.length, 1, JSON.stringify(result.response.body));
  assert.equal(result.text, "");
  for (const call of result.toolCalls)
    z.object({ city: z.string().max(8), days: z.number().int().min(1).max(7) }).parse(call.input);
}

console.log("structured sdks: ok");
