// Mistral's tool calls (llm/tools.ts): `[TOOL_CALLS] [{...}]` (Mistral 7B v0.3, Nemo) and `[TOOL_CALLS]name[ARGS]{...}`
// (the v11 tokenizers' templates). The syntax found from a template, replies read into calls (either form, text
// that is not calls left as text), the stream held from the marker, the grammars (xgrammar accepts exactly the
// allowed calls; the v11 form's per-tool rules kept apart by prefixRules), and the server end to end on the JS device:
// the Qwen3 family fixture (the Mistral one has sliding-window attention, which a serving step does not take yet) with
// its tokenizer given the markers as control tokens (tests/serve/retoken.ts) and two
// test templates written for these tests (tests/serve/templates/mistral.jinja, mistral_args.jinja): required and named
// choices give calls with Mistral's 9-character ids, streamed equal to unstreamed, a marker the model writes shows as
// text, and a conversation carrying a call and its result is rendered (the template checks the id's length; a
// client's own ids are mapped to ones it takes).
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { Engine } from "../../backends/executor.ts";
import { JsDevice } from "../../backends/js/device.ts";
import { xgrammar } from "../../llm/grammar.ts";
import { CallStream } from "../../llm/serve/calls.ts";
import { callGrammar, mistralId, parseReply, prefixRules, syntaxMarkers, toolSyntax } from "../../llm/tools.ts";
import { renderChat } from "../../llm/chat.ts";
import { compileGraph, Driver } from "../../engine.ts";
import { checkWeather, serveChat, TOOLS } from "./chat_server.ts";
import { retokened } from "./retoken.ts";

const here = (p: string) => fileURLToPath(new URL(p, import.meta.url));
const MISTRAL = readFileSync(here("./templates/mistral.jinja"), "utf8");
const MISTRAL_ARGS = readFileSync(here("./templates/mistral_args.jinja"), "utf8");

const W = { name: "get_weather", arguments: '{"unit":"c","days":2}' }, N = { name: "now", arguments: "{}" };

test("tools (Mistral): the syntaxes its templates teach", () => {
  assert.equal(toolSyntax(MISTRAL), "mistral");
  assert.equal(toolSyntax(MISTRAL_ARGS), "mistral-args");
});

test("tools (Mistral): replies read into calls in either form; what is not calls stays text", () => {
  const w = '{"name": "get_weather", "arguments": {"unit": "c", "days": 2}}', n = '{"name": "now", "arguments": {}}';
  for (const syntax of ["mistral", "mistral-args"] as const) {
    assert.deepEqual(parseReply(syntax, `[TOOL_CALLS] [${w}, ${n}]`), { content: null, calls: [W, N] });
    assert.deepEqual(parseReply(syntax, `Checking. [TOOL_CALLS] [${w}]`), { content: "Checking.", calls: [W] });
    assert.deepEqual(parseReply(syntax, '[TOOL_CALLS]get_weather[ARGS]{"unit": "c", "days": 2}[TOOL_CALLS]now[ARGS]{}'), { content: null, calls: [W, N] });
    assert.deepEqual(parseReply(syntax, '[TOOL_CALLS]now[CALL_ID]a1b2c3d4e[ARGS]{}'), { content: null, calls: [N] });
    for (const t of ["plain words", "[TOOL_CALLS] nonsense", "[TOOL_CALLS]now", `[TOOL_CALLS] [${w}`, '[TOOL_CALLS]now[ARGS]{"a": ', "[TOOL_CALLS][ARGS]{}"]) {
      assert.deepEqual(parseReply(syntax, t), { content: t, calls: [] }, t);
    }
  }
});

test("tools (Mistral): streamed text is held from the marker on", () => {
  const s = new CallStream("mistral-args");
  assert.equal(s.push("Let me see. [TOOL_"), "Let me see. ");
  assert.equal(s.push("CALLS]now[ARGS]{}"), "");
  const e = s.end();
  assert.deepEqual([e.content, e.calls.map((c) => [c.function.name, c.function.arguments, c.id.length])], ["", [["now", "{}", 9]]]);
  const t = new CallStream("mistral");
  assert.equal(t.push("[TOOL"), "");
  assert.equal(t.push("S are fine"), "[TOOLS are fine");
});

