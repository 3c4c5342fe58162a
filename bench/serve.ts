// Serving benchmark: the scheduler and batched step (llm/serve) at real shapes with deterministic random
// weights, no HTTP in the way. For each concurrency, that many requests of `prompt` random token ids and `gen`
// new tokens arrive at once; we report aggregate generated tok/s, time to first token (mean, p50, p99) and
// inter-token latency (p50, p99) over all requests, and, separately, one decode step's time at batch 32 over
// batch 1 (the goal: at most 1.6x, so 32 streams give 20x the throughput of one).
//
//   deno run -A bench/serve.ts --shape llama-3.2-1b,llama-3-8b --backend ptx            (the H200 table)
//   deno run -A bench/serve.ts --shape stories260K --backend js --prompt 32 --gen 8 --concurrency 1,4
//   --matmul-tile 32: matmuls carry 32 rows a pass (W read once for a decode batch of 32; default 8)
//   --mma off: the FMA matmul instead of the tensor-core one (default on where the device has MMA tiles, or
//   cooperative matrices on Vulkan: kernels/lib/coop_serving.ts);
//   --mma-split off: x rounded once to bf16 in the MMA instead of hi + lo; --concurrency none: step times only
//   --tune ks16/s1x4/b4x1: the serving MMA matmuls' layout (bench/serve_kernels.ts --tune)
//   --dtype q4_k_m|q8_0|...: synthetic weights of a GGUF block type or mix (default bf16); --mma-blocks: their
//   matmuls on the register-operand MMA kernel ("mma", the default), the staged one ("staged": CompileOptions
//   .mmaBlocks "all") or the FMA kernel ("off")
//   --sampler full: every request with T 0.8, top-k 40, penalties, 50 logit-bias entries and top-5 logprobs
//   (the batched full sampler: per-slot token counts in device State; compare with the greedy rows)
// Each concurrency row also says µs per step inside the batched step and around it (the scheduler loop) and the
// slot bytes uploaded per step.
import { exit } from "node:process";
import { parseArgs } from "node:util";
import { writeFileSync } from "node:fs";
import { Engine } from "../backends/executor.ts";
import { type BackendChoice, openBackend } from "../backends/open.ts";
import type { ModelHandle } from "../llm/model.ts";
import { BatchRunner, servingCompileWith } from "../llm/serve/batch.ts";
import { Metrics } from "../llm/serve/metrics.ts";
import { BlockPool, planPool } from "../llm/serve/pool.ts";
import { Scheduler } from "../llm/serve/scheduler.ts";
import { type SyntheticDtype, syntheticLlama } from "../llm/synthetic.ts";
import { syntheticDtype } from "./flags.ts";
import { familyOf } from "../llm/registry.ts";
import type { Tokenizer } from "../llm/tokenizer/mod.ts";
import type { SamplerParams } from "../llm/sampling.ts";
import { isShapeName, SHAPES } from "./shapes.ts";
import { parseTune } from "./serve_kernels.ts";
import type { MmaServingTune } from "../kernels/lib/mma_matmul.ts";

export interface ServeBenchOptions {
  shapes: string[];
  backend: BackendChoice;
  concurrency: number[];
  prompt: number;
  gen: number;
  chunk: number;
  kvDtype: "f16" | "f32";
  /** Timed reps of the batch-1 and batch-32 decode step. */
  stepReps: number;
  /** Batch rows per matmul pass (default the kernel library's 8: W is read ceil(rows / tile) times a step). */
  matmulTile?: number;
  /** Tensor-core matmuls (default "all" where the device has them; servingCompile). */
  mma?: "all" | "off";
  mmaSplit?: boolean;
  /** Layout of the serving MMA matmuls (bench/serve_kernels.ts --tune syntax; default the library's). */
  mmaServing?: MmaServingTune;
  /** The synthetic weights' type (default bf16; a GGUF block type or mix such as q4_k_m). */
  dtype?: SyntheticDtype;
  /** Block weights' matmuls (CompileOptions.mmaBlocks): the register-operand MMA kernel (true, default), staged ("all"), FMA (false). */
  mmaBlocks?: boolean | "all";
  /** The requests' sampler: greedy (default), or "full": T 0.8, top-k 40, penalties, 50 bias entries, top-5 logprobs. */
  sampler?: "greedy" | "full";
  log: (s: string) => void;
}

