// Tier 3 against transformers, for every family: the random-weight checkpoints in fixtures/ (written by
// transformers 5.17 itself, see fixtures/SOURCE.md) load from their Hugging Face folders; prompt ids equal the
// HF tokenizer's, chat prompt ids equal apply_chat_template(..., add_generation_prompt=True), the first
// prompt's next-token logits are within a stated tolerance of transformers' fp32 ones, and 48 greedy tokens equal
// transformers' except after a near tie (reference top-two margin below MARGIN at that step, after which the
// sequences may part). On every backend present (POOT_BACKENDS selects; a missing device is a skip).
// POOT_FAMILIES=llama,qwen2 limits the families.
import { test } from "node:test";
import assert from "node:assert/strict";
import { compileGraph, Driver, Engine, loadModel } from "../../engine.ts";
import type { ModelHandle } from "../../llm/model.ts";
import { chatTokens } from "../../llm/chat.ts";
import { type BackendName, openDevice, selectedBackends, slowDevice } from "../devices/index.ts";
import { constsFromStore, evaluate } from "../../graph/eval.ts";
import { ATOL, compareGreedy, expected, FAMILY_DIRS, FIXTURES, RTOL } from "./fixtures.ts";
import { dtypesFromStore } from "../../llm/families/family.ts";

const families = (process.env.POOT_FAMILIES?.split(",") ?? FAMILY_DIRS).filter((f) => FAMILY_DIRS.includes(f));
const models = new Map<string, ModelHandle>(families.map((f) => [f, loadModel(`${FIXTURES}${f}`)]));

for (const family of families) {
  const model = models.get(family)!, exp = expected(family);
  test(`${family}: prompt ids equal the HF tokenizer's, chat ids equal apply_chat_template`, () => {
    for (const p of exp.prompts) assert.deepEqual(model.tokenizer.encode(p.text), p.ids, JSON.stringify(p.text));
    for (const c of exp.chats) assert.deepEqual(chatTokens(model, c.messages), c.ids, JSON.stringify(c.text));
  });
  test(`${family}: the traced step's next-token logits (oracle) are within tolerance of transformers' fp32`, { timeout: 120_000 }, () => {
    const first = exp.prompts[0], R = first.ids.length;
    const { tracer, logits } = model.family.trace(model.config, { rows: R, cap: 64 }, { dtypeOf: dtypesFromStore(model.store, model.map) });
    tracer.output("logits", tracer.slice(logits, 0, R - 1, R));
    const got = evaluate(tracer.build(), {
      consts: constsFromStore(model.store, model.map),
      slots: { token: Int32Array.from(first.ids), pos: new Int32Array([0]) },
    }).output.logits as Float32Array;
    assert.equal(got.length, first.logits!.length);
    for (let i = 0; i < got.length; i++) {
      const want = first.logits![i], tol = ATOL + RTOL * Math.abs(want);
      assert.ok(Number.isFinite(got[i]) && Math.abs(got[i] - want) <= tol, `logit ${i}: ${got[i]} vs transformers ${want} (tolerance ${tol})`);
    }
  });
}

/**
 * A WebGPU adapter that binds 16 storage buffers per stage (Deno's software fallback without Vulkan) cannot run
 * the fused q/k/v gemv of a model with q/k/v bias (17 buffers): the engine refuses it as Unsupported, which is
 * what a user gets there; the test says so rather than fail.
 */
function bindingLimit(dev: Awaited<ReturnType<typeof openDevice>>, family: string): string | false {
  if (typeof dev === "string" || !models.get(family)!.config.qkvBias) return false;
  const lim = (dev as { gpu?: { limits?: { maxStorageBuffersPerShaderStage?: number } } }).gpu?.limits?.maxStorageBuffersPerShaderStage;
  return lim !== undefined && lim < 17 ? `${dev.target.device} binds ${lim} storage buffers per stage; the fused q/k/v gemv with bias needs 17` : false;
}

for (const backend of selectedBackends()) {
  let dev: Awaited<ReturnType<typeof openDevice>> | undefined = await openDevice(backend as BackendName);
  const skip = typeof dev === "string" ? dev : false;
  for (const family of families) {
    // A software fallback adapter runs each family for tens of seconds: skipped there, said (lavapipe runs them).
    const limit = skip || slowDevice(dev!) || bindingLimit(dev, family);
    test(`${family} on ${backend}: 48 greedy tokens of every prompt and chat equal transformers'`, { skip: limit, timeout: 600_000 }, async () => {
      // Unloading an engine ends its device: each family gets a fresh one (the probe serves the first).
      const d = dev ?? await openDevice(backend as BackendName);
      dev = undefined;
      if (typeof d === "string") throw new Error(d);
      const model = models.get(family)!, exp = expected(family);
      const engine = new Engine(d, { compile: compileGraph });
      try {
        const driver = await Driver.open(model, engine, { ctx: 128, prefill: [8] });
        for (const [i, seq] of [...exp.prompts, ...exp.chats].entries()) {
          const r = await driver.generate(seq.ids, { maxTokens: exp.steps, ignoreEos: true });
          compareGreedy(r.generatedIds, seq, `${family} ${backend} sequence ${i}`);
        }
      } finally {
        await engine.unload();
      }
    });
  }
}
