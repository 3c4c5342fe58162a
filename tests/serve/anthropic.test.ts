// Anthropic's Messages API (POST /v1/messages, /v1/messages/count_tokens; llm/serve/anthropic.ts) on the JS device
// with stories260K: a message equals the chat route's answer to the same conversation (text, usage), system given as
// text or blocks, stop_sequences and max_tokens as stop reasons, the event stream joined equal to the whole message,
// tool_use blocks (a required and a named tool, with the Hermes test template) and a tool_result turn, a thinking
// block (the think test template) and thinking disabled, count_tokens, x-api-key, and refused requests in
// Anthropic's error shape.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { loadModel } from "../../llm/model.ts";
import { checkWeather, serveChat } from "./chat_server.ts";
import { MODEL_PATH } from "./setup.ts";

const here = (p: string) => fileURLToPath(new URL(p, import.meta.url));
const HERMES = readFileSync(here("./templates/hermes.jinja"), "utf8");
const THINK = readFileSync(here("./templates/think.jinja"), "utf8");
const KEY = "k-123";

async function start(template?: string) {
  const m = loadModel(MODEL_PATH);
  if (template) m.chatTemplate = template;
  const s = await serveChat(m, 512, { apiKey: KEY });
  const post = async (path: string, body: unknown, headers: Record<string, string> = { "x-api-key": KEY }) => {
    const r = await fetch(s.base + path, { method: "POST", headers: { "content-type": "application/json", ...headers }, body: JSON.stringify(body) });
    return { status: r.status, type: r.headers.get("content-type"), text: await r.text() };
  };
  const json = async (path: string, body: unknown, headers?: Record<string, string>) => {
    const r = await post(path, body, headers);
    return { status: r.status, body: JSON.parse(r.text) };
  };
  return { ...s, post, json };
}

/** An event stream's events, in order. */
function events(text: string): { event: string; data: Record<string, unknown> }[] {
  return text.split("\n\n").filter((e) => e.trim()).map((e) => {
    const [ev, data] = e.split("\n");
    assert.ok(ev.startsWith("event: ") && data.startsWith("data: "), e);
    const d = JSON.parse(data.slice(6));
    assert.equal(d.type, ev.slice(7));
    return { event: ev.slice(7), data: d };
  });
}

const USER = [{ role: "user", content: "Once upon a time" }];

test("anthropic messages (JS device): text, usage, system, stop reasons, the stream, count_tokens, errors", async () => {
  const s = await start();
  try {
    const base = { model: s.id, max_tokens: 12, temperature: 0 };
    const a = await s.json("/v1/messages", { ...base, system: "Be brief.", messages: USER });
    assert.equal(a.status, 200, JSON.stringify(a.body));
    const chat = await s.json("/v1/chat/completions", { ...base, messages: [{ role: "system", content: "Be brief." }, ...USER] }, { authorization: `Bearer ${KEY}` });
    const m = a.body;
    assert.deepEqual([m.type, m.role, m.model, m.stop_reason, m.stop_sequence], ["message", "assistant", s.id, "max_tokens", null]);
    assert.match(m.id, /^msg_[A-Za-z0-9]{24}$/);
    assert.deepEqual(m.content, [{ type: "text", text: chat.body.choices[0].message.content }]);
    assert.deepEqual(m.usage, { input_tokens: chat.body.usage.prompt_tokens, output_tokens: 12 });
    // system as blocks: the same prompt
    const blocks = await s.json("/v1/messages", { ...base, system: [{ type: "text", text: "Be brief." }], messages: [{ role: "user", content: [{ type: "text", text: "Once upon a time" }] }] });
    assert.deepEqual(blocks.body.content, m.content);
    // a stop sequence from the greedy text: cut before it
    const words = m.content[0].text.trim().split(/\s+/);
    const stop = " " + words[Math.min(2, words.length - 1)];
    const cut = await s.json("/v1/messages", { ...base, system: "Be brief.", messages: USER, stop_sequences: [stop] });
    assert.deepEqual([cut.body.stop_reason, cut.body.stop_sequence], ["stop_sequence", stop]);
    assert.equal(cut.body.content[0].text, m.content[0].text.slice(0, m.content[0].text.indexOf(stop)));
    // streamed: the events in Anthropic's order, the text joined equal to the whole message
    const st = await s.post("/v1/messages", { ...base, system: "Be brief.", messages: USER, stream: true });
    assert.equal(st.type, "text/event-stream");
    const ev = events(st.text);
    assert.deepEqual([ev[0].event, ev[1].event, ev.at(-3)!.event, ev.at(-2)!.event, ev.at(-1)!.event], ["message_start", "content_block_start", "content_block_stop", "message_delta", "message_stop"]);
    const text = ev.filter((e) => e.event === "content_block_delta").map((e) => (e.data.delta as { text: string }).text).join("");
    assert.equal(text, m.content[0].text);
    assert.deepEqual(ev.at(-2)!.data, { type: "message_delta", delta: { stop_reason: "max_tokens", stop_sequence: null }, usage: { output_tokens: 12 } });
    // a max_tokens past the context is capped by the context left (clients send 32000 and more)
    const long = await s.json("/v1/messages", { ...base, max_tokens: 100_000, messages: USER });
    assert.equal(long.status, 200, JSON.stringify(long.body));
    assert.ok(long.body.usage.input_tokens + long.body.usage.output_tokens <= 512);
    // count_tokens: the prompt's length
    const n = await s.json("/v1/messages/count_tokens", { model: s.id, system: "Be brief.", messages: USER });
    assert.deepEqual(n.body, { input_tokens: m.usage.input_tokens });
    // refused, in Anthropic's error shape
    const bad: [unknown, number, string, Record<string, string>?][] = [
      [{ model: s.id, messages: USER }, 400, "invalid_request_error"], // no max_tokens
      [{ ...base, messages: [] }, 400, "invalid_request_error"],
      [{ ...base, messages: [{ role: "system", content: "x" }] }, 400, "invalid_request_error"],
      [{ ...base, temperature: 1.5, messages: USER }, 400, "invalid_request_error"],
      [{ ...base, model: "claude-3-haiku", messages: USER }, 404, "not_found_error"],
      [{ ...base, messages: USER }, 401, "authentication_error", {}],
      [{ ...base, messages: USER }, 401, "authentication_error", { "x-api-key": "wrong" }],
    ];
    for (const [body, status, type, headers] of bad) {
      const r = await s.json("/v1/messages", body, headers);
      assert.deepEqual([r.status, r.body.type, r.body.error?.type, typeof r.body.error?.message], [status, "error", type, "string"], JSON.stringify(body));
    }
    assert.equal((await s.json("/v1/messages", { ...base, messages: USER })).status, 200);
  } finally {
    await s.stop();
  }
});

