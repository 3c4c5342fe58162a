// The Driver's own path at real shapes (llm/driver.ts over synthetic weights, llm/synthetic.ts): time to first
// token of a prompt (its prefill chunks as the Driver picks them, then the first sampled token) and decode
// through Driver.generate: tok/s, and host µs per token, the wall time per token less the time spent waiting
// for the device (bench/timed.ts). What `poot run` costs per token, not what a hand-written loop costs.
//
//   deno run -A bench/driver.ts --shape llama-3.2-1b --backend ptx --prompts 512,2048 --tokens 128
//   deno run -A bench/driver.ts --shape stories260K --backend js --prompts 64 --tokens 32 --json
//   deno run -A bench/driver.ts --shape llama-3.2-1b --backend ptx --prompts 512 --tokens 128 --ctx 8192 --decode-after 4096 --kv-type f32,f16
// (--decode-after N: the timed decode follows an N-token prompt, default 4; --kv-type: DriverOptions.kvDtype, one
// run per value, default the library's: auto, f16 for the 16-bit and quantized synthetic weights; --steps-ahead
// K,...: DriverOptions.stepsAhead, one run per value;
// --short-decode on,off: DriverOptions.shortDecode, one run per value;
// --sample: the timed decode samples at temperature 0.8 with top-k 40 and top-p 0.95, as bench/kernels.ts --tail
// sample, instead of greedily)
import { argv, exit, stderr } from "node:process";
import { writeFileSync } from "node:fs";
import { intList, parseFlags } from "./flags.ts";
import { Engine } from "../backends/executor.ts";
import { type BackendChoice, isBackendName, openBackend } from "../backends/open.ts";
import { compileGraph } from "../kernels/lower.ts";
import { Driver } from "../llm/driver.ts";
import type { ModelHandle } from "../llm/model.ts";
import type { SamplerParams } from "../llm/sampling.ts";
import { familyOf } from "../llm/registry.ts";
import { syntheticLlama } from "../llm/synthetic.ts";
import type { Tokenizer } from "../llm/tokenizer/mod.ts";
import { isShapeName, SHAPES } from "./shapes.ts";
import { TimedDevice } from "./timed.ts";

export interface DriverBenchOptions {
  shape: string;
  backend: BackendChoice;
  /** Prompt lengths whose time to first token is measured (each below ctx). */
  prompts: number[];
  /** Decode tokens timed through generate (0 skips). */
  tokens: number;
  /** KV capacity; default the smallest power of two above the longest prompt + tokens (at least 512). */
  ctx?: number;
  /** The Driver's prefill row shapes (default: the Driver's own default). */
  prefill?: number[];
  /** Timed repeats of each prompt (the best is kept; default 2, after one untimed warm-up). */
  reps?: number;
  /** Prompt tokens before the timed decode (its depth in the cache; default 4). */
  decodeAfter?: number;
  /** The K/V cache's element type (DriverOptions.kvDtype; default the library's). */
  kvDtype?: "f32" | "f16";
  /** DriverOptions.prefillStepRows (how a prompt is cut into chunks; default the Driver's). */
  stepRows?: number;
  /** DriverOptions.stepsAhead (decode steps in flight; default the device's). */
  stepsAhead?: number;
  /** DriverOptions.shortDecode (the short-context decode entry; default the library's: on). */
  shortDecode?: boolean;
  /** The timed decode's sampler (default greedy). */
  sampler?: SamplerParams;
  log?: (s: string) => void;
}

/** --sample's sampler: what chat front ends commonly ask (and bench/kernels.ts --tail sample). */
export const SAMPLED: SamplerParams = { temperature: 0.8, topK: 40, topP: 0.95, seed: 1 };

export interface DriverBenchResult {
  shape: string;
  backend: string;
  device: string;
  ctx: number;
  kvDtype: "f32" | "f16";
  /** DriverOptions.stepsAhead as given (undefined: the device's default). */
  stepsAhead?: number;
  /** The timed decode's sampler (absent: greedy). */
  sampler?: SamplerParams;
  loadSeconds: number;
  /** Prompt length -> best time to first token, ms. */
  ttftMs: Record<string, number>;
  /** Decode through generate: tok/s, ms per token and host µs per token (wall less device wait). */
  decode?: { tokens: number; tokPerSec: number; msPerToken: number; hostMicros: number; waitMicros: number };
}

