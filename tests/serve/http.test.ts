// The HTTP server on loopback, on every device present: the official `openai` client (chat and completions,
// streamed and not, usage in the stream), then raw fetch for every bad input of issue 14 (each answered with
// OpenAI's error JSON naming what was wrong, and the server still serving after it), 429 with Retry-After on
// a full queue, 401 without the API key, and a shutdown that ends in-flight streams within its bound.
import { test } from "node:test";
import assert from "node:assert/strict";
import OpenAI from "openai";
import type { Device } from "../../backends/device.ts";
import { Engine } from "../../backends/executor.ts";
import { servingCompile } from "../../llm/serve/batch.ts";
import { listen } from "../../llm/serve/listen.ts";
import { Server, type ServeOptions } from "../../llm/serve/server.ts";
import { openDevice, selectedBackends } from "../devices/index.ts";
import { model } from "./setup.ts";
import { sharingKernels } from "../devices/kernel_cache.ts";
import { fileURLToPath } from "node:url";
import { readFileSync } from "node:fs";
import { loadModel } from "../../llm/model.ts";

const KEY = "test-key-123";

async function start(dev: Device, o: ServeOptions = {}, m = model) {
  const exec = new Engine(dev, { compile: sharingKernels(servingCompile), timeoutMs: 120_000, ownsDevice: false });
  const server = await Server.open(m, exec, { ctx: 128, slots: 8, chunk: 16, kvBlocks: 8 * 8 + 1, apiKey: KEY, bodyLimit: 64 * 1024, bodyTimeoutMs: 1000, ...o });
  const l = await listen(server.handler, { hostname: "127.0.0.1", port: 0 });
  const base = `http://127.0.0.1:${l.port}`;
  return {
    server, base,
    stop: async () => {
      await server.shutdown(0);
      await l.close();
    },
    post: (path: string, body: string | object, headers: Record<string, string> = {}) =>
      fetch(base + path, {
        method: "POST",
        headers: { authorization: `Bearer ${KEY}`, "content-type": "application/json", ...headers },
        body: typeof body === "string" ? body : JSON.stringify(body),
      }),
  };
}

