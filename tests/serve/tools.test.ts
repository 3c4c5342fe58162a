// Tool calling (OpenAI `tools` / `tool_choice`, llm/tools.ts and llm/serve/calls.ts): which syntax a template
// teaches, replies read back into calls (and text that is not calls left as text), the streamed hold-back, the
// grammar of a required or named choice (xgrammar accepts exactly the calls of the given tools), a conversation
// with calls and results rendered through a template, and the server end to end on the JS device: stories260K with
// the Hermes and Llama 3 test templates (tests/serve/templates, written for these tests) and tool_choice required /
// named, through the official `openai` client, streamed and not, each call's arguments valid against its schema; and
// every bad tools request answered with a 400 naming the field.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { Engine } from "../../backends/executor.ts";
import { compileGraph, Driver } from "../../engine.ts";
import { JsDevice } from "../../backends/js/device.ts";
import { renderChat } from "../../llm/chat.ts";
import { xgrammar } from "../../llm/grammar.ts";
import { loadModel } from "../../llm/model.ts";
import { CallStream } from "../../llm/serve/calls.ts";
import { callGrammar, parseReply, toolSyntax } from "../../llm/tools.ts";
import { checkWeather, serveChat, TOOLS } from "./chat_server.ts";
import { MODEL_PATH } from "./setup.ts";

const here = (p: string) => fileURLToPath(new URL(p, import.meta.url));
const HERMES = readFileSync(here("./templates/hermes.jinja"), "utf8");
const LLAMA3 = readFileSync(here("./templates/llama3.jinja"), "utf8");

const ASK = [{ role: "user" as const, content: "Weather?" }];

test("tools: the syntax a template teaches", () => {
  assert.equal(toolSyntax(HERMES), "hermes");
  assert.equal(toolSyntax(LLAMA3), "llama3");
  assert.equal(toolSyntax(undefined), undefined);
  // templates without tools (the family fixtures') teach none
  for (const f of ["llama", "qwen2", "phi3", "gemma2"]) {
    const cfg = JSON.parse(readFileSync(here(`../families/fixtures/${f}/tokenizer_config.json`), "utf8"));
    assert.equal(toolSyntax(cfg.chat_template), undefined, f);
  }
  assert.equal(toolSyntax("<|start_header_id|>{{ m.content }}<|eot_id|>"), undefined);
});

test("tools: Hermes replies read into calls; what is not calls stays text", () => {
  const w = '{"name": "get_weather", "arguments": {"unit": "c", "days": 2}}';
  assert.deepEqual(parseReply("hermes", `<tool_call>\n${w}\n</tool_call>`), { content: null, calls: [{ name: "get_weather", arguments: '{"unit":"c","days":2}' }] });
  assert.deepEqual(parseReply("hermes", `Let me look.\n<tool_call>\n${w}\n</tool_call>\n<tool_call>\n{"name": "now", "arguments": {}}\n</tool_call>`), {
    content: "Let me look.",
    calls: [{ name: "get_weather", arguments: '{"unit":"c","days":2}' }, { name: "now", arguments: "{}" }],
  });
  // the last block unclosed (generation stopped after the JSON), arguments written as a JSON text
  assert.deepEqual(parseReply("hermes", `<tool_call>\n{"name": "now", "arguments": "{\\"tz\\": \\"UTC\\"}"}`), { content: null, calls: [{ name: "now", arguments: '{"tz":"UTC"}' }] });
  for (const t of ["plain words", `<tool_call>\n{"name": "now", "arguments": {}`, `<tool_call>\n{"arguments": {}}\n</tool_call>`, `<tool_call>\n{"name": "now", "arguments": [1]}\n</tool_call>`, `<tool_call>\n{"name": "", "arguments": {}}\n</tool_call>`]) {
    assert.deepEqual(parseReply("hermes", t), { content: t, calls: [] }, t);
  }
});

