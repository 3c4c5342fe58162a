// POST /tokenize and /detokenize (llm/serve/tokenize.ts) on the JS device with stories260K: vLLM's body (prompt,
// add_special_tokens defaulting to true, return_token_strs, messages rendered as the chat route renders them) and
// llama.cpp's (content, add_special defaulting to false, with_pieces), each against the tokenizer itself and the
// chat route's own prompt_tokens; a round trip through /detokenize; bad bodies answered with a 400 (or 404 for
// another model) naming the field, the server serving after them.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Engine } from "../../backends/executor.ts";
import { JsDevice } from "../../backends/js/device.ts";
import { loadModel } from "../../llm/model.ts";
import { servingCompile } from "../../llm/serve/batch.ts";
import { listen } from "../../llm/serve/listen.ts";
import { Server } from "../../llm/serve/server.ts";
import { MODEL_PATH } from "./setup.ts";

test("tokenize over HTTP (JS device): vLLM's and llama.cpp's bodies, chat messages, detokenize, bad bodies", async () => {
  const m = loadModel(MODEL_PATH);
  const server = await Server.open(m, new Engine(new JsDevice(), { compile: servingCompile, timeoutMs: 120_000 }), { ctx: 256, slots: 2, chunk: 64, kvBlocks: 33 });
  const l = await listen(server.handler, { hostname: "127.0.0.1", port: 0 });
  const post = async (path: string, body: unknown) => {
    const r = await fetch(`http://127.0.0.1:${l.port}${path}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
    return { status: r.status, body: await r.json() };
  };
  try {
    const tok = m.tokenizer, text = "Once upon a time, Lily saw a cat.";
    const plain = tok.encode(text, { addBos: false, parseSpecial: true });
    assert.ok(tok.bos !== undefined && plain.length > 5);
    // vLLM: BOS unless add_special_tokens is false; llama.cpp: none unless add_special
    const v = await post("/tokenize", { prompt: text });
    assert.deepEqual(v.body, { tokens: [tok.bos, ...plain], count: plain.length + 1, max_model_len: 256 });
    assert.deepEqual((await post("/tokenize", { prompt: text, add_special_tokens: false })).body.tokens, plain);
    assert.deepEqual((await post("/tokenize", { content: text })).body.tokens, plain);
    assert.deepEqual((await post("/tokenize", { content: text, add_special: true })).body.tokens, [tok.bos, ...plain]);
    const pieces = (await post("/tokenize", { content: text, with_pieces: true })).body.tokens as { id: number; piece: string }[];
    assert.deepEqual(pieces.map((p) => p.id), plain);
    assert.equal(pieces.map((p) => p.piece).join("").trim(), text);
    const strs = (await post("/tokenize", { prompt: text, return_token_strs: true })).body;
    assert.deepEqual([strs.token_strs.length, strs.token_strs[0]], [plain.length + 1, "<s>"]);
    // messages: the prompt the chat route generates from
    const messages = [{ role: "system", content: "Be brief." }, { role: "user", content: text }];
    const chat = await post("/v1/chat/completions", { messages, max_tokens: 1, temperature: 0 });
    const t = await post("/tokenize", { messages });
    assert.equal(t.body.count, chat.body.usage.prompt_tokens);
    // a round trip
    const d = await post("/detokenize", { tokens: plain });
    assert.deepEqual(d.body, { prompt: text, content: text });
    assert.equal((await post("/detokenize", { tokens: [] })).body.prompt, "");
    const bad: [string, unknown, number, string][] = [
      ["/tokenize", { prompt: text, content: text }, 400, "prompt"],
      ["/tokenize", {}, 400, "prompt"],
      ["/tokenize", { prompt: 7 }, 400, "prompt"],
      ["/tokenize", { prompt: text, model: "other" }, 404, "model"],
      ["/tokenize", { messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: "data:image/png;base64,AA" } }] }] }, 400, "messages"],
      ["/tokenize", { messages: [] }, 400, "messages"],
      ["/detokenize", { tokens: [1, 100000] }, 400, "tokens[1]"],
      ["/detokenize", { tokens: [-1] }, 400, "tokens[0]"],
      ["/detokenize", { tokens: "1 2" }, 400, "tokens"],
      ["/detokenize", [1, 2], 400, "body"],
    ];
    for (const [path, body, status, param] of bad) {
      const r = await post(path, body);
      assert.deepEqual([r.status, r.body.error?.param], [status, param], `${path} ${JSON.stringify(body)}`);
    }
    assert.equal((await fetch(`http://127.0.0.1:${l.port}/tokenize`)).status, 405);
    assert.equal((await post("/tokenize", { prompt: text })).status, 200);
  } finally {
    await server.shutdown(0);
    await l.close();
    m.close();
  }
});