test("tools (Mistral): the grammars accept exactly the allowed calls", async () => {
  const xg = await xgrammar();
  const accepts = async (g: { grammar: string; root: string }, s: string) => await xg.Testings.isGrammarAcceptString(await xg.Grammar.fromEBNF(g.grammar, g.root), s);
  const w = '{"name": "get_weather", "arguments": {"unit": "c", "days": 3}}', n = '{"name": "now", "arguments": {}}';
  const list = await callGrammar("mistral", TOOLS, true), one = await callGrammar("mistral", TOOLS, false);
  assert.equal(await accepts(list, `[TOOL_CALLS] [${w}]`), true);
  assert.equal(await accepts(list, `[TOOL_CALLS] [${w}, ${n}]`), true);
  assert.equal(await accepts(one, `[TOOL_CALLS] [${w}, ${n}]`), false); // parallel_tool_calls false: one call
  assert.equal(await accepts(list, `[TOOL_CALLS] [${w.replace('"c"', '"k"')}]`), false);
  assert.equal(await accepts(list, `[TOOL_CALLS] [${n.replace("{}", '{"x": 1}')}]`), false);
  assert.equal(await accepts(list, `Sure. [TOOL_CALLS] [${w}]`), false);
  const args = await callGrammar("mistral-args", TOOLS, true), arg1 = await callGrammar("mistral-args", TOOLS, false);
  const wa = '[TOOL_CALLS]get_weather[ARGS]{"unit": "f", "days": 9}', na = "[TOOL_CALLS]now[ARGS]{}";
  assert.equal(await accepts(args, wa), true);
  assert.equal(await accepts(args, wa + na), true);
  assert.equal(await accepts(arg1, wa + na), false);
  assert.equal(await accepts(args, '[TOOL_CALLS]now[ARGS]{"unit": "f", "days": 9}'), false); // another tool's arguments
  assert.equal(await accepts(args, '[TOOL_CALLS]get_time[ARGS]{}'), false);
  assert.equal(await accepts(args, wa.replace("9", "10")), false);
  // named: only that tool
  const named = await callGrammar("mistral-args", [TOOLS[1]], false);
  assert.deepEqual([await accepts(named, na), await accepts(named, wa)], [true, false]);
});

test("tools (Mistral): call ids its templates take: 9 letters and digits kept, others mapped the same way each time", () => {
  assert.equal(mistralId("a1B2c3D4e"), "a1B2c3D4e");
  for (const id of ["call_abcdefghijklmnopqrstuvwx", "c1", "abc-def-g", "ünïcødé id"]) {
    assert.match(mistralId(id), /^[A-Za-z0-9]{9}$/);
    assert.equal(mistralId(id), mistralId(id));
  }
  assert.notEqual(mistralId("c1"), mistralId("c2"));
  // the renderer without the mapping: mistral.jinja refuses the id
  const m = retokened("qwen3", MARKERS, MISTRAL);
  try {
    const conv = (id: string) => [...ASK, { role: "assistant", content: null, tool_calls: [{ id, type: "function" as const, function: { name: "now", arguments: "{}" } }] }, { role: "tool", content: "noon", tool_call_id: id }];
    assert.throws(() => renderChat(m, conv("call_1")), /Tool call IDs should be alphanumeric strings with length 9/);
    assert.ok(renderChat(m, conv(mistralId("call_1"))).includes(`"id": "${mistralId("call_1")}"`));
  } finally {
    m.close();
  }
});

test("tools (Mistral): prefixRules renames rules and their uses, never literals or classes", () => {
  const g = 'root ::= "root" [a-z\\]root] sub (", " sub)*\nsub ::= "\\"sub\\"" | root\n';
  assert.equal(prefixRules(g, "t0_"), 't0_root ::= "root" [a-z\\]root] t0_sub (", " t0_sub)*\nt0_sub ::= "\\"sub\\"" | t0_root\n');
});

const MARKERS = [{ content: "[TOOL_CALLS]", special: true }, { content: "[ARGS]", special: true }, { content: "[CALL_ID]", special: true }];