test("tools: Llama 3 JSON replies read into calls; text stays text", () => {
  const one = '{"name": "get_weather", "parameters": {"unit": "f", "days": 1}}';
  const call = { name: "get_weather", arguments: '{"unit":"f","days":1}' };
  assert.deepEqual(parseReply("llama3", ` ${one}`), { content: null, calls: [call] });
  assert.deepEqual(parseReply("llama3", `<|python_tag|>${one}`), { content: null, calls: [call] });
  assert.deepEqual(parseReply("llama3", `[${one}, {"name": "now", "parameters": {}}]`), { content: null, calls: [call, { name: "now", arguments: "{}" }] });
  assert.deepEqual(parseReply("llama3", `${one}; {"name": "now", "parameters": {}}`), { content: null, calls: [call, { name: "now", arguments: "{}" }] });
  for (const t of ["The weather is fine.", '{"name": "now"', '{"text": "hi"}', "[1, 2]"]) assert.deepEqual(parseReply("llama3", t), { content: t, calls: [] }, t);
});

test("tools: streamed text is held only while it may start a call", () => {
  const h = new CallStream("hermes");
  assert.equal(h.push("Hello <to"), "Hello ");
  assert.equal(h.push("ol_call>\n{\"name\": \"now\", "), "");
  assert.equal(h.push("\"arguments\": {}}\n</tool_call>"), "");
  const end = h.end();
  assert.equal(end.content, "");
  assert.equal(end.calls.length, 1);
  assert.match(end.calls[0].id, /^call_[A-Za-z0-9]{24}$/);
  assert.deepEqual(end.calls[0].function, { name: "now", arguments: "{}" });
  // a held prefix that never became a call comes out at the end
  const t = new CallStream("hermes");
  assert.equal(t.push("a <tool"), "a ");
  assert.deepEqual(t.end(), { content: "<tool", calls: [] });
  // llama3: leading space undecided, JSON held to the end, prose streams
  const l = new CallStream("llama3");
  assert.equal(l.push("  "), "");
  assert.equal(l.push("{\"name\": \"now\""), "");
  assert.deepEqual(l.end(), { content: '  {"name": "now"', calls: [] });
  const p = new CallStream("llama3");
  assert.equal(p.push(" It"), " It");
  assert.equal(p.push(" rains."), " rains.");
  assert.deepEqual(p.end(), { content: "", calls: [] });
});

test("tools: the grammar of a required choice accepts exactly the tools' calls", async () => {
  const xg = await xgrammar();
  const accepts = async (g: { grammar: string; root: string }, s: string) => await xg.Testings.isGrammarAcceptString(await xg.Grammar.fromEBNF(g.grammar, g.root), s);
  const hp = await callGrammar("hermes", TOOLS, true), h1 = await callGrammar("hermes", TOOLS, false);
  const w = '<tool_call>\n{"name": "get_weather", "arguments": {"unit": "c", "days": 3}}\n</tool_call>';
  const n = '<tool_call>\n{"name": "now", "arguments": {}}\n</tool_call>';
  assert.equal(await accepts(hp, w), true);
  assert.equal(await accepts(hp, `${w}\n${n}`), true);
  assert.equal(await accepts(h1, w), true);
  assert.equal(await accepts(h1, `${w}\n${n}`), false); // parallel_tool_calls false: one call
  assert.equal(await accepts(hp, w.replace('"c"', '"k"')), false); // not in the enum
  assert.equal(await accepts(hp, w.replace("3", "12")), false); // above the maximum
  assert.equal(await accepts(hp, w.replace("get_weather", "get_time")), false); // no such tool
  assert.equal(await accepts(hp, n.replace("{}", '{"x": 1}')), false); // a function without parameters takes {}
  assert.equal(await accepts(hp, `Sure. ${w}`), false);
  const only = await callGrammar("hermes", [TOOLS[1]], false);
  assert.equal(await accepts(only, w), false);
  assert.equal(await accepts(only, n), true);
  const l = await callGrammar("llama3", TOOLS, true);
  assert.equal(await accepts(l, '{"name": "get_weather", "parameters": {"unit": "f", "days": 9}}'), true);
  assert.equal(await accepts(l, '{"name": "get_weather", "arguments": {"unit": "f", "days": 9}}'), false);
});