// Random weights have no tokenizer: text is empty and nothing ends early (as bench/serve.ts).
const NO_TEXT = {
  decoder: () => ({ push: () => "", flush: () => "" }),
  isEog: () => false,
  eog: new Set<number>(),
} as unknown as Tokenizer;

export async function runDriverBench(o: DriverBenchOptions): Promise<DriverBenchResult> {
  if (!isShapeName(o.shape)) throw new RangeError(`unknown shape ${o.shape}: ${Object.keys(SHAPES).join(", ")}`);
  const log = o.log ?? ((s: string) => void stderr.write(s + "\n"));
  const c = SHAPES[o.shape];
  const after = o.decodeAfter ?? 4;
  const longest = Math.max(1, after, ...o.prompts);
  let ctx = o.ctx ?? 512;
  while (o.ctx === undefined && ctx <= longest + o.tokens + 1) ctx *= 2;
  if (longest + o.tokens >= ctx) throw new RangeError(`a ${longest}-token prompt and ${o.tokens} tokens do not fit ctx ${ctx}`);
  const syn = syntheticLlama(c, { dtype: "bf16", scratch: true });
  const model = {
    arch: "llama", family: familyOf("llama"), config: c, store: syn.store, map: syn.map, tokenizer: NO_TEXT, path: o.shape,
    format: "gguf", contextLength: ctx, close() {},
  } as unknown as ModelHandle;
  const dev = new TimedDevice(await openBackend(o.backend));
  const exec = new Engine(dev, { compile: (g, t, opts) => compileGraph(g, t, opts) });
  const t0 = performance.now();
  const driver = await Driver.open(model, exec, {
    ctx, kvDtype: o.kvDtype, ...(o.prefill ? { prefill: o.prefill } : {}), ...(o.stepRows !== undefined ? { prefillStepRows: o.stepRows } : {}),
    stepsAhead: o.stepsAhead, ...(o.shortDecode !== undefined ? { shortDecode: o.shortDecode } : {}),
  });
  const res: DriverBenchResult = {
    shape: o.shape, backend: dev.target.backend, device: dev.target.device, ctx, kvDtype: driver.kvDtype, stepsAhead: o.stepsAhead, ...(o.sampler ? { sampler: o.sampler } : {}), loadSeconds: (performance.now() - t0) / 1000, ttftMs: {},
  };
  log(`${o.shape} on ${res.backend}: Driver open (load + compile) ${res.loadSeconds.toFixed(1)} s, ctx ${ctx}, ${driver.kvDtype} K/V${o.stepRows !== undefined ? `, prefillStepRows ${o.stepRows}` : ""}${o.stepsAhead !== undefined ? `, stepsAhead ${o.stepsAhead}` : ""}`);
  try {
    let seed = 1;
    const ids = (n: number) => Array.from({ length: n }, () => 1 + ((seed = (seed * 1103515245 + 12345) >>> 0) % (c.vocab - 1)));
    for (const n of o.prompts) {
      await driver.generate(ids(n), { maxTokens: 1 }); // warm-up: first use of each chunk shape
      let best = Infinity;
      for (let r = 0; r < (o.reps ?? 2); r++) best = Math.min(best, (await driver.generate(ids(n), { maxTokens: 1 })).timings.promptMs);
      res.ttftMs[n] = best;
      log(`${o.shape}: time to first token of a ${n}-token prompt ${best.toFixed(1)} ms (${(n / best * 1000).toFixed(0)} tok/s prefill)`);
    }
    if (o.tokens > 0) {
      await driver.generate(ids(after), { maxTokens: 8, ignoreEos: true });
      dev.take();
      // The prompt alone (its prefill and first token), whose device wait the decode's is told apart from.
      await driver.generate(ids(after), { maxTokens: 1, ignoreEos: true });
      const prompt = dev.take();
      // A WebGPU device's counters over the timed decode (submits, maps, encoding), per token in the log.
      const counters = () => ({ ...((dev.inner as { stats?: Record<string, number> }).stats ?? {}) });
      const c0 = counters();
      const r = await driver.generate(ids(after), { maxTokens: o.tokens + 1, ignoreEos: true, ...(o.sampler ? { sampler: o.sampler } : {}) });
      const t = dev.take();
      const c1 = counters();
      // generate's decode phase: tokens after the first (the first comes from the prefill).
      const n = r.timings.generatedTokens - 1, ms = r.timings.generateMs / n;
      const waitMicros = Math.max(0, t.wait - prompt.wait) * 1000 / n;
      res.decode = { tokens: n, tokPerSec: r.timings.tokensPerSecond, msPerToken: ms, hostMicros: ms * 1000 - waitMicros, waitMicros };
      log(`${o.shape}: Driver decode${o.sampler ? " (sampled)" : ""} after ${after} prompt tokens ${res.decode.tokPerSec.toFixed(1)} tok/s, ${ms.toFixed(3)} ms/token, host ${res.decode.hostMicros.toFixed(1)} µs/token`);
      const per = Object.keys(c1).filter((k) => typeof c1[k] === "number" && c1[k] !== c0[k]).map((k) => `${k} ${((c1[k] - (c0[k] ?? 0)) / n).toFixed(k.endsWith("Micros") ? 0 : 2)}`);
      if (per.length) log(`${o.shape}: per token: ${per.join(", ")}`);
    }
  } finally {
    await driver.close();
  }
  return res;
}