for (const backend of selectedBackends()) {
  const dev = await openDevice(backend);
  const skip = typeof dev === "string" ? dev : false;

  test(`serve over HTTP on ${backend}: the openai client, stream and not, chat and completions`, { skip }, async () => {
    const s = await start(dev as Device);
    try {
      const client = new OpenAI({ baseURL: `${s.base}/v1`, apiKey: KEY, maxRetries: 0 });
      const models = await client.models.list();
      assert.deepEqual(models.data.map((m) => m.id), [s.server.modelId]);

      const c = await client.completions.create({ model: s.server.modelId, prompt: "Once upon a time", max_tokens: 16, temperature: 0 });
      assert.equal(c.object, "text_completion");
      assert.equal(c.choices.length, 1);
      assert.equal(c.choices[0].finish_reason, "length");
      assert.ok(c.choices[0].text.length > 0);
      assert.deepEqual(c.usage, { prompt_tokens: 5, completion_tokens: 16, total_tokens: 21 });

      // The stream carries the same greedy text, then usage, then [DONE] (the client stops on it).
      const stream = await client.completions.create({
        model: s.server.modelId, prompt: "Once upon a time", max_tokens: 16, temperature: 0, stream: true, stream_options: { include_usage: true },
      });
      let text = "", usage;
      for await (const ch of stream) {
        if (ch.choices.length) text += ch.choices[0].text;
        if (ch.usage) usage = ch.usage;
      }
      assert.equal(text, c.choices[0].text);
      assert.deepEqual(usage, c.usage);

      const chat = await client.chat.completions.create({
        model: s.server.modelId, messages: [{ role: "system", content: "Tell a story." }, { role: "user", content: "A cat" }],
        max_completion_tokens: 12, temperature: 0, n: 2,
      });
      assert.equal(chat.object, "chat.completion");
      assert.equal(chat.choices.length, 2);
      assert.equal(chat.choices[0].message.role, "assistant");
      assert.equal(chat.choices[0].message.content, chat.choices[1].message.content, "greedy choices agree");
      assert.equal(chat.usage!.completion_tokens, 24);

      const cs = await client.chat.completions.create({
        model: s.server.modelId, messages: [{ role: "user", content: "A cat" }], max_tokens: 12, temperature: 0.9, seed: 7, top_k: 40,
        stream: true,
      } as OpenAI.Chat.ChatCompletionCreateParamsStreaming);
      let roles = 0, pieces = 0, finish = "";
      for await (const ch of cs) {
        const d = ch.choices[0];
        if (d.delta.role) roles++;
        if (d.delta.content) pieces++;
        if (d.finish_reason) finish = d.finish_reason;
      }
      assert.equal(roles, 1);
      assert.ok(pieces > 0);
      assert.ok(finish === "length" || finish === "stop");

      // n = 2 streamed: each choice index streams its own text and finishes once
      const two = await client.completions.create({ model: s.server.modelId, prompt: "The little dog", max_tokens: 8, temperature: 0, n: 2, stream: true });
      const texts = ["", ""], finishes = [0, 0];
      for await (const ch of two) {
        for (const c of ch.choices) {
          texts[c.index] += c.text;
          if (c.finish_reason) finishes[c.index]++;
        }
      }
      assert.deepEqual(finishes, [1, 1]);
      assert.equal(texts[0], texts[1], "greedy choices agree");
      assert.ok(texts[0].length > 0);

      // stop strings cut the text before them
      const st = await client.completions.create({ model: s.server.modelId, prompt: "Once upon a time", max_tokens: 40, temperature: 0, stop: ["girl"] });
      assert.equal(st.choices[0].finish_reason, "stop");
      assert.ok(!st.choices[0].text.includes("girl") && c.choices[0].text.startsWith(st.choices[0].text.slice(0, 10)));
    } finally {
      await s.stop();
    }
  });

  test(`serve over HTTP on ${backend}: every bad input is a clear error and the server keeps serving`, { skip }, async () => {
    const s = await start(dev as Device);
    const good = { prompt: "Once upon a time", max_tokens: 4, temperature: 0 };
    const cases: [string, () => Promise<Response>, number, RegExp, string | null][] = [
      ["malformed JSON", () => s.post("/v1/completions", "{\"prompt\": \"x\",,}"), 400, /not valid JSON/, "body"],
      ["not an object", () => s.post("/v1/completions", "[1,2]"), 400, /JSON object/, "body"],
      ["wrong type", () => s.post("/v1/completions", { ...good, temperature: "hot" }), 400, /temperature/, "temperature"],
      ["negative max_tokens", () => s.post("/v1/completions", { ...good, max_tokens: -5 }), 400, /max_tokens/, "max_tokens"],
      ["fractional max_tokens", () => s.post("/v1/completions", { ...good, max_tokens: 2.5 }), 400, /max_tokens/, "max_tokens"],
      ["huge max_tokens", () => s.post("/v1/completions", { ...good, max_tokens: 1e12 }), 400, /exceeds the context/, "max_tokens"],
      ["prompt past the context", () => s.post("/v1/completions", { ...good, prompt: "Once upon a time ".repeat(60) }), 400, /context/, "prompt"],
      ["chat past the context", () => s.post("/v1/chat/completions", { messages: [{ role: "user", content: "The dog ran. ".repeat(60) }] }), 400, /context/, "messages"],
      ["missing messages", () => s.post("/v1/chat/completions", { max_tokens: 3 }), 400, /messages/, "messages"],
      ["bad role", () => s.post("/v1/chat/completions", { messages: [{ role: "wizard", content: "x" }] }), 400, /role/, "messages[0].role"],
      ["remote image URL", () => s.post("/v1/chat/completions", { messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: "https://example.com/cat.png" } }] }] }), 400, /only data: URLs.*never downloads/, "messages[0].content[0].image_url"],
      ["image for a text-only model", () => s.post("/v1/chat/completions", { messages: [{ role: "user", content: [{ type: "text", text: "hi" }, { type: "image_url", image_url: { url: "data:image/png;base64,iVBORw0KGgo=" } }] }] }), 400, /no vision tower/, "messages"],
      ["missing prompt", () => s.post("/v1/completions", { max_tokens: 3 }), 400, /prompt/, "prompt"],
      ["token id past the vocabulary", () => s.post("/v1/completions", { prompt: [1, 99999], max_tokens: 2 }), 400, /vocabulary/, "prompt"],
      ["n = 0", () => s.post("/v1/completions", { ...good, n: 0 }), 400, /'n'/, "n"],
      ["top_p > 1", () => s.post("/v1/completions", { ...good, top_p: 1.5 }), 400, /top_p/, "top_p"],
      ["too many stops", () => s.post("/v1/completions", { ...good, stop: ["a", "b", "c", "d", "e"] }), 400, /stop/, "stop"],
      ["logprobs of the wrong type", () => s.post("/v1/chat/completions", { messages: [{ role: "user", content: "x" }], logprobs: "yes" }), 400, /logprobs/, "logprobs"],
      ["top_logprobs > 20", () => s.post("/v1/chat/completions", { messages: [{ role: "user", content: "x" }], logprobs: true, top_logprobs: 21 }), 400, /top_logprobs/, "top_logprobs"],
      ["top_logprobs without logprobs", () => s.post("/v1/chat/completions", { messages: [{ role: "user", content: "x" }], top_logprobs: 2 }), 400, /needs logprobs/, "top_logprobs"],
      ["completions logprobs > 5", () => s.post("/v1/completions", { ...good, logprobs: 6 }), 400, /logprobs/, "logprobs"],
      ["logit_bias out of range", () => s.post("/v1/completions", { ...good, logit_bias: { "5": 300 } }), 400, /logit_bias/, "logit_bias.5"],
      ["logit_bias key not a token id", () => s.post("/v1/completions", { ...good, logit_bias: { "five": 1 } }), 400, /invalid .logit_bias.five.: Invalid key/, "logit_bias.five"],
      ["logit_bias past the vocabulary", () => s.post("/v1/completions", { ...good, logit_bias: { "99999": 1 } }), 400, /vocabulary/, "logit_bias"],
      ["presence_penalty > 2", () => s.post("/v1/completions", { ...good, presence_penalty: 2.5 }), 400, /presence_penalty/, "presence_penalty"],
      ["frequency_penalty < -2", () => s.post("/v1/completions", { ...good, frequency_penalty: -3 }), 400, /frequency_penalty/, "frequency_penalty"],
      ["repetition_penalty 0", () => s.post("/v1/completions", { ...good, repetition_penalty: 0 }), 400, /repetition_penalty/, "repetition_penalty"],
      ["min_tokens negative", () => s.post("/v1/completions", { ...good, min_tokens: -1 }), 400, /min_tokens/, "min_tokens"],
      ["response_format type", () => s.post("/v1/chat/completions", { messages: [{ role: "user", content: "x" }], response_format: { type: "xml" } }), 400, /response_format/, "response_format.type"],
      ["json_schema without a schema", () => s.post("/v1/chat/completions", { messages: [{ role: "user", content: "x" }], response_format: { type: "json_schema", json_schema: { name: "x" } } }), 400, /response_format/, "response_format.json_schema.schema"],
      ["a grammar that does not parse", () => s.post("/v1/completions", { ...good, grammar: "root ::= (" }), 400, /grammar/, "grammar"],
      ["unknown model", () => s.post("/v1/completions", { ...good, model: "gpt-9" }), 404, /does not exist/, "model"],
      ["body too large", () => s.post("/v1/completions", { ...good, prompt: "x".repeat(100_000) }), 413, /exceeds the limit/, "body"],
      ["no API key", () => s.post("/v1/completions", good, { authorization: "" }), 401, /API key/, null],
      ["wrong API key", () => s.post("/v1/completions", good, { authorization: "Bearer nope" }), 401, /API key/, null],
      ["unknown route", () => fetch(`${s.base}/v2/everything`), 404, /no route/, null],
      ["wrong method", () => fetch(`${s.base}/v1/completions`, { headers: { authorization: `Bearer ${KEY}` } }), 405, /takes POST/, null],
    ];
    try {
      for (const [name, req, status, msg, param] of cases) {
        const r = await req();
        const body = await r.json() as { error: { message: string; type: string; param: string | null; code: string | null } };
        assert.equal(r.status, status, `${name}: status ${r.status} ${JSON.stringify(body)}`);
        assert.match(body.error.message, msg, name);
        assert.equal(body.error.param, param, `${name}: param`);
        assert.equal(typeof body.error.type, "string");
        // still serving
        const ok = await s.post("/v1/completions", good);
        assert.equal(ok.status, 200, `after ${name}`);
        assert.equal((await ok.json() as { usage: { completion_tokens: number } }).usage.completion_tokens, 4);
      }
      // A body that starts and never ends: 408 once the body timeout passes, and still serving.
      let hold: ReadableStreamDefaultController<Uint8Array> | undefined;
      const trickle = new ReadableStream<Uint8Array>({ start: (c) => {
        hold = c;
        c.enqueue(new TextEncoder().encode("{\"prompt\": "));
      } });
      const t0 = performance.now();
      const slow = await fetch(`${s.base}/v1/completions`, {
        method: "POST", body: trickle, headers: { authorization: `Bearer ${KEY}` }, duplex: "half",
      } as RequestInit);
      assert.equal(slow.status, 408);
      assert.equal((await slow.json() as { error: { code: string } }).error.code, "body_timeout");
      assert.ok(performance.now() - t0 < 10_000);
      try {
        hold?.close();
      } catch { /* the server cancelled it */ }
      assert.equal((await s.post("/v1/completions", good)).status, 200);
      const h = await fetch(`${s.base}/health`);
      assert.deepEqual(await h.json(), { status: "ok" });
      const m = await (await fetch(`${s.base}/metrics`, { headers: { authorization: `Bearer ${KEY}` } })).text();
      assert.match(m, /poot_requests_total\{status="400"\} \d+/);
      assert.match(m, /poot_kv_blocks_used 0/);
      assert.match(m, /poot_generation_tokens_total [1-9]\d*/);
      assert.match(m, /poot_time_to_first_token_seconds_count [1-9]\d*/);
      assert.match(m, /poot_inter_token_latency_seconds_bucket\{le="\+Inf"\} [1-9]\d*/);
      assert.match(m, /poot_queue_depth 0/);
    } finally {
      await s.stop();
    }
  });

  test(`serve over HTTP on ${backend}: clients leaving non-streamed requests are dropped and their blocks freed`, { skip }, async () => {
    const s = await start(dev as Device, { slots: 4 });
    try {
      const gauge = async (name: string) => {
        const m = await (await fetch(`${s.base}/metrics`, { headers: { authorization: `Bearer ${KEY}` } })).text();
        return Number(m.split("\n").find((l) => l.startsWith(`${name} `))!.split(" ")[1]);
      };
      const acs = Array.from({ length: 6 }, () => new AbortController());
      const reqs = acs.map((ac) =>
        fetch(`${s.base}/v1/completions`, {
          method: "POST", signal: ac.signal, headers: { authorization: `Bearer ${KEY}` },
          body: JSON.stringify({ prompt: "Once upon a time", max_tokens: 120, temperature: 0 }),
        }).catch((e) => e as Error)
      );
      while (await gauge("poot_generation_tokens_total") < 4) await new Promise((r) => setTimeout(r, 5));
      acs.forEach((ac) => ac.abort());
      for (const r of await Promise.all(reqs)) assert.ok(r instanceof Error, "the client aborted");
      // Bounded by time, not by a count of 10 ms polls (3 s, which a loaded machine's lavapipe steps came near);
      // the token count below says the aborted requests stopped early.
      for (const until = performance.now() + 30_000; performance.now() < until && (await gauge("poot_running_sequences") > 0 || await gauge("poot_queue_depth") > 0);) {
        await new Promise((r) => setTimeout(r, 10));
      }
      assert.equal(await gauge("poot_running_sequences"), 0);
      assert.equal(await gauge("poot_queue_depth"), 0);
      assert.equal(await gauge("poot_kv_blocks_used"), 0);
      assert.ok(await gauge("poot_generation_tokens_total") < 6 * 120, "generation stopped early");
    } finally {
      await s.stop();
    }
  });

  test(`serve over HTTP on ${backend}: a full queue answers 429 with Retry-After; shutdown ends streams within its bound`, { skip }, async () => {
    const s = await start(dev as Device, { slots: 1, maxQueue: 1 });
    try {
      const body = { prompt: "Once upon a time", max_tokens: 30, temperature: 0 };
      const rs = await Promise.all(Array.from({ length: 6 }, () => s.post("/v1/completions", body)));
      const codes = rs.map((r) => r.status).sort();
      assert.ok(codes.includes(200) && codes.includes(429), `statuses ${codes}`);
      for (const r of rs) {
        if (r.status === 429) {
          assert.match(r.headers.get("retry-after") ?? "", /^\d+$/);
          assert.equal((await r.json() as { error: { code: string } }).error.code, "queue_full");
        } else await r.body?.cancel();
      }
      // A long stream in flight, then shutdown with a short bound: the stream ends (an error event), health says 503.
      const r = await s.post("/v1/completions", { prompt: "Once", max_tokens: 120, temperature: 0, stream: true });
      assert.equal(r.status, 200);
      const reader = r.body!.getReader();
      await reader.read();
      const t0 = performance.now();
      const down = s.server.shutdown(100);
      assert.equal((await fetch(`${s.base}/health`)).status, 503);
      let all = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        all += new TextDecoder().decode(value);
      }
      await down;
      assert.ok(performance.now() - t0 < 10_000);
      assert.match(all, /shut down|\[DONE\]/);
    } finally {
      await s.stop().catch(() => {});
    }
  });
}

// A chat template's special tokens (<|im_start|> ...) are tokens, not text: the prompt the server runs is the one
// transformers' apply_chat_template gives (the qwen2 fixture's recorded ids), whatever device serves it.
const qwenDir = fileURLToPath(new URL("../families/fixtures/qwen2/", import.meta.url));
test("serve chat on js: the prompt is the chat template's tokens as transformers encodes them (special tokens parsed, no BOS added)", async () => {
  const dev = await openDevice("js");
  const s = await start(dev as Device, {}, loadModel(qwenDir));
  try {
    const exp = JSON.parse(readFileSync(qwenDir + "expected.json", "utf8")) as { chats: { messages: { role: string; content: string }[]; ids: number[] }[] };
    for (const c of exp.chats) {
      const res = await s.post("/v1/chat/completions", { model: s.server.modelId, messages: c.messages, max_tokens: 1, temperature: 0 });
      assert.equal(res.status, 200, await res.clone().text());
      const body = await res.json() as { usage: { prompt_tokens: number } };
      assert.equal(body.usage.prompt_tokens, c.ids.length, `prompt of ${JSON.stringify(c.messages)}`);
    }
  } finally {
    await s.stop();
  }
});

