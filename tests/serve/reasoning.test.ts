// A thinking model's reasoning as `reasoning_content` (llm/reasoning.ts, llm/serve/reply.ts): the tags a template
// writes, a reply split whole and streamed (every way of cutting the reply into pieces joins to the whole split),
// calls read after the block, a format's grammar held off inside the block (grammar.ts ThinkGate), and the server
// end to end on the JS device: stories260K with tests/serve/templates/think.jinja (a template written for these
// tests whose generation prompt opens a think block unless enable_thinking is false), reasoning_format and
// chat_template_kwargs per request, streamed equal to unstreamed; and the Qwen3 family fixture with its tokenizer
// given single-token <think> / </think> (the gate needs them), where logit_bias steers it through the block into
// the grammar. Bad requests are 400s naming the field.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { Engine } from "../../backends/executor.ts";
import { JsDevice } from "../../backends/js/device.ts";
import { compileGraph, Driver } from "../../engine.ts";
import { renderChat } from "../../llm/chat.ts";
import { compileFormat, Constraint } from "../../llm/grammar.ts";
import { loadModel, type ModelHandle } from "../../llm/model.ts";
import { opensInside, ReasoningStream, splitReasoning, thinkTags } from "../../llm/reasoning.ts";
import { replyOf, ReplyStream } from "../../llm/serve/reply.ts";
import { serveChat } from "./chat_server.ts";
import { retokened } from "./retoken.ts";
import { MODEL_PATH } from "./setup.ts";

const here = (p: string) => fileURLToPath(new URL(p, import.meta.url));
const THINK = readFileSync(here("./templates/think.jinja"), "utf8");
const TAGS = { open: "<think>", close: "</think>" };
const ASK = [{ role: "user", content: "Tell me a story." }];

test("reasoning: the tags a template writes, and a prompt that ends inside a block", () => {
  assert.deepEqual(thinkTags(THINK), TAGS);
  assert.equal(thinkTags(undefined), undefined);
  assert.equal(thinkTags("{{ messages[0].content }}"), undefined);
  assert.equal(thinkTags("<think> only opens"), undefined);
  assert.equal(opensInside("<|im_start|>assistant\n<think>\n", TAGS), true);
  assert.equal(opensInside("<|im_start|>assistant\n<think>\n\n</think>\n\n", TAGS), false);
  assert.equal(opensInside("<|im_start|>assistant\n", TAGS), false);
  assert.equal(opensInside("<think>\nold</think>\n<|im_start|>assistant\n", TAGS), false);
  assert.equal(opensInside("<think> and then words", TAGS), false);
});

/** [text, prompt ends inside, reasoning, content] */
const CASES: [string, boolean, string | null, string][] = [
  ["<think>\nLet me see.\n</think>\n\nIt is 4.", false, "Let me see.", "It is 4."],
  ["  <think>a</think>b", false, "a", "b"],
  ["<think>\n\n</think>\n\nHello", false, "", "Hello"],
  ["<think>unclosed to the end  ", false, "unclosed to the end", ""],
  ["Hello <think>x</think>", false, null, "Hello <think>x</think>"],
  ["<thi", false, null, "<thi"],
  ["", false, null, ""],
  ["\nI reason.\n</think>\n\nAnswer.\n", true, "I reason.", "Answer.\n"],
  ["never closed </thi", true, "never closed </thi", ""],
  ["</think>answer", true, "", "answer"],
  ["a</think> b </think> c", true, "a", "b </think> c"],
  ["", true, "", ""],
];

test("reasoning: a whole reply split into reasoning and answer", () => {
  for (const [text, inside, reasoning, content] of CASES) assert.deepEqual(splitReasoning(text, TAGS, inside), { reasoning, content }, JSON.stringify(text));
});

test("reasoning: streamed pieces join to the whole split, however the reply is cut", () => {
  let seed = 7;
  const rand = (n: number) => (seed = (seed * 1103515245 + 12345) % 2 ** 31) % n;
  for (const [text, inside, reasoning, content] of CASES) {
    const cuts: number[][] = [[...text].map((_, i) => i + 1), [text.length]];
    for (let k = 0; k < 20; k++) cuts.push([...new Set(Array.from({ length: 4 }, () => rand(text.length + 1)))].sort((a, b) => a - b));
    for (const cut of cuts) {
      const s = new ReasoningStream(TAGS, inside);
      let r = "", c = "", at = 0;
      for (const p of [...cut, text.length]) {
        const o = s.push(text.slice(at, Math.max(at, p)));
        at = Math.max(at, p);
        // nothing that may still be the close tag, nor a reasoning's trailing whitespace, goes out early
        assert.ok(!(r + o.reasoning).endsWith("</"), JSON.stringify([text, cut]));
        r += o.reasoning, c += o.content;
      }
      const e = s.end();
      r += e.reasoning, c += e.content;
      assert.deepEqual([r, c], [reasoning ?? "", content], JSON.stringify([text, cut]));
    }
  }
});