if (import.meta.main) {
  const { values } = parseFlags("bench/driver.ts", {
    args: argv.slice(2),
    options: {
      shape: { type: "string" }, backend: { type: "string" }, prompts: { type: "string" }, tokens: { type: "string" },
      ctx: { type: "string" }, prefill: { type: "string" }, reps: { type: "string" }, json: { type: "boolean" }, out: { type: "string" },
      "decode-after": { type: "string" }, "kv-type": { type: "string" }, "step-rows": { type: "string" },
      "steps-ahead": { type: "string" }, "short-decode": { type: "string" }, sample: { type: "boolean" },
    },
  });
  const ints = (k: string, v: string | undefined, d: number[]): number[] => (v === undefined ? d : intList(k, v, 0));
  const backend = values.backend ?? "auto";
  if (backend !== "auto" && !isBackendName(backend)) {
    console.error(`bench/driver.ts: --backend: unknown backend ${JSON.stringify(backend)}`);
    exit(2);
  }
  try {
    const kvs = (values["kv-type"] ?? "default").split(",");
    // --step-rows A,B: one run per DriverOptions.prefillStepRows (how prompts are cut into chunks)
    const stepRows = values["step-rows"] ? ints("step-rows", values["step-rows"], []) : [undefined];
    if (!kvs.every((k) => k === "default" || k === "f32" || k === "f16")) throw new RangeError(`--kv-type must be f32, f16 or a list of them, got ${values["kv-type"]}`);
    const all: DriverBenchResult[] = [];
    // --steps-ahead A,B: one run per DriverOptions.stepsAhead
    const aheads = values["steps-ahead"] ? ints("steps-ahead", values["steps-ahead"], []) : [undefined];
    // --short-decode on,off: one run per DriverOptions.shortDecode
    const shorts = values["short-decode"] ? values["short-decode"].split(",").map((v) => v.trim()) : [undefined];
    if (!shorts.every((v) => v === undefined || v === "on" || v === "off")) throw new RangeError(`--short-decode must be on, off or a list of them, got ${values["short-decode"]}`);
    for (const kv of kvs) for (const sr of stepRows) for (const ahead of aheads) for (const sd of shorts) {
      all.push(await runDriverBench({
        stepRows: sr, stepsAhead: ahead, shortDecode: sd === undefined ? undefined : sd === "on",
        shape: values.shape ?? "llama-3.2-1b", backend: backend as BackendChoice, prompts: ints("prompts", values.prompts, [512, 2048]),
        tokens: ints("tokens", values.tokens, [128])[0], ctx: values.ctx ? ints("ctx", values.ctx, [])[0] : undefined,
        prefill: values.prefill ? ints("prefill", values.prefill, []) : undefined, reps: values.reps ? ints("reps", values.reps, [])[0] : undefined,
        decodeAfter: values["decode-after"] ? ints("decode-after", values["decode-after"], [])[0] : undefined,
        kvDtype: kv === "default" ? undefined : kv as "f32" | "f16", sampler: values.sample ? SAMPLED : undefined,
      }));
    }
    const res = all.length === 1 ? all[0] : all;
    if (values.out) writeFileSync(values.out, JSON.stringify(res, null, 2) + "\n");
    console.log(values.json ? JSON.stringify(res, null, 2) : JSON.stringify(res));
    exit(0);
  } catch (e) {
    console.error(`bench/driver.ts: ${e instanceof RangeError ? "" : `${(e as Error).name}: `}${(e as Error).message}`);
    exit(e instanceof RangeError ? 2 : 1);
  }
}
