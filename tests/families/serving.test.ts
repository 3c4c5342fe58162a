// Tier 3 against transformers through the server's batched step (llm/serve: paged K/V, one batch entry for all
// rows): every family fixture's prompts and chats submitted at once, greedy, each sequence's tokens equal to
// transformers' 48 (fixtures/SOURCE.md) up to its end-of-generation token, except after a near tie (the margin rule
// of fixtures.ts). Gemma 2's soft-capped scores, and the sliding windows of Mistral, Gemma 2 and Gemma 3 (8
// positions in these fixtures, so the prompts run past them), go through paged_attention's window and softcap. On
// every backend present (POOT_BACKENDS; a missing device is a skip); POOT_FAMILIES limits the families.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Engine, loadModel } from "../../engine.ts";
import { GREEDY } from "../../llm/sampling.ts";
import { servingCompile } from "../../llm/serve/batch.ts";
import { Server } from "../../llm/serve/server.ts";
import { type BackendName, openDevice, selectedBackends, slowDevice } from "../devices/index.ts";
import { collect } from "../serve/setup.ts";
import { expected, FAMILY_DIRS, FIXTURES, MARGIN } from "./fixtures.ts";

const families = (process.env.POOT_FAMILIES?.split(",") ?? FAMILY_DIRS).filter((f) => FAMILY_DIRS.includes(f));

for (const backend of selectedBackends()) {
  let dev: Awaited<ReturnType<typeof openDevice>> | undefined = await openDevice(backend as BackendName);
  const skip = typeof dev === "string" ? dev : false;
  for (const family of families) {
    test(`${family} on ${backend}, served in one batch: greedy tokens equal transformers' up to the end of generation`, { skip: skip || slowDevice(dev!), timeout: 600_000 }, async () => {
      // Shutting a server down ends its device: each family gets a fresh one (the probe serves the first).
      const d = dev ?? await openDevice(backend as BackendName);
      dev = undefined;
      if (typeof d === "string") throw new Error(d);
      const model = loadModel(`${FIXTURES}${family}`), exp = expected(family);
      const seqs = [...exp.prompts, ...exp.chats];
      const server = await Server.open(model, new Engine(d, { compile: servingCompile, timeoutMs: 300_000 }), { ctx: 128, slots: 4, chunk: 8 });
      try {
        const eog = model.tokenizer.eog;
        const got = await Promise.all(seqs.map((s) => collect(server.sched.submit({ promptIds: s.ids, maxTokens: exp.steps, sampler: GREEDY }))));
        got.forEach((g, i) => {
          const ref = seqs[i], what = `${family} ${backend} sequence ${i}`;
          const at = g.ids.findIndex((t, j) => t !== ref.greedy[j]);
          const tail = `\nours ${g.ids.join(",")}\nref  ${ref.greedy.join(",")}`;
          if (at >= 0) {
            assert.ok(ref.margins[at] < MARGIN, `${what}: token ${at} is ${g.ids[at]}, transformers ${ref.greedy[at]} (top-two margin ${ref.margins[at].toFixed(4)})${tail}`);
            return;
          }
          // no difference: all 48 tokens, or an end of generation where transformers' next token is one (or a near tie)
          const n = g.ids.length;
          if (n < exp.steps) assert.ok(g.finish === "stop" && (eog.has(ref.greedy[n]) || ref.margins[n] < MARGIN), `${what}: ended after ${n} tokens (${g.finish})${tail}`);
        });
      } finally {
        await server.shutdown(0);
        model.close();
      }
    });
  }
}