test("reasoning: calls after a think block are read, streamed and whole", () => {
  const text = '<think>\nThe user wants the time.\n</think>\n\n<tool_call>\n{"name": "now", "arguments": {}}\n</tool_call>';
  const reading = { reasoning: { tags: TAGS, inside: false }, syntax: "hermes" as const };
  const m = replyOf(reading, text);
  assert.equal(m.content, null);
  assert.equal(m.reasoning_content, "The user wants the time.");
  assert.deepEqual(m.tool_calls?.map((c) => [c.function.name, c.function.arguments]), [["now", "{}"]]);
  const s = new ReplyStream(reading);
  let r = "", c = "";
  for (const ch of text) {
    const o = s.push(ch);
    r += o.reasoning, c += o.content;
  }
  const e = s.end();
  assert.deepEqual([r + e.reasoning, c + e.content, e.calls.map((x) => x.function.name)], ["The user wants the time.", "", ["now"]]);
  // without think tags the block stays content, and is not a call
  assert.deepEqual(replyOf({}, text), { content: text });
});

test("reasoning: a format's grammar is held off inside the think block", async () => {
  const m = loadModel(MODEL_PATH);
  try {
    const vocab = m.config.vocab;
    const compiled = await compileFormat(m.tokenizer, vocab, { type: "grammar", grammar: 'root ::= "Once"' });
    const plain = await Constraint.create(compiled, vocab);
    const want = (await plain.mask())!.slice();
    const [open, close] = [vocab - 2, vocab - 1]; // stand-ins: the gate reads only their ids
    // inside: no mask until the close tag, then the grammar's
    const inside = await Constraint.create(compiled, vocab, { open, close, inside: true });
    assert.equal(await inside.mask(), undefined);
    assert.equal(inside.accept(5), true);
    assert.equal(await inside.mask(), undefined);
    assert.equal(inside.accept(close), true);
    assert.deepEqual(await inside.mask(), want);
    // not inside: the grammar's first tokens and the open tag; the open tag frees the reply up to the close
    const first = await Constraint.create(compiled, vocab, { open, close, inside: false });
    const withOpen = want.slice();
    withOpen[open >>> 5] |= 1 << (open & 31);
    assert.deepEqual(await first.mask(), withOpen);
    assert.equal(first.accept(open), true);
    assert.equal(await first.mask(), undefined);
    first.accept(close);
    assert.deepEqual(await first.mask(), want);
    // a grammar token first: the grammar holds from there on (the open tag is no longer allowed)
    const direct = await Constraint.create(compiled, vocab, { open, close, inside: false });
    const w = want.findIndex((x) => x !== 0);
    assert.equal(direct.accept(w * 32 + 31 - Math.clz32(want[w] & -want[w])), true); // the lowest token the grammar allows
    assert.equal(direct.accept(open), false);
    for (const c of [plain, inside, first, direct]) c.dispose();
    // a template's reasoning_content is written back through it
    m.chatTemplate = THINK;
    const text = renderChat(m, [{ role: "user", content: "2+2?" }, { role: "assistant", content: "4", reasoning_content: "Adding." }, { role: "user", content: "And 3+3?" }]);
    assert.ok(text.includes("<|im_start|>assistant\n<think>\nAdding.\n</think>\n\n4<|im_end|>"), text);
    assert.ok(text.endsWith("<|im_start|>assistant\n<think>\n"), text);
    assert.ok(renderChat(m, [{ role: "user", content: "x" }], { templateVars: { enable_thinking: false } }).endsWith("<think>\n\n</think>\n\n"));
    assert.throws(() => renderChat(m, [{ role: "user", content: "x" }], { templateVars: { messages: [] } }), /templateVars: 'messages' is set by the chat renderer/);
  } finally {
    m.close();
  }
});