export interface ServeRow {
  shape: string;
  backend: string;
  concurrency: number;
  tokPerSec: number;
  ttftMeanMs: number;
  ttftP50Ms: number;
  ttftP99Ms: number;
  itlP50Ms: number;
  itlP99Ms: number;
  wallSeconds: number;
  /** Batched steps the round took. */
  steps: number;
  /** Mean µs per step spent inside BatchRunner.step (slot encoding, the replay, the wait, readback). */
  stepMicros: number;
  /** Mean µs per step outside it: the scheduler loop (planning, yielding to I/O, events to the streams). */
  loopMicros: number;
  /** Mean slot bytes written to the device per step. */
  uploadBytesPerStep: number;
}

export interface StepRow {
  shape: string;
  backend: string;
  batch1Ms: number;
  batch32Ms: number;
  ratio: number;
  /** Of each step, ms waiting for the device (Engine's synchronize: about the device time) at batch 1 and 32. */
  batch1WaitMs: number;
  batch32WaitMs: number;
}

// The scheduler streams text; random weights have no tokenizer, so text is empty and nothing ends early.
const NO_TEXT = {
  decoder: () => ({ push: () => "", flush: () => "" }),
  isEog: () => false,
  eog: new Set<number>(),
} as unknown as Tokenizer;

/** A Markdown table (pasteable into README). */
function formatTable(head: string[], rows: string[][]): string {
  const line = (xs: string[]) => `| ${xs.join(" | ")} |`;
  return [line(head), line(head.map(() => "---")), ...rows.map(line)].join("\n");
}

function pct(xs: number[], p: number): number {
  if (!xs.length) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(p * (s.length - 1) + 0.5))];
}

function rng(seed: number): () => number {
  let s = seed >>> 0 || 1;
  return () => {
    s ^= s << 13; s >>>= 0; s ^= s >>> 17; s ^= s << 5; s >>>= 0;
    return s / 2 ** 32;
  };
}

/** The "full" sampler of --sampler full (issue 17's full sampler, per request; counts in device State per slot). */
function fullSampler(vocab: number): SamplerParams {
  const logitBias = Object.fromEntries(Array.from({ length: 50 }, (_, i) => [(i * 2503) % vocab, (i % 5) - 2]));
  return { temperature: 0.8, topK: 40, seed: 1, repeatPenalty: 1.1, frequencyPenalty: 0.5, presencePenalty: 0.5, logitBias, topLogprobs: 5 };
}

