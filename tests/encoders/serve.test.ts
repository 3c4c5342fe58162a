// The encoder server's routes through its fetch handler (no socket), on the js backend: /v1/embeddings in
// OpenAI's shape (string or list input, usage, base64), /v1/rerank in llama.cpp's / Jina's shape (top_n,
// best first), and the 400s/404s naming the field or the model kind.
import { test } from "node:test";
import assert from "node:assert/strict";
import { rmSync } from "node:fs";
import { compileGraph, Engine, loadModel } from "../../engine.ts";
import { openDevice } from "../devices/index.ts";
import { EncoderServer } from "../../llm/serve/encode.ts";
import type { Device } from "../../backends/device.ts";
import { writeBert } from "./synth.ts";

const emb = writeBert({ pooling: "mean", normalize: true }), rr = writeBert({ labels: 1 });
const post = (path: string, body: unknown) =>
  new Request(`http://x${path}`, { method: "POST", body: typeof body === "string" ? body : JSON.stringify(body), headers: { "content-type": "application/json" } });

test("encoder server: /v1/embeddings, /v1/rerank and their errors", { timeout: 120_000 }, async () => {
  const dev = await openDevice("js") as Device;
  const es = await EncoderServer.open(loadModel(emb.dir), new Engine(dev, { compile: compileGraph, ownsDevice: false }), { modelId: "e", batches: [1, 4], seqs: [16] });
  const rs = await EncoderServer.open(loadModel(rr.dir), new Engine(dev, { compile: compileGraph, ownsDevice: false }), { modelId: "r", batches: [1, 4], seqs: [16] });
  try {
    let res = await es.handler(post("/v1/embeddings", { input: ["the cat sat", "hello world"], model: "e" }));
    assert.equal(res.status, 200);
    const body = await res.json();
    assert.equal(body.object, "list");
    assert.equal(body.data.length, 2);
    assert.deepEqual(body.data.map((d: { index: number; object: string }) => [d.index, d.object]), [[0, "embedding"], [1, "embedding"]]);
    assert.equal(body.data[0].embedding.length, 16);
    assert.ok(Math.abs(Math.hypot(...body.data[0].embedding) - 1) < 1e-5);
    assert.deepEqual(body.usage, { prompt_tokens: 5 + 4, total_tokens: 9 });
    const one = await (await es.handler(post("/v1/embeddings", { input: "the cat sat", encoding_format: "base64" }))).json();
    const bytes = Uint8Array.from(atob(one.data[0].embedding), (c) => c.charCodeAt(0));
    const f = new Float32Array(bytes.buffer);
    f.forEach((x, i) => assert.ok(Math.abs(x - body.data[0].embedding[i]) < 1e-6, `base64 ${i}`));
    for (const [b, field] of [[{ input: [] }, "input"], [{ input: ["a", 3] }, "input"], [{}, "input"], [{ input: "a", dimensions: 8 }, "dimensions"]] as const) {
      res = await es.handler(post("/v1/embeddings", b));
      assert.equal(res.status, 400, JSON.stringify(b));
      assert.equal((await res.json()).error.param, field);
    }
    res = await es.handler(post("/v1/embeddings", { input: "a", model: "other" }));
    assert.equal(res.status, 404);
    res = await es.handler(post("/v1/embeddings", "{not json"));
    assert.equal(res.status, 400);
    res = await es.handler(post("/v1/embeddings", { input: "the cat sat on the mat ".repeat(5) }));
    assert.equal(res.status, 400);
    assert.equal((await res.json()).error.code, "context_length_exceeded");
    res = await es.handler(post("/v1/chat/completions", { messages: [{ role: "user", content: "hi" }] }));
    assert.equal(res.status, 400);
    assert.equal((await res.json()).error.code, "model_kind");
    res = await es.handler(post("/v1/rerank", { query: "q", documents: ["a"] }));
    assert.equal(res.status, 400);
    assert.equal((await res.json()).error.code, "model_kind");

    const docs = ["the dog ran to the park.", "the cat sat on the mat.", "hello world"];
    res = await rs.handler(post("/v1/rerank", { query: "where did the dog go?", documents: docs, top_n: 2, return_documents: true }));
    assert.equal(res.status, 200);
    const rb = await res.json();
    assert.equal(rb.results.length, 2);
    const all = await rs.driver.rerank("where did the dog go?", docs);
    const best = all.map((_, i) => i).sort((a, b) => all[b] - all[a]);
    assert.deepEqual(rb.results.map((r: { index: number }) => r.index), best.slice(0, 2));
    rb.results.forEach((r: { index: number; relevance_score: number; document: { text: string } }) => {
      assert.ok(Math.abs(r.relevance_score - all[r.index]) < 1e-6);
      assert.equal(r.document.text, docs[r.index]);
    });
    res = await rs.handler(post("/rerank", { query: "where", documents: [{ text: "the dog" }] }));
    assert.equal(res.status, 200);
    for (const [b, field] of [[{ query: "", documents: ["a"] }, "query"], [{ query: "q", documents: [] }, "documents"], [{ query: "q", documents: ["a"], top_n: 0 }, "top_n"]] as const) {
      res = await rs.handler(post("/v1/rerank", b));
      assert.equal(res.status, 400, JSON.stringify(b));
      assert.equal((await res.json()).error.param, field);
    }
  } finally {
    await es.shutdown(0);
    await rs.shutdown(0);
    rmSync(emb.dir, { recursive: true });
    rmSync(rr.dir, { recursive: true });
  }
});

test("a generative model's server answers /v1/embeddings and /v1/rerank with a 400 model_kind", { timeout: 120_000 }, async () => {
  const { model } = await import("../serve/setup.ts");
  const { Server } = await import("../../llm/serve/server.ts");
  const { servingCompile } = await import("../../llm/serve/batch.ts");
  const dev = await openDevice("js") as Device;
  const server = await Server.open(model, new Engine(dev, { compile: servingCompile, ownsDevice: false }), { ctx: 64, slots: 2, chunk: 8, kvBlocks: 2 * 4 + 1 });
  try {
    for (const [path, body] of [["/v1/embeddings", { input: "hi" }], ["/v1/rerank", { query: "q", documents: ["d"] }]] as const) {
      const res = await server.handler(post(path, body));
      assert.equal(res.status, 400, path);
      const e = (await res.json()).error;
      assert.equal(e.code, "model_kind");
      assert.match(e.message, /generative model/);
    }
  } finally {
    await server.shutdown(0);
  }
});
