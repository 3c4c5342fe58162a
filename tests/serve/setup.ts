// Shared set-up of the server tests: stories260K on a test device, the serving engine, runner, pool and
// scheduler, and a list of prompts of mixed lengths.
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import type { Device } from "../../backends/device.ts";
import { Engine } from "../../backends/executor.ts";
import { loadModel, type ModelHandle } from "../../llm/model.ts";
import { BatchRunner, servingCompile } from "../../llm/serve/batch.ts";
import { Metrics } from "../../llm/serve/metrics.ts";
import { BlockPool, planPool } from "../../llm/serve/pool.ts";
import { Scheduler, type SequenceHandle } from "../../llm/serve/scheduler.ts";
import { sharingKernels } from "../devices/kernel_cache.ts";

export const MODEL_PATH = fileURLToPath(new URL("../../models/stories260K/stories260K.gguf", import.meta.url));
export const model: ModelHandle = loadModel(MODEL_PATH);

export interface Rig {
  engine: Engine<Device>;
  runner: BatchRunner;
  pool: BlockPool;
  metrics: Metrics;
  sched: Scheduler;
}

/** A serving engine for stories260K on `dev` (its entries compiled) and a scheduler over it; the context is ctx rounded up to whole blocks. */
export async function rig(dev: Device, o: { slots?: number; chunk?: number; ctx?: number; blocks?: number; block?: number; maxQueue?: number; prefixCache?: boolean; countWrites?: number } = {}): Promise<Rig> {
  const engine = new Engine(dev, { compile: sharingKernels(servingCompile), timeoutMs: 120_000, ownsDevice: false });
  const slots = o.slots ?? 16, chunk = o.chunk ?? 16, ctx = o.ctx ?? 256;
  const plan = planPool({ layers: model.config.layers, kvHeads: model.config.kvHeads, headDim: model.config.headDim, elemBytes: 4 }, {
    ctx, slots, block: o.block ?? 16, fraction: 0.5, memory: dev.target.memory, blocks: o.blocks,
  });
  return rigOver(await BatchRunner.open(model, engine, { slots, chunk, pool: plan, countWrites: o.countWrites }), o);
}

/**
 * A fresh scheduler, block pool and metrics over a runner already compiled (a test reusing a serving engine
 * instead of compiling its six entries again: on lavapipe that compile is most of a test's time). The device
 * State (K/V pool, token counts) is zeroed and the count rows freed, as a new engine's would be; the context is
 * the one the runner was compiled for.
 */
export function rigOver(runner: BatchRunner, o: { maxQueue?: number; prefixCache?: boolean } = {}): Rig {
  const { slots, chunk, pool: plan } = runner.opts;
  runner.exec.resetState();
  runner.counts.reset();
  const pool = new BlockPool(plan.blocks);
  const metrics = new Metrics();
  const sched = new Scheduler(model, runner, pool, metrics, { slots, chunk, maxQueue: o.maxQueue ?? 256, ctx: plan.maxBlocks * plan.block, prefixCache: o.prefixCache });
  return { engine: runner.exec as Engine<Device>, runner, pool, metrics, sched };
}

/** Runs a handle to its end: generated ids, text and finish reason (throws on an error event). */
export async function collect(h: SequenceHandle): Promise<{ ids: number[]; text: string; finish: string }> {
  let text = "";
  for await (const e of h) {
    if (e.type === "token") text += e.text;
    else if (e.type === "error") throw e.error;
    else {
      assert.equal(text + e.tail, e.text, "streamed pieces add up to the text");
      return { ids: e.tokenIds, text: e.text, finish: e.finish };
    }
  }
  throw new Error("sequence ended without a done event");
}

const WORDS = ["Once upon a time", "The little dog", "Lily and Tom went to the park", "One day, a big bird", "Sam", "The sun was"];
/** Prompt i of a mixed set: lengths from 1 to about 40 tokens. */
export function prompt(i: number): string {
  const base = WORDS[i % WORDS.length];
  return i % 5 === 4 ? `${base}. ${WORDS[(i + 1) % WORDS.length]} and ${WORDS[(i + 2) % WORDS.length]}, ${WORDS[(i + 3) % WORDS.length]}` : base;
}