export async function runServeBench(o: ServeBenchOptions): Promise<{ rows: ServeRow[]; steps: StepRow[] }> {
  const rows: ServeRow[] = [], steps: StepRow[] = [];
  for (const name of o.shapes) {
    if (!isShapeName(name)) throw new RangeError(`unknown shape ${name}: ${Object.keys(SHAPES).join(", ")}`);
    const c = SHAPES[name];
    const syn = syntheticLlama(c, { dtype: o.dtype ?? "bf16", scratch: true });
    const model = { arch: "llama", family: familyOf("llama"), config: c, store: syn.store, map: syn.map, tokenizer: NO_TEXT, path: name } as unknown as ModelHandle;
    const slots = Math.max(32, ...o.concurrency);
    const block = 16, ctx = Math.ceil((o.prompt + o.gen + 1) / block) * block;
    const exec = new Engine(await openBackend(o.backend), { compile: servingCompileWith({ matmulTile: o.matmulTile, mma: o.mma, mmaSplit: o.mmaSplit, mmaServing: o.mmaServing, mmaBlocks: o.mmaBlocks }) });
    try {
      const t0 = performance.now();
      const plan = planPool({ layers: c.layers, kvHeads: c.kvHeads, headDim: c.headDim, elemBytes: o.kvDtype === "f16" ? 2 : 4 }, {
        ctx, slots, block, fraction: 1, memory: { totalBytes: Infinity }, blocks: slots * Math.ceil(ctx / block) + 1,
      });
      const runner = await BatchRunner.open(model, exec, { slots, chunk: o.chunk, pool: plan, kvDtype: o.kvDtype });
      const backend = exec.targetSet().backend;
      o.log(`${name} on ${backend}: loaded and recorded ${runner.sizes.length} entries (${runner.sizes.join(", ")}) in ` +
        `${((performance.now() - t0) / 1000).toFixed(1)} s; KV pool ${plan.blocks} blocks (${(plan.bytes / 2 ** 30).toFixed(2)} GiB)`);
      const pool = new BlockPool(plan.blocks);
      // Time inside the batched step, so the table can split a step into the step itself and the loop around it.
      let inStep = 0;
      const step = runner.step.bind(runner);
      runner.step = async (rows, at, opts) => {
        const t = performance.now();
        try {
          return await step(rows, at, opts);
        } finally {
          inStep += performance.now() - t;
        }
      };
      const metrics = new Metrics();
      const sched = new Scheduler(model, runner, pool, metrics, { slots, chunk: o.chunk, maxQueue: 1 << 20, ctx });
      const r = rng(1);
      const promptIds = () => Array.from({ length: o.prompt }, () => 1 + Math.floor(r() * (c.vocab - 1)));

      // Decode step at batch 1 and 32: rows at position `prompt` of distinct sequences (blocks 1.. of the pool).
      const maxB = Math.ceil(ctx / block);
      const decodeRows = (n: number) => Array.from({ length: n }, (_, i) => ({
        token: 1 + i, pos: o.prompt, sampler: { temperature: 0 },
        table: Array.from({ length: maxB }, (_, j) => 1 + i * maxB + j),
      }));
      // the Engine's wait for the device within each step (the rest of a step is host work: slots, readback)
      let waited = 0;
      const estep = exec.step.bind(exec);
      exec.step = async (...a: Parameters<typeof exec.step>) => {
        const r = await estep(...a);
        waited += r.waitMicros / 1000;
        return r;
      };
      const timeStep = async (n: number) => {
        const rs = decodeRows(n);
        const all = rs.map((_, i) => i);
        for (let i = 0; i < 3; i++) await runner.step(rs, all);
        const t = performance.now(), w0 = waited;
        for (let i = 0; i < o.stepReps; i++) await runner.step(rs, all);
        return { ms: (performance.now() - t) / o.stepReps, wait: (waited - w0) / o.stepReps };
      };
      const b1 = await timeStep(1), b32 = await timeStep(32);
      steps.push({ shape: name, backend, batch1Ms: b1.ms, batch32Ms: b32.ms, ratio: b32.ms / b1.ms, batch1WaitMs: b1.wait, batch32WaitMs: b32.wait });
      o.log(`  decode step: batch 1 ${b1.ms.toFixed(3)} ms (device wait ${b1.wait.toFixed(3)}), batch 32 ${b32.ms.toFixed(3)} ms ` +
        `(device wait ${b32.wait.toFixed(3)}): ${(b32.ms / b1.ms).toFixed(2)}x`);
      exec.resetState();

      // Warm-up request, then each concurrency.
      if (o.concurrency.length === 0) {
        await sched.shutdown(0);
        continue;
      }
      for await (const _ of sched.submit({ promptIds: promptIds(), maxTokens: 4, sampler: { temperature: 0 } })) { /* drain */ }
      for (const conc of o.concurrency) {
        const ttft: number[] = [], itl: number[] = [];
        let generated = 0;
        const steps0 = metrics.steps, inStep0 = inStep, up0 = runner.uploaded.bytes, ups0 = runner.uploaded.steps;
        const start = performance.now();
        await Promise.all(Array.from({ length: conc }, async () => {
          const t = performance.now();
          let last = 0;
          const sampler = o.sampler === "full" ? fullSampler(c.vocab) : { temperature: 0 };
          for await (const e of sched.submit({ promptIds: promptIds(), maxTokens: o.gen, sampler })) {
            if (e.type === "error") throw e.error;
            if (e.type !== "token") continue;
            const now = performance.now();
            if (last === 0) ttft.push(now - t);
            else itl.push(now - last);
            last = now;
            generated++;
          }
        }));
        const wall = (performance.now() - start) / 1000;
        const nSteps = metrics.steps - steps0, stepMs = inStep - inStep0;
        const row: ServeRow = {
          shape: name, backend, concurrency: conc, tokPerSec: generated / wall,
          ttftMeanMs: ttft.reduce((a, b) => a + b, 0) / ttft.length, ttftP50Ms: pct(ttft, 0.5), ttftP99Ms: pct(ttft, 0.99),
          itlP50Ms: pct(itl, 0.5), itlP99Ms: pct(itl, 0.99), wallSeconds: wall, steps: nSteps,
          stepMicros: (1000 * stepMs) / nSteps, loopMicros: (1000 * (wall * 1000 - stepMs)) / nSteps,
          uploadBytesPerStep: (runner.uploaded.bytes - up0) / Math.max(1, runner.uploaded.steps - ups0),
        };
        rows.push(row);
        o.log(`  concurrency ${conc}: ${row.tokPerSec.toFixed(1)} tok/s, TTFT p50 ${row.ttftP50Ms.toFixed(1)} p99 ${row.ttftP99Ms.toFixed(1)} ms, ` +
          `ITL p50 ${row.itlP50Ms.toFixed(2)} ms p99 ${row.itlP99Ms.toFixed(2)} ms, step ${row.stepMicros.toFixed(0)} µs, loop ${row.loopMicros.toFixed(0)} µs`);
      }
      await sched.shutdown(0);
    } finally {
      await exec.unload();
    }
  }
  return { rows, steps };
}