test("tools: a conversation with calls and their results renders through the template", () => {
  const m = loadModel(MODEL_PATH);
  try {
    m.chatTemplate = HERMES;
    const text = renderChat(m, [
      { role: "user", content: "Weather?" },
      { role: "assistant", content: null, tool_calls: [{ id: "call_1", type: "function", function: { name: "get_weather", arguments: '{"unit": "c", "days": 1}' } }] },
      { role: "tool", content: "sunny", tool_call_id: "call_1" },
    ], { tools: TOOLS });
    // the tools as JSON lines, the call's arguments as an object (not a JSON text inside a string), the result
    const listed = text.slice(text.indexOf("<tools>\n") + 8, text.indexOf("</tools>")).trim().split("\n");
    assert.deepEqual(listed.map((line) => JSON.parse(line)), TOOLS);
    assert.ok(text.includes('<tool_call>\n{"name": "get_weather", "arguments": {"unit": "c", "days": 1}}\n</tool_call>'), text);
    assert.ok(text.includes("<tool_response>\nsunny\n</tool_response>"), text);
    assert.ok(text.endsWith("<|im_start|>assistant\n"), text);
    assert.ok(!renderChat(m, [{ role: "user", content: "hi" }]).includes("<tools>"));
  } finally {
    m.close();
  }
});

test("tools in the library: Driver.chat renders them, callGrammar constrains the reply, parseReply reads it", async () => {
  const m = loadModel(MODEL_PATH);
  m.chatTemplate = HERMES;
  const driver = await Driver.open(m, new Engine(new JsDevice({}), { compile: compileGraph }), { ctx: 512, prefill: [64, 8] });
  try {
    const syntax = toolSyntax(m.chatTemplate)!;
    const r = await driver.chat([...ASK], { tools: TOOLS, format: await callGrammar(syntax, [TOOLS[0]], false), maxTokens: 130 });
    assert.equal(r.finish, "eos", r.text); // the grammar ends the reply: its only next token is the end
    const p = parseReply(syntax, r.text);
    assert.equal(p.content, null);
    assert.deepEqual(p.calls.map((c) => c.name), ["get_weather"]);
    checkWeather(p.calls[0].arguments);
  } finally {
    await driver.close();
    m.close();
  }
});

/** stories260K served on the JS device with `template` (undefined: the file's own, none). */
function serve(template: string | undefined) {
  const m = loadModel(MODEL_PATH);
  if (template !== undefined) m.chatTemplate = template;
  return serveChat(m, 512);
}

test("tools over HTTP (Hermes template, JS device): required and named choices give calls, streamed and not", async () => {
  const s = await serve(HERMES);
  try {
    const r = await s.client.chat.completions.create({ model: s.id, messages: ASK, tools: TOOLS, tool_choice: "required", parallel_tool_calls: false, max_tokens: 130, temperature: 0 });
    const c = r.choices[0];
    assert.equal(c.finish_reason, "tool_calls");
    assert.equal(c.message.content, null);
    assert.equal(c.message.tool_calls?.length, 1);
    const call = c.message.tool_calls![0];
    assert.equal(call.type, "function");
    assert.match(call.id, /^call_/);
    if (call.type !== "function") throw new Error("not a function call");
    if (call.function.name === "get_weather") checkWeather(call.function.arguments);
    else assert.deepEqual([call.function.name, call.function.arguments], ["now", "{}"]);

    const named = await s.client.chat.completions.create({ model: s.id, messages: ASK, tools: TOOLS, tool_choice: { type: "function", function: { name: "get_weather" } }, parallel_tool_calls: false, max_tokens: 130, temperature: 0 });
    const nc = named.choices[0].message.tool_calls![0];
    assert.equal(named.choices[0].finish_reason, "tool_calls");
    if (nc.type !== "function") throw new Error("not a function call");
    assert.equal(nc.function.name, "get_weather");
    checkWeather(nc.function.arguments);

    // streamed: the same call in one tool_calls delta, no content, finish tool_calls
    const stream = await s.client.chat.completions.create({ model: s.id, messages: ASK, tools: TOOLS, tool_choice: { type: "function", function: { name: "get_weather" } }, parallel_tool_calls: false, max_tokens: 130, temperature: 0, stream: true });
    let content = "", finish: string | null = null;
    const calls: { name?: string; arguments?: string; id?: string }[] = [];
    for await (const ch of stream) {
      const d = ch.choices[0];
      content += d.delta.content ?? "";
      for (const t of d.delta.tool_calls ?? []) calls[t.index] = { id: t.id, name: t.function?.name, arguments: t.function?.arguments };
      finish = d.finish_reason ?? finish;
    }
    assert.equal(content, "");
    assert.equal(finish, "tool_calls");
    assert.equal(calls.length, 1);
    assert.equal(calls[0].name, "get_weather");
    assert.equal(calls[0].arguments, nc.function.arguments); // greedy: the same call as unstreamed

    // a conversation carrying a call and its result is served (auto: the reply is text or calls, read either way)
    const after = await s.post({
      messages: [...ASK, { role: "assistant", content: null, tool_calls: [{ id: "call_1", type: "function", function: { name: "now", arguments: "{}" } }] }, { role: "tool", tool_call_id: "call_1", content: "noon" }],
      tools: TOOLS, max_tokens: 8, temperature: 0,
    });
    assert.equal(after.status, 200);
    const body = after.body;
    assert.ok(["length", "stop", "tool_calls"].includes(body.choices[0].finish_reason));
  } finally {
    await s.stop();
  }
});

