// The server's sampler fields (issue 17) through the official openai client on a real loopback server, JS device
// (stories260K; the device sampler itself is held to its oracle on every device by tests/sampling/):
// - logprobs: chat `logprobs` + `top_logprobs` and completions `logprobs: N`, stream and not: every token has its
//   logprob, N top entries in descending order, and the greedy token is the first top entry with its logprob;
//   the same request run through the Driver gives the same logprobs (batch path == single path);
// - response_format json_schema (8 requests at temperature 1, concurrent, so their masks share steps) all
//   parse and validate; a `grammar` admitting one string yields it;
// - logit_bias -100 on the greedy text's first token changes the text; min_tokens keeps EOS away;
//   penalties change a greedy continuation; the server keeps serving.
import { test } from "node:test";
import assert from "node:assert/strict";
import OpenAI from "openai";
import { z } from "zod";
import { Engine } from "../../backends/executor.ts";
import { JsDevice } from "../../backends/js/device.ts";
import { compileGraph } from "../../kernels/lower.ts";
import { Driver } from "../../llm/driver.ts";
import { servingCompile } from "../../llm/serve/batch.ts";
import { listen } from "../../llm/serve/listen.ts";
import { Server } from "../../llm/serve/server.ts";
import { model } from "./setup.ts";

const SCHEMA = {
  type: "object",
  properties: { name: { type: "string", maxLength: 10 }, n: { type: "integer", minimum: 0, maximum: 99 }, ok: { type: "boolean" } },
  required: ["name", "n", "ok"],
  additionalProperties: false,
};
const Zod = z.object({ name: z.string().refine((s) => [...s].length <= 10), n: z.number().int().min(0).max(99), ok: z.boolean() }).strict();