test("reasoning in the library: Driver.chatPrompt tells where the reply starts, splitReasoning reads it", async () => {
  const m = loadModel(MODEL_PATH);
  m.chatTemplate = THINK;
  const driver = await Driver.open(m, new Engine(new JsDevice({}), { compile: compileGraph }), { ctx: 512, prefill: [64, 8] });
  try {
    const tags = thinkTags(m.chatTemplate)!;
    const prompt = driver.chatPrompt(ASK);
    assert.ok(prompt.endsWith("<|im_start|>assistant\n<think>\n"), prompt);
    const r = await driver.chat(ASK, { maxTokens: 8 });
    assert.deepEqual(splitReasoning(r.text, tags, opensInside(prompt, tags)), { reasoning: r.text.trim(), content: "" });
    const off = driver.chatPrompt(ASK, { templateVars: { enable_thinking: false } });
    assert.equal(opensInside(off, tags), false);
    const r2 = await driver.chat(ASK, { maxTokens: 8, templateVars: { enable_thinking: false } });
    assert.deepEqual(splitReasoning(r2.text, tags, false), { reasoning: null, content: r2.text });
  } finally {
    await driver.close();
    m.close();
  }
});

test("reasoning over HTTP (JS device, stories260K): reasoning_content, reasoning_format none, enable_thinking false, streamed", async () => {
  const m = loadModel(MODEL_PATH);
  m.chatTemplate = THINK;
  const s = await serveChat(m, 512);
  try {
    const ask = { messages: ASK, max_tokens: 12, temperature: 0 };
    // the prompt opens the block and stories260K never closes it: all of the reply is reasoning
    const a = await s.post(ask);
    assert.equal(a.status, 200);
    const msg = a.body.choices[0].message;
    assert.equal(msg.content, "");
    assert.ok(msg.reasoning_content.length > 0);
    // reasoning_format none: the same greedy reply, left in the content as it was written
    const none = await s.post({ ...ask, reasoning_format: "none" });
    assert.equal(none.body.choices[0].message.reasoning_content, undefined);
    assert.equal(none.body.choices[0].message.content.trim(), msg.reasoning_content);
    // enable_thinking false: the template closes an empty block; the reply is the answer
    const off = await s.post({ ...ask, chat_template_kwargs: { enable_thinking: false } });
    assert.equal(off.body.choices[0].message.reasoning_content, undefined);
    assert.ok(off.body.choices[0].message.content.length > 0);
    // streamed: reasoning_content deltas join to the unstreamed one, no content
    const stream = await s.client.chat.completions.create({ model: s.id, messages: [{ role: "user", content: "Tell me a story." }], max_tokens: 12, temperature: 0, stream: true });
    let r = "", c = "";
    for await (const ch of stream) {
      const d = ch.choices[0]?.delta as { content?: string | null; reasoning_content?: string } | undefined;
      r += d?.reasoning_content ?? "", c += d?.content ?? "";
    }
    assert.deepEqual([r, c], [msg.reasoning_content, ""]);
    // a constrained reply whose tags are not single tokens of the vocabulary is held from its first token: all answer
    const g = await s.post({ ...ask, grammar: 'root ::= "Once"' });
    assert.deepEqual([g.body.choices[0].message.content, g.body.choices[0].message.reasoning_content], ["Once", undefined]);
    // an earlier turn's reasoning_content goes back through the template
    const turn = await s.post({ ...ask, messages: [...ASK, { role: "assistant", content: "A cat.", reasoning_content: "Short." }, { role: "user", content: "More." }] });
    assert.equal(turn.status, 200);
    // bad requests: 400s naming the field, and the server keeps serving
    const bad: [object, string][] = [
      [{ ...ask, reasoning_format: "sometimes" }, "reasoning_format"],
      [{ ...ask, chat_template_kwargs: "enable_thinking" }, "chat_template_kwargs"],
      [{ ...ask, chat_template_kwargs: { add_generation_prompt: false } }, "chat_template_kwargs"],
      [{ ...ask, messages: [{ role: "user", content: "x", reasoning_content: "y" }] }, "messages[0].reasoning_content"],
    ];
    for (const [body, param] of bad) {
      const res = await s.post(body);
      assert.deepEqual([res.status, res.body.error.param], [400, param], JSON.stringify(body));
    }
    assert.equal((await s.post(ask)).status, 200);
  } finally {
    await s.stop();
  }
});