export async function main(args: string[]): Promise<number> {
  const { values } = parseArgs({
    args, strict: true, allowPositionals: false,
    options: {
      shape: { type: "string", default: "llama-3.2-1b,llama-3-8b" },
      backend: { type: "string", default: "auto" },
      concurrency: { type: "string", default: "1,8,32,64" },
      prompt: { type: "string", default: "512" },
      gen: { type: "string", default: "128" },
      chunk: { type: "string", default: "128" },
      "kv-type": { type: "string", default: "f16" },
      "step-reps": { type: "string", default: "20" },
      "matmul-tile": { type: "string" },
      mma: { type: "string", default: "on" },
      "mma-split": { type: "string", default: "on" },
      sampler: { type: "string", default: "greedy" },
      tune: { type: "string", default: "default" },
      dtype: { type: "string", default: "bf16" },
      "mma-blocks": { type: "string", default: "mma" },
      out: { type: "string" },
    },
  });
  const n = (v: string, what: string) => {
    const x = Number(v);
    if (!Number.isInteger(x) || x < 1) throw new RangeError(`--${what}: ${v} is not a positive integer`);
    return x;
  };
  const kv = values["kv-type"];
  if (kv !== "f16" && kv !== "f32") throw new RangeError(`--kv-type: ${kv} is not f16 or f32`);
  const sampler = values.sampler;
  if (sampler !== "greedy" && sampler !== "full") throw new RangeError(`--sampler: ${sampler} is not greedy or full`);
  const dtype = syntheticDtype(values.dtype!);
  const blockPath = (v: string): boolean | "all" => {
    const paths: Record<string, boolean | "all"> = { mma: true, staged: "all", off: false };
    if (!(v in paths)) throw new RangeError(`--mma-blocks: mma, staged or off, not ${v}`);
    return paths[v];
  };
  const onOff = (v: string, what: string) => {
    if (v !== "on" && v !== "off") throw new RangeError(`--${what}: ${v} is not on or off`);
    return v === "on";
  };
  const res = await runServeBench({
    shapes: values.shape!.split(","), backend: values.backend as BackendChoice,
    concurrency: values.concurrency === "none" ? [] : values.concurrency!.split(",").map((c) => n(c, "concurrency")),
    mma: onOff(values.mma!, "mma") ? "all" : "off", mmaSplit: onOff(values["mma-split"]!, "mma-split"),
    prompt: n(values.prompt!, "prompt"), gen: n(values.gen!, "gen"), chunk: n(values.chunk!, "chunk"), kvDtype: kv,
    stepReps: n(values["step-reps"]!, "step-reps"), log: (s) => console.error(s), sampler, mmaServing: parseTune(values.tune!), dtype, mmaBlocks: blockPath(values["mma-blocks"]!),
    matmulTile: values["matmul-tile"] === undefined ? undefined : n(values["matmul-tile"], "matmul-tile"),
  });
  console.log(formatTable(
    ["shape", "backend", "concurrency", "tok/s", "TTFT mean ms", "TTFT p50 ms", "TTFT p99 ms", "ITL p50 ms", "ITL p99 ms", "step µs", "loop µs", "upload B/step"],
    res.rows.map((r) => [r.shape, r.backend, String(r.concurrency), r.tokPerSec.toFixed(1), r.ttftMeanMs.toFixed(1), r.ttftP50Ms.toFixed(1),
      r.ttftP99Ms.toFixed(1), r.itlP50Ms.toFixed(2), r.itlP99Ms.toFixed(2), r.stepMicros.toFixed(0), r.loopMicros.toFixed(0),
      r.uploadBytesPerStep.toFixed(0)]),
  ));
  console.log(formatTable(
    ["shape", "backend", "step b=1 ms", "step b=32 ms", "b32 / b1", "device wait b=1 ms", "device wait b=32 ms"],
    res.steps.map((s) => [s.shape, s.backend, s.batch1Ms.toFixed(3), s.batch32Ms.toFixed(3), s.ratio.toFixed(2), s.batch1WaitMs.toFixed(3), s.batch32WaitMs.toFixed(3)]),
  ));
  if (values.out) writeFileSync(values.out, JSON.stringify(res, null, 1));
  return 0;
}

if (import.meta.main) {
  try {
    exit(await main((globalThis as unknown as { Deno?: { args: string[] } }).Deno?.args ?? (await import("node:process")).argv.slice(2)));
  } catch (e) {
    console.error(`serve bench: ${(e as Error).message}`);
    exit(1);
  }
}