test("tools over HTTP (Llama 3 template, JS device): a required choice gives its JSON call", async () => {
  const s = await serve(LLAMA3);
  try {
    const r = await s.client.chat.completions.create({ model: s.id, messages: ASK, tools: TOOLS, tool_choice: { type: "function", function: { name: "get_weather" } }, max_tokens: 100, temperature: 0 });
    const c = r.choices[0];
    assert.equal(c.finish_reason, "tool_calls");
    const call = c.message.tool_calls![0];
    if (call.type !== "function") throw new Error("not a function call");
    assert.equal(call.function.name, "get_weather");
    checkWeather(call.function.arguments);
  } finally {
    await s.stop();
  }
});

test("tools over HTTP: bad tools requests are 400s naming the field, and the server keeps serving", async () => {
  const s = await serve(HERMES);
  const plain = await serve(undefined); // no template: served with ChatML, which teaches no call syntax
  try {
    const msg = [{ role: "user", content: "x" }];
    const one = [{ type: "function", function: { name: "a" } }];
    const cases: [object, string][] = [
      [{ messages: msg, tool_choice: "required" }, "tool_choice"],
      [{ messages: msg, tools: [{ type: "function", function: { name: "a b" } }] }, "tools[0].function.name"],
      [{ messages: msg, tools: [...one, ...one] }, "tools[1].function.name"],
      [{ messages: msg, tools: [] }, "tools"],
      [{ messages: msg, tools: one, tool_choice: { type: "function", function: { name: "b" } } }, "tool_choice.function.name"],
      [{ messages: msg, tools: one, tool_choice: "sometimes" }, "tool_choice"],
      [{ messages: msg, tools: one, response_format: { type: "json_object" } }, "response_format"],
      [{ messages: msg, tools: one, grammar: 'root ::= "a"' }, "grammar"],
      [{ messages: msg, tools: [{ type: "function", function: { name: "a", parameters: { type: "object", properties: { x: { type: "nonsense" } } } } }], tool_choice: "required" }, "tools"],
      [{ messages: [{ role: "tool", content: "x" }] }, "messages[0].tool_call_id"],
      [{ messages: [{ role: "user", content: "x", tool_calls: [{ id: "c", type: "function", function: { name: "a", arguments: "{}" } }] }] }, "messages[0].tool_calls"],
      [{ messages: [{ role: "user" }] }, "messages[0].content"],
      [{ messages: msg, functions: [{ name: "a" }] }, "functions"],
    ];
    for (const [body, param] of cases) {
      const res = await s.post(body);
      const e = res.body.error;
      assert.equal(res.status, 400, JSON.stringify(body));
      assert.equal(e.param, param, JSON.stringify(body));
    }
    const res = await plain.post({ messages: msg, tools: one });
    assert.equal(res.status, 400);
    assert.deepEqual([res.body.error.code], ["unsupported_tools"]);
    // tool_choice none renders the tools and reads nothing back: fine without a call syntax
    const none = await plain.post({ messages: msg, tools: one, tool_choice: "none", max_tokens: 4, temperature: 0 });
    assert.equal(none.status, 200);
    assert.equal(typeof none.body.choices[0].message.content, "string");
    const ok = await s.post({ messages: msg, max_tokens: 4, temperature: 0 });
    assert.equal(ok.status, 200);
  } finally {
    await s.stop();
    await plain.stop();
  }
});
