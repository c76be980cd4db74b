// The client configurations README.md shows, as tests/server_test.cpp reads them out of it, used
// the way each client uses them (only Codex itself runs in the suite, tests/agent_cli_test.cpp):
//   node readme_clients.mjs opencode FILE   opencode.json: the provider its "model" and
//     "small_model" name, through @ai-sdk/openai-compatible's options (chat completions at
//     baseURL with apiKey as a bearer token, the model's key as its id)
//   node readme_clients.mjs continue FILE   Continue's config.yaml, as JSON: its "openai" models
//     (chat completions at apiBase with apiKey, model as the id)
//   node readme_clients.mjs claude-code NAME...   Claude Code's environment: the Anthropic SDK
//     configured by ANTHROPIC_BASE_URL and ANTHROPIC_API_KEY alone, asking for each model NAME
// Each reply must carry the model name the request gave. Exits non-zero on failure.
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import assert from "node:assert/strict";
import fs from "node:fs";

const [kind, ...args] = process.argv.slice(2);
const hello = [{ role: "user", content: "Say hi" }];
const limits = { maxRetries: 0, timeout: 60000 };

async function chat(baseURL, apiKey, model) {
  const client = new OpenAI({ baseURL, apiKey, ...limits });
  const reply = await client.chat.completions.create({ model, messages: hello, max_tokens: 2 });
  assert.equal(reply.object, "chat.completion");
  assert.equal(reply.model, model);
}

if (kind === "opencode") {
  const config = JSON.parse(fs.readFileSync(args[0], "utf8"));
  for (const ref of [config.model, config.small_model]) {
    const [providerId, modelId] = ref.split("/");
    const provider = config.provider[providerId];
    assert.ok(provider, `no provider '${providerId}' for '${ref}'`);
    assert.equal(provider.npm, "@ai-sdk/openai-compatible");
    assert.ok(provider.models[modelId], `provider '${providerId}' lists no model '${modelId}'`);
    await chat(provider.options.baseURL, provider.options.apiKey, provider.models[modelId].id ?? modelId);
  }
} else if (kind === "continue") {
  const config = JSON.parse(fs.readFileSync(args[0], "utf8"));
  assert.equal(config.schema, "v1");
  assert.ok(config.models.length > 0, "no models");
  for (const m of config.models) {
    assert.equal(m.provider, "openai");
    assert.ok(m.roles.includes("chat"), `model '${m.name}' has no chat role`);
    await chat(m.apiBase, m.apiKey, m.model);
  }
} else if (kind === "claude-code") {
  assert.ok(process.env.ANTHROPIC_BASE_URL, "ANTHROPIC_BASE_URL is not set");
  const client = new Anthropic(limits);
  for (const model of args) {
    const msg = await client.messages.create({ model, messages: hello, max_tokens: 2 });
    assert.equal(msg.type, "message");
    assert.equal(msg.model, model);
  }
} else {
  throw new Error(`unknown client '${kind}' (opencode, continue or claude-code)`);
}
console.log(`readme ${kind}: ok`);