test("serve: logprobs, logit_bias, penalties, min_tokens, response_format and grammar over HTTP (js)", { timeout: 600_000 }, async () => {
  const exec = new Engine(new JsDevice({}), { compile: servingCompile, timeoutMs: 120_000 });
  const server = await Server.open(model, exec, { ctx: 256, slots: 8, chunk: 16, kvBlocks: 8 * 16 + 1 });
  const l = await listen(server.handler, { hostname: "127.0.0.1", port: 0 });
  const client = new OpenAI({ baseURL: `http://127.0.0.1:${l.port}/v1`, apiKey: "none", maxRetries: 0 });
  const id = server.modelId;
  try {
    // completions logprobs N
    const c = await client.completions.create({ model: id, prompt: "Once upon a time", max_tokens: 8, temperature: 0, logprobs: 3 });
    const lp = c.choices[0].logprobs!;
    assert.equal(lp.tokens!.length, 8);
    assert.equal(lp.tokens!.join(""), c.choices[0].text);
    for (let i = 0; i < 8; i++) {
      const top = Object.entries(lp.top_logprobs![i]);
      assert.equal(top.length, 3);
      assert.ok(top[0][1] >= top[1][1] && top[1][1] >= top[2][1], "descending");
      assert.equal(top[0][0], lp.tokens![i], "greedy = the most likely");
      assert.equal(top[0][1], lp.token_logprobs![i]);
      assert.ok(lp.token_logprobs![i] <= 0);
    }
    // the same through the Driver (the single-sequence path): same tokens, same logprobs within 1e-5
    let first: number;
    {
      const de = new Engine(new JsDevice({}), { compile: compileGraph });
      const d = await Driver.open(model, de, { ctx: 64, prefill: [4] });
      const r = await d.generate("Once upon a time", { maxTokens: 8, sampler: { temperature: 0, topLogprobs: 3 } });
      await d.close();
      assert.equal(r.text, c.choices[0].text);
      first = r.generatedIds[0];
      r.logprobs!.forEach((x, i) => assert.ok(Math.abs(x.logprob - lp.token_logprobs![i]) <= 1e-5, `token ${i}: ${x.logprob} vs ${lp.token_logprobs![i]}`));
    }

    // chat logprobs, streamed
    const stream = await client.chat.completions.create({
      model: id, messages: [{ role: "user", content: "A cat" }], max_completion_tokens: 6, temperature: 0.8, seed: 3,
      logprobs: true, top_logprobs: 2, stream: true,
    });
    let tokens = 0, text = "";
    for await (const ch of stream) {
      const ch0 = ch.choices[0];
      if (!ch0) continue;
      text += ch0.delta.content ?? "";
      for (const t of ch0.logprobs?.content ?? []) {
        tokens++;
        assert.equal(t.top_logprobs.length, 2);
        assert.ok(t.logprob <= 0 && t.top_logprobs[0].logprob >= t.top_logprobs[1].logprob);
        assert.ok(t.logprob <= t.top_logprobs[0].logprob + 1e-6);
      }
    }
    assert.equal(tokens, 6);
    assert.ok(text.length > 0);

    // logit_bias against the greedy continuation's first token changes it; min_tokens; penalties
    const plain = await client.completions.create({ model: id, prompt: "Once upon a time", max_tokens: 12, temperature: 0 });
    const biased = await client.completions.create({ model: id, prompt: "Once upon a time", max_tokens: 12, temperature: 0, logit_bias: { [first]: -100 } });
    assert.notEqual(biased.choices[0].text.slice(0, 6), plain.choices[0].text.slice(0, 6));
    // penalties: the server counts tokens on the host (sparse entries), the Driver in device State; both agree
    const de = new Engine(new JsDevice({}), { compile: compileGraph });
    const d = await Driver.open(model, de, { ctx: 128, prefill: [16, 4] });
    try {
      for (const [req, sampler] of [
        [{ frequency_penalty: 2, presence_penalty: 2 }, { frequencyPenalty: 2, presencePenalty: 2 }],
        [{ repetition_penalty: 1.8 }, { repeatPenalty: 1.8 }],
        [{ frequency_penalty: 0.8, repetition_penalty: 1.3, seed: 5, temperature: 0.9 }, { frequencyPenalty: 0.8, repeatPenalty: 1.3, seed: 5, temperature: 0.9 }],
      ] as const) {
        const pen = await client.completions.create({ model: id, prompt: "Once upon a time", max_tokens: 40, temperature: 0, ...req } as never);
        const mine = await d.generate("Once upon a time", { maxTokens: 40, sampler: { temperature: 0, ...sampler } });
        assert.equal(pen.choices[0].text, mine.text, JSON.stringify(req));
        assert.notEqual(pen.choices[0].text, plain.choices[0].text.slice(0, pen.choices[0].text.length) + "x");
      }
      const unpen = await d.generate("Once upon a time", { maxTokens: 40 });
      const pen = await d.generate("Once upon a time", { maxTokens: 40, sampler: { frequencyPenalty: 2, presencePenalty: 2 } });
      assert.notEqual(pen.text, unpen.text, "penalties change a greedy continuation");
    } finally {
      await d.close();
    }
    const long = await client.completions.create({ model: id, prompt: "The end.", max_tokens: 30, temperature: 0, min_tokens: 30 } as never);
    assert.equal(long.usage!.completion_tokens, 30);
    assert.equal(long.choices[0].finish_reason, "length");

    // json_schema, 8 concurrent requests at T 1: all parse and validate
    const outs = await Promise.all(Array.from({ length: 8 }, (_, seed) =>
      client.chat.completions.create({
        model: id, messages: [{ role: "user", content: "Give me a person." }], max_completion_tokens: 120, temperature: 1, seed,
        response_format: { type: "json_schema", json_schema: { name: "person", schema: SCHEMA } },
      })
    ));
    for (const [i, o] of outs.entries()) {
      assert.equal(o.choices[0].finish_reason, "stop", `request ${i}: ${o.choices[0].message.content}`);
      const v = Zod.safeParse(JSON.parse(o.choices[0].message.content!));
      assert.ok(v.success, `request ${i}: ${o.choices[0].message.content}`);
    }
    const g = await client.completions.create({ model: id, prompt: "Once", max_tokens: 40, temperature: 1, grammar: 'root ::= "The cat sat."' } as never);
    assert.equal(g.choices[0].text, "The cat sat.");
    assert.equal(g.choices[0].finish_reason, "stop");
  } finally {
    await server.shutdown(0);
    await l.close();
  }
});