test("reasoning over HTTP: the server's own reasoning format and template variables (poot serve's flags), a request's win", async () => {
  const m = loadModel(MODEL_PATH);
  m.chatTemplate = THINK;
  const s = await serveChat(m, 512, { reasoningFormat: "none", templateVars: { enable_thinking: true } });
  try {
    const ask = { messages: ASK, max_tokens: 6, temperature: 0 };
    const none = (await s.post(ask)).body.choices[0].message;
    assert.equal(none.reasoning_content, undefined);
    const auto = (await s.post({ ...ask, reasoning_format: "auto" })).body.choices[0].message;
    assert.deepEqual([auto.content, auto.reasoning_content], ["", none.content.trim()]);
    const off = (await s.post({ ...ask, reasoning_format: "auto", chat_template_kwargs: { enable_thinking: false } })).body.choices[0].message;
    assert.equal(off.reasoning_content, undefined);
  } finally {
    await s.stop();
  }
});

/** The Qwen3 family fixture with single-token think tags, served with think.jinja. */
function qwen3Thinking(): ModelHandle {
  return retokened("qwen3", [{ content: "<think>", special: false }, { content: "</think>", special: false }], THINK);
}

test("reasoning over HTTP (JS device, Qwen3 fixture): the think block is free, the grammar holds the answer", async () => {
  const m = qwen3Thinking();
  const open = m.tokenizer.encode("<think>", { addBos: false, parseSpecial: true });
  const close = m.tokenizer.encode("</think>", { addBos: false, parseSpecial: true });
  assert.equal(open.length, 1);
  assert.equal(close.length, 1);
  const s = await serveChat(m, 256);
  try {
    const grammar = 'root ::= "yes" | "no"';
    const ask = { messages: ASK, grammar, max_tokens: 8, temperature: 0 };
    // inside the block, free: the model's own tokens, which the grammar would not allow (greedy on the JS device
    // does not reach the close tag in 4 tokens)
    const free = await s.post({ ...ask, max_tokens: 4 });
    const fm = free.body.choices[0].message;
    assert.deepEqual([free.status, fm.content, free.body.choices[0].finish_reason], [200, "", "length"]);
    assert.ok(fm.reasoning_content.length > 3 && !/^(yes|no)/.test(fm.reasoning_content), JSON.stringify(fm));
    // the close tag steered first: the grammar holds the answer
    const bias = (ids: [number, number][]) => Object.fromEntries(ids.map(([id, b]) => [String(id), b]));
    const closed = await s.post({ ...ask, logit_bias: bias([[close[0], 100]]) });
    assert.match(closed.body.choices[0].message.content, /^(yes|no)$/);
    assert.equal(closed.body.choices[0].message.reasoning_content, "");
    // enable_thinking false (the block closed in the prompt): the open tag may start the reply, then the close
    const reopened = await s.post({ ...ask, chat_template_kwargs: { enable_thinking: false }, reasoning_format: "none", logit_bias: bias([[open[0], 50], [close[0], 100]]) });
    assert.match(reopened.body.choices[0].message.content, /^<think><\/think>(yes|no)$/);
    // without the bias the grammar holds from the first token
    const direct = await s.post({ ...ask, chat_template_kwargs: { enable_thinking: false } });
    assert.match(direct.body.choices[0].message.content, /^(yes|no)$/);
    assert.equal(direct.body.choices[0].message.reasoning_content, undefined);
  } finally {
    await s.stop();
  }
});

test("reasoning in the library (JS device, Qwen3 fixture): Driver.chat with a format leaves the think block free", async () => {
  const m = qwen3Thinking();
  const close = m.tokenizer.encode("</think>", { addBos: false, parseSpecial: true })[0];
  const driver = await Driver.open(m, new Engine(new JsDevice({}), { compile: compileGraph }), { ctx: 256, prefill: [64, 8] });
  try {
    const format = { type: "grammar" as const, grammar: 'root ::= "yes" | "no"' };
    // the prompt opens the block: the model's own tokens, which the grammar would not allow
    const free = await driver.chat(ASK, { format, maxTokens: 4 });
    assert.ok(free.text.length > 3 && !/^(yes|no)/.test(free.text.trim()), JSON.stringify(free.text));
    // the close tag steered first: the grammar holds what follows it
    const closed = await driver.chat(ASK, { format, maxTokens: 8, sampler: { logitBias: { [close]: 100 } } });
    assert.match(closed.text, /^<\/think>(yes|no)$/);
    // a plain generate with the same format is held from its first token (no template, no gate)
    const plain = await driver.generate(driver.chatPrompt(ASK), { format, maxTokens: 8 });
    assert.match(plain.text, /^(yes|no)$/);
  } finally {
    await driver.close();
    m.close();
  }
});