test("tools (Mistral) in the library: Driver.chat shows the markers (shownTokens), callGrammar constrains, parseReply reads", async () => {
  const m = retokened("qwen3", MARKERS, MISTRAL_ARGS);
  const driver = await Driver.open(m, new Engine(new JsDevice({}), { compile: compileGraph }), { ctx: 256, prefill: [64, 8] });
  try {
    const syntax = toolSyntax(m.chatTemplate)!;
    const r = await driver.chat(ASK, { tools: TOOLS, format: await callGrammar(syntax, [TOOLS[0]], false), shownTokens: syntaxMarkers(syntax), maxTokens: 150 });
    const p = parseReply(syntax, r.text);
    assert.deepEqual(p.calls.map((c) => c.name), ["get_weather"], r.text);
    checkWeather(p.calls[0].arguments);
    // the markers steered as control tokens: the grammar admits them (compiled with them shown), the text shows them
    const [tc, args] = ["[TOOL_CALLS]", "[ARGS]"].map((t) => m.tokenizer.tokenId(t)!);
    const logitBias = { [tc]: 100, [args]: 100 };
    const steered = await driver.chat(ASK, { tools: TOOLS, format: await callGrammar(syntax, [TOOLS[0]], false), shownTokens: syntaxMarkers(syntax), sampler: { temperature: 0, logitBias }, maxTokens: 150 });
    assert.deepEqual([steered.generatedIds[0], steered.generatedIds.includes(args)], [tc, true]);
    assert.deepEqual(parseReply(syntax, steered.text).calls.map((c) => c.name), ["get_weather"], steered.text);
    // unconstrained: shown, the control tokens are text; not shown, they are dropped as decoding always does
    const shown = await driver.chat(ASK, { shownTokens: ["[TOOL_CALLS]"], sampler: { temperature: 0, logitBias: { [tc]: 100 } }, maxTokens: 3 });
    const dropped = await driver.chat(ASK, { sampler: { temperature: 0, logitBias: { [tc]: 100 } }, maxTokens: 3 });
    assert.deepEqual([shown.text, dropped.text, dropped.generatedIds], ["[TOOL_CALLS]".repeat(3), "", [tc, tc, tc]]);
    await assert.rejects(driver.chat(ASK, { shownTokens: ["[NOT_A_TOKEN]"] }), /shownTokens: "\[NOT_A_TOKEN\]" is not a token/);
  } finally {
    await driver.close();
    m.close();
  }
});

const ASK = [{ role: "user" as const, content: "Weather?" }];

for (const [name, template] of [["mistral", MISTRAL], ["mistral-args", MISTRAL_ARGS]] as const) {
  test(`tools over HTTP (${name} template, JS device): calls with 9-character ids, streamed and not; markers shown as text`, async () => {
    const m = retokened("qwen3", MARKERS, template);
    const marker = m.tokenizer.tokenId("[TOOL_CALLS]")!;
    const s = await serveChat(m, 256);
    try {
      const named = { type: "function" as const, function: { name: "get_weather" } };
      const r = await s.client.chat.completions.create({ model: s.id, messages: ASK, tools: TOOLS, tool_choice: named, parallel_tool_calls: false, max_tokens: 150, temperature: 0 });
      const c = r.choices[0];
      assert.equal(c.finish_reason, "tool_calls");
      const call = c.message.tool_calls![0];
      if (call.type !== "function") throw new Error("not a function call");
      assert.match(call.id, /^[A-Za-z0-9]{9}$/);
      assert.equal(call.function.name, "get_weather");
      checkWeather(call.function.arguments);
      const req = await s.post({ messages: ASK, tools: TOOLS, tool_choice: "required", parallel_tool_calls: false, max_tokens: 150, temperature: 0 });
      assert.equal(req.body.choices[0].finish_reason, "tool_calls", JSON.stringify(req.body));
      // streamed: the same call as one delta
      const stream = await s.client.chat.completions.create({ model: s.id, messages: ASK, tools: TOOLS, tool_choice: named, parallel_tool_calls: false, max_tokens: 150, temperature: 0, stream: true });
      let content = "", args = "";
      for await (const ch of stream) {
        content += ch.choices[0]?.delta.content ?? "";
        for (const t of ch.choices[0]?.delta.tool_calls ?? []) args += t.function?.arguments ?? "";
      }
      assert.deepEqual([content, args], ["", call.function.arguments]);
      // auto, the marker steered first: it shows as text (a control token decoding would drop), and the random
      // model's rest is no call, so it stays content
      const auto = await s.post({ messages: ASK, tools: TOOLS, max_tokens: 4, temperature: 0, logit_bias: { [String(marker)]: 100 } });
      assert.ok(auto.body.choices[0].message.content.startsWith("[TOOL_CALLS][TOOL_CALLS]"), JSON.stringify(auto.body));
      // the call and its result go back through the template (mistral.jinja refuses an id that is not 9 characters:
      // a client's own ids are mapped to ones it takes, the call's and its result's alike)
      const turn = (id: string) => s.post({
        messages: [...ASK, { role: "assistant", content: null, tool_calls: [{ id, type: "function", function: { name: "now", arguments: "{}" } }] }, { role: "tool", tool_call_id: id, content: "noon" }],
        tools: TOOLS, max_tokens: 4, temperature: 0,
      });
      assert.equal((await turn(call.id)).status, 200);
      assert.equal((await turn("call_abcdefghijklmnopqrstuvwx")).status, 200);
    } finally {
      await s.stop();
    }
  });
}