test("anthropic messages (JS device, Hermes template): tool_use blocks, streamed and not; a tool_result turn", async () => {
  const s = await start(HERMES);
  try {
    const tools = [
      { name: "get_weather", input_schema: { type: "object", properties: { unit: { enum: ["c", "f"] }, days: { type: "integer", minimum: 1, maximum: 9 } }, required: ["unit", "days"] } },
    ];
    const ask = { model: s.id, max_tokens: 130, temperature: 0, messages: [{ role: "user", content: "Weather?" }], tools };
    const r = await s.json("/v1/messages", { ...ask, tool_choice: { type: "tool", name: "get_weather", disable_parallel_tool_use: true } });
    assert.equal(r.body.stop_reason, "tool_use", JSON.stringify(r.body));
    const use = r.body.content.find((b: { type: string }) => b.type === "tool_use");
    assert.match(use.id, /^toolu_[A-Za-z0-9]{24}$/);
    assert.equal(use.name, "get_weather");
    checkWeather(JSON.stringify(use.input));
    const any = await s.json("/v1/messages", { ...ask, tool_choice: { type: "any", disable_parallel_tool_use: true } });
    assert.equal(any.body.stop_reason, "tool_use");
    // streamed: one tool_use block whose input_json_delta is the same input
    const st = await s.post("/v1/messages", { ...ask, tool_choice: { type: "tool", name: "get_weather", disable_parallel_tool_use: true }, stream: true });
    const ev = events(st.text);
    const start = ev.find((e) => e.event === "content_block_start" && (e.data.content_block as { type: string }).type === "tool_use")!;
    const delta = ev.find((e) => e.event === "content_block_delta" && e.data.index === start.data.index)!;
    assert.deepEqual(JSON.parse((delta.data.delta as { partial_json: string }).partial_json), use.input);
    assert.equal((ev.at(-2)!.data.delta as { stop_reason: string }).stop_reason, "tool_use");
    // the call and its result go back through the template
    const turn = await s.json("/v1/messages", {
      ...ask, max_tokens: 4,
      messages: [...ask.messages, { role: "assistant", content: [{ type: "text", text: "Checking." }, { type: "tool_use", id: use.id, name: "get_weather", input: use.input }] },
        { role: "user", content: [{ type: "tool_result", tool_use_id: use.id, content: "sunny" }, { type: "text", text: "And tomorrow?" }] }],
    });
    assert.equal(turn.status, 200, JSON.stringify(turn.body));
  } finally {
    await s.stop();
  }
});

test("anthropic messages (JS device, think template): a thinking block; thinking disabled", async () => {
  const s = await start(THINK);
  try {
    const ask = { model: s.id, max_tokens: 8, temperature: 0, messages: USER };
    const r = await s.json("/v1/messages", ask);
    assert.deepEqual(r.body.content.map((b: { type: string }) => b.type), ["thinking"]);
    assert.ok(r.body.content[0].thinking.length > 0);
    const st = events((await s.post("/v1/messages", { ...ask, stream: true })).text);
    const thought = st.filter((e) => e.event === "content_block_delta").map((e) => (e.data.delta as { thinking: string }).thinking).join("");
    assert.equal(thought, r.body.content[0].thinking);
    const off = await s.json("/v1/messages", { ...ask, thinking: { type: "disabled" } });
    assert.deepEqual(off.body.content.map((b: { type: string }) => b.type), ["text"]);
  } finally {
    await s.stop();
  }
});
