// Batch-1 greedy decode of the Llama step at real shapes with deterministic random weights (llm/synthetic.ts):
// tok/s eager (every dispatch issued one by one) and replayed (the recording), host µs per token, bytes read
// per token and the fraction of the memory roofline achieved. `runBench(opts)` is what `poot bench` calls.
//
//   deno run -A bench/decode.ts --shape llama-3.2-1b --backend ptx --tokens 128
//   deno run -A bench/decode.ts --shape all --json --out results.json
//
// Bytes per token: every weight tensor once, except an untied embedding table, of which a token reads one row
// (the tied one is read whole by the logits matmul), plus the K/V the attention reads at the positions decoded
// (it loops to pos, so this grows with context) and the K/V row written. The roofline is those bytes at the
// copy bandwidth (default 4.27e12 B/s, the H200's measured device-to-device rate; the header says so on another device).
import { argv, exit, stderr, versions } from "node:process";
import { writeFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { Engine, MAX_INSTANCES } from "../backends/executor.ts";
import type { Device } from "../backends/device.ts";
import { type BackendChoice, isBackendName, openBackend } from "../backends/open.ts";
import { compileGraph, type CompileOptions, SHORT_DECODE } from "../kernels/lower.ts";
import type { Program } from "../kernels/program.ts";
import type { TargetSet } from "../kernels/target.ts";
import type { Graph } from "../graph/ir.ts";
import type { DType } from "../graph/dtype.ts";
import type { WeightRole } from "../graph/weights.ts";
import type { LlamaConfig } from "../llm/families/llama.ts";
import { familyOf } from "../llm/registry.ts";
import { feedToken } from "../llm/families/common.ts";
import { shortReach } from "../llm/steps.ts";
import { SYNTHETIC_DTYPES, type SyntheticDtype, syntheticLlama } from "../llm/synthetic.ts";
import { checkConfig, isShapeName, paramCount, parseCustom, REAL_SHAPES, type Shape, SHAPES } from "./shapes.ts";
import { bytes, count, formatTable, H200_BANDWIDTH, pct } from "./table.ts";
import { type DeviceTimes, TimedDevice } from "./timed.ts";
import { FUSIONS, fusionFlag } from "./fusions.ts";

export { H200_BANDWIDTH };

export interface BenchOptions {
  /** Shapes to run, in order (names of SHAPES or custom configs). Default: the three real shapes. */
  shapes?: (string | Shape)[];
  /** Backend name or "auto" (default): ptx, rocm, vulkan, wgpu, js, the first present. */
  backend?: BackendChoice;
  /** Opens the device instead of `backend` (tests; a fresh one per shape since unload destroys it). */
  open?: () => Promise<Device>;
  /** Timed tokens per phase (default 128), decoded at positions 0..tokens-1. */
  tokens?: number;
  /** Untimed tokens before each timed phase (default 4). */
  warmup?: number;
  /**
   * Keep warming up (the warm-up positions again, in a loop) until this many ms have passed (default 0; the
   * command line's default is 1000). An idle H200 sits at ~345 MHz and Vulkan/WebGPU work raises it to 1980 MHz
   * only after ~0.3-0.7 s of load (nvidia-smi, session 6), so a phase timed right after weight building measured
   * 3-4x the steady step on those backends; CUDA's launches raise the clock at once.
   */
  warmupMs?: number;
  /** Measure eager (default true). */
  eager?: boolean;
  /** Also time replay starting at this position (default 1024; 0 skips). Clamped to fit in cap. */
  deep?: number;
  /** Timed tokens at the deep position (default 32). */
  deepTokens?: number;
  /** KV capacity (default 2048). */
  cap?: number;
  /** Weight dtype or quantization mix (default bf16). */
  dtype?: SyntheticDtype;
  /** Several: one row per shape and dtype (overrides dtype). */
  dtypes?: SyntheticDtype[];
  /** KV State dtype (default f16: 2 bytes as a bf16 cache). */
  kvDtype?: "f16" | "f32";
  /** Bytes per second the roofline assumes (default H200_BANDWIDTH). */
  bandwidth?: number;
  seed?: number;
  /** Bound on every device wait, ms (default 600 s). */
  timeoutMs?: number;
  /** Progress lines (default: to stderr). */
  log?: (line: string) => void;
  /** Lowering switches (kernels/lower.ts CompileOptions), for before/after comparisons of a kernel choice. */
  compile?: CompileOptions;
  /**
   * Lowering variants to compare on one load of each shape's weights: a row each (labelled), its entry compiled
   * with `compile` and then the variant's switches. Default: one unlabelled row.
   */
  variants?: BenchVariant[];
}

/** A row's lowering switches and decode loop. */
export interface BenchVariant {
  label: string;
  compile: CompileOptions;
  /**
   * Replayed steps in flight (default 1: each step's token read back before the next is launched). With K > 1
   * the step feeds its own token (StepShape.feed): K steps, each on its own instance of the entry, are launched
   * back to back and then finished in order, so the device runs them without waiting for the host in between.
   */
  ahead?: number;
  /**
   * The short-context entry beside the step's, taken while a step's row sees at most its reach of positions, as
   * the Driver does (llm/steps.ts, kernels/lower/attention.ts SHORT_DECODE; default true: where it differs).
   */
  short?: boolean;
}

/** One timed run of consecutive decode steps. */
export interface Phase {
  /** First position and number of tokens timed. */
  pos: number;
  tokens: number;
  tokPerSec: number;
  /** Wall time per token of Engine.step, ms. */
  msPerToken: number;
  /** Host time per token not spent waiting for the device (slot writes, issue, readback, engine), µs. */
  hostMicros: number;
  /** Host time per token in write() + replay()/run() (the issue side), µs. */
  issueMicros: number;
  /** Time per token waiting in synchronize(), µs. */
  waitMicros: number;
  /** Engine.stats().hostMicrosPerStep at the end of the phase (mean of the last 64 steps), µs. */
  engineMicros: number;
  /** Bytes read and written per token at these positions (mean). */
  bytesPerToken: number;
  /** bytesPerToken at the roofline bandwidth, ms. */
  rooflineMs: number;
  /** rooflineMs / msPerToken. */
  rooflineFraction: number;
  /** The greedy tokens produced (for capture-vs-eager comparison). */
  tokenIds: number[];
}

export interface BenchRow {
  shape: string;
  /** The lowering variant's label (BenchOptions.variants), when there are variants. */
  variant?: string;
  /** Positions below which the short-context entry ran (BenchVariant.short), when there was one. */
  shortReach?: number;
  config: LlamaConfig;
  backend: string;
  device: string;
  dtype: SyntheticDtype;
  kvDtype: "f16" | "f32";
  cap: number;
  params: number;
  /** Bytes of all weight tensors. */
  weightBytes: number;
  /** Bytes of weights one token reads (see the header). */
  weightBytesPerToken: number;
  /** K/V bytes per position of context, all layers (what attention reads per earlier token). */
  kvBytesPerPosition: number;
  /** Seconds building weights on the host, and the whole loadWeights (building included). */
  generateSeconds: number;
  loadSeconds: number;
  /** addEntry: plan + lowering, kernel compile (render + JIT), record (capture), and in all. */
  planSeconds: number;
  jitSeconds: number;
  recordSeconds: number;
  compileSeconds: number;
  /** Dispatches (kernels and copies) per step, and the distinct kernel names. */
  dispatches: number;
  kernels: number;
  /** Bytes per step as the planner estimates its work (for comparison with the model above). */
  plannedBytes: number;
  eager?: Phase;
  replay?: Phase;
  deep?: Phase;
  /** The eager and replayed greedy tokens are identical (capture vs eager on one device). */
  eagerMatchesReplay?: boolean;
  error?: string;
}

export interface BenchResult {
  backend: string;
  device: string;
  runtime: string;
  bandwidth: number;
  rows: BenchRow[];
  /** The table as printed. */
  table: string;
}

function resolveShapes(list: (string | Shape)[]): Shape[] {
  return list.map((s) => {
    if (typeof s !== "string") {
      checkConfig(s.config);
      return s;
    }
    if (!isShapeName(s)) throw new RangeError(`unknown shape ${s}: expected ${Object.keys(SHAPES).join(", ")}, all, or custom`);
    return { name: s, config: SHAPES[s] };
  });
}

function runtimeName(): string {
  const v = versions as Record<string, string | undefined>;
  if (v.bun) return `bun ${v.bun}`;
  if (v.deno) return `deno ${v.deno}`;
  return `node ${v.node}`;
}

/** The decode step bench/decode.ts times: the Llama trace at batch 1 with a greedy argmax as its output. */
export function decodeGraph(c: LlamaConfig, cap: number, kvDtype: "f16" | "f32", dtypeOf: (role: WeightRole) => DType, feed = false): Graph {
  // The synthetic shapes are Llama-shaped configs (Qwen2.5's biases are a config flag of the same step).
  const { tracer, logits } = familyOf("llama").trace(c, { rows: 1, cap, kvDtype, feed }, { dtypeOf });
  const token = tracer.argmax(logits, 1);
  tracer.output("token", token);
  if (feed) feedToken(tracer, token); // a token of -1 reads the previous step's (StepShape.feed)
  return tracer.build();
}

/** Weight bytes one decode token reads: every tensor once, an untied embedding table only one row. */
function weightBytesRead(c: LlamaConfig, infos: Iterable<{ name: string; byteLength: number; shape: number[] }>): number {
  let sum = 0;
  for (const t of infos) {
    if (t.name === "token_embd.weight") {
      const row = t.byteLength / t.shape[0];
      sum += c.tiedEmbeddings ? t.byteLength + row : row;
    } else {
      sum += t.byteLength;
    }
  }
  return sum;
}

/** Runs each shape on a fresh device; a shape that fails is reported in its row and the next one runs. */
export async function runBench(opts: BenchOptions = {}): Promise<BenchResult> {
  const shapes = resolveShapes(opts.shapes ?? [...REAL_SHAPES]);
  const log = opts.log ?? ((s: string) => void stderr.write(s + "\n"));
  const bandwidth = opts.bandwidth ?? H200_BANDWIDTH;
  const cap = opts.cap ?? 2048, tokens = opts.tokens ?? 128, warmup = opts.warmup ?? 4;
  if (tokens + warmup > cap) throw new RangeError(`--tokens ${tokens} + --warmup ${warmup} exceed the KV capacity ${cap}`);
  const rows: BenchRow[] = [];
  let backend = "", device = "";
  for (const shape of shapes) {
    for (const dtype of opts.dtypes ?? [opts.dtype ?? "bf16"]) {
      const dev = opts.open ? await opts.open() : await openBackend(opts.backend ?? "auto");
      backend = dev.target.backend;
      device = dev.target.device;
      rows.push(...await benchShape(shape, dev, { ...opts, dtype }, bandwidth, log));
    }
  }
  const result = { backend, device, runtime: runtimeName(), bandwidth, rows, table: "" };
  result.table = formatTable(result);
  return result;
}

/** What a shape's variant rows share: the engine holding its weights, the bench's settings, the last plan compiled. */
interface ShapeRun {
  shape: Shape;
  dev: Device;
  eng: Engine<TimedDevice>;
  timed: TimedDevice;
  model: ReturnType<typeof syntheticLlama>;
  opts: BenchOptions;
  bandwidth: number;
  log: (s: string) => void;
  /** The plan the engine's compile made last, and the ms spent planning since the variant began. */
  last: { program?: Program; planMs: number };
  cap: number;
  kvDtype: "f16" | "f32";
  tokens: number;
  warmup: number;
  warmupMs: number;
  deep: number;
  deepTokens: number;
  kvBytesPerPosition: number;
}

/** One shape and dtype: the weights loaded once, then a row per lowering variant (each its own entry). */
async function benchShape(shape: Shape, dev: Device, opts: BenchOptions, bandwidth: number, log: (s: string) => void): Promise<BenchRow[]> {
  const c = shape.config;
  const cap = opts.cap ?? 2048, kvDtype = opts.kvDtype ?? "f16", dtype = opts.dtype ?? "bf16";
  const tokens = opts.tokens ?? 128, warmup = opts.warmup ?? 4, deepTokens = opts.deepTokens ?? 32, warmupMs = opts.warmupMs ?? 0;
  const deepWanted = opts.deep ?? 1024;
  const deep = deepWanted > 0 ? Math.min(deepWanted, cap - warmup - deepTokens) : 0;

  const model = syntheticLlama(c, { dtype, seed: opts.seed, scratch: true });
  const kvBytesPerPosition = 2 * c.layers * c.kvHeads * c.headDim * (kvDtype === "f16" ? 2 : 4);
  const base: BenchRow = {
    shape: shape.name, config: c, backend: dev.target.backend, device: dev.target.device, dtype, kvDtype, cap,
    params: paramCount(c), weightBytes: model.bytes, weightBytesPerToken: weightBytesRead(c, model.store.tensors()),
    kvBytesPerPosition, generateSeconds: 0, loadSeconds: 0, planSeconds: 0, jitSeconds: 0, recordSeconds: 0,
    compileSeconds: 0, dispatches: 0, kernels: 0, plannedBytes: 0,
  };
  const timed = new TimedDevice(dev);
  const last: ShapeRun["last"] = { planMs: 0 };
  let current = opts.compile;
  const compile = (g: Graph, t: TargetSet, o?: CompileOptions): Program => {
    const t0 = performance.now();
    last.program = compileGraph(g, t, { ...current, ...o });
    last.planMs += performance.now() - t0;
    return last.program;
  };
  const eng = new Engine(timed, { compile, timeoutMs: opts.timeoutMs });
  const variants: BenchVariant[] = opts.variants?.length ? opts.variants : [{ label: "", compile: {} }];
  const rows: BenchRow[] = [];
  const run: ShapeRun = { shape, dev, eng, timed, model, opts, bandwidth, log, last, cap, kvDtype, tokens, warmup, warmupMs, deep, deepTokens, kvBytesPerPosition };

  try {
    log(`${shape.name}: ${count(base.params)} params, ${bytes(model.bytes)} of ${dtype} weights on ${base.backend} (${base.device})`);
    const t0 = performance.now();
    await eng.loadWeights(model.store, model.map);
    base.loadSeconds = (performance.now() - t0) / 1000;
    base.generateSeconds = model.store.stats.millis / 1000;
    const upload = base.loadSeconds - base.generateSeconds;
    log(`${shape.name}: loaded in ${base.loadSeconds.toFixed(1)} s (building ${base.generateSeconds.toFixed(1)} s, ` +
      `upload ${upload.toFixed(1)} s = ${bytes(model.bytes / Math.max(upload, 1e-9))}/s)`);
    for (const v of variants) {
      const row: BenchRow = v.label ? { ...base, variant: v.label } : { ...base };
      rows.push(row);
      current = { ...opts.compile, ...v.compile };
      last.program = undefined;
      last.planMs = 0;
      try {
        await variantRow(run, row, v.label, v.ahead ?? 1, v.short ?? true);
      } catch (e) {
        row.error = `${(e as Error).name}: ${(e as Error).message}`;
        log(`${shape.name}${v.label ? ` (${v.label})` : ""}: failed: ${(e as Error).stack ?? row.error}`);
        if (dev.poisoned) break;
      }
    }
  } catch (e) {
    const row = { ...base, error: `${(e as Error).name}: ${(e as Error).message}` };
    rows.push(row);
    log(`${shape.name}: failed: ${(e as Error).stack ?? row.error}`);
  } finally {
    try {
      await eng.unload();
    } catch (e) {
      log(`${shape.name}: unload failed: ${(e as Error).message}`);
    }
  }
  return rows;
}

/** A variant's row: its entry (and short-context entry) compiled, then decoded eagerly, replayed and replayed deep. */
async function variantRow(run: ShapeRun, row: BenchRow, label: string, ahead: number, short: boolean): Promise<void> {
  const { shape, dev, eng, timed, model, opts, bandwidth, log, last } = run;
  const { cap, kvDtype, tokens, warmup, warmupMs, deep, deepTokens, kvBytesPerPosition } = run;
  const c = shape.config;
  const name = label ? `${shape.name} (${label})` : shape.name;
  timed.take();
  const t0 = performance.now();
  const key = `decode:${shape.name}:${cap}:${kvDtype}:${label}`, graph = decodeGraph(c, cap, kvDtype, model.dtypeOf, ahead > 1);
  // the short-context entry as the Driver's Steps make it (the step's one entry where it serves the whole cap)
  const reach = shortReach(dev.target.caps, c, cap, kvDtype, short);
  const id = eng.addEntry(key, graph, reach >= cap ? SHORT_DECODE : undefined);
  row.compileSeconds = (performance.now() - t0) / 1000;
  const ct = timed.take();
  row.planSeconds = last.planMs / 1000;
  row.jitSeconds = ct.compile / 1000;
  row.recordSeconds = ct.record / 1000;
  row.dispatches = last.program!.steps.length;
  row.kernels = new Set(last.program!.steps.flatMap((s) => s.k === "kernel" ? [s.kernel.name] : [])).size;
  row.plannedBytes = last.program!.steps.reduce((a, s) => a + s.work.bytes, 0);
  log(`${name}: compiled in ${row.compileSeconds.toFixed(1)} s (plan ${row.planSeconds.toFixed(1)} s, ` +
    `kernels ${row.jitSeconds.toFixed(1)} s, record ${row.recordSeconds.toFixed(2)} s): ${row.dispatches} dispatches, ${row.kernels} kernels`);
  const shortId = reach > 0 && reach < cap ? eng.addEntry(`${key}:short`, graph, SHORT_DECODE) : undefined;
  if (reach > 0) {
    row.shortReach = reach;
    log(`${name}: short-context entry for positions below ${reach}${shortId === undefined ? " (the step's one entry)" : ""}: ${last.program!.steps.length} dispatches`);
  }
  const at = (p: number) => (shortId !== undefined && p + 1 <= reach ? shortId : id);

  // Greedy tokens from `tok` at positions start.. start + n - 1, one step at a time or `ahead` in flight (every
  // step after the first of the run reading the token its predecessor left on the device).
  const tokenBuf = new Int32Array(1), posBuf = new Int32Array(1);
  const decode = async (tok: number, start: number, n: number, eager: boolean, ids?: number[]): Promise<number> => {
    if (eager || ahead === 1) {
      for (let p = start; p < start + n; p++) {
        tokenBuf[0] = tok;
        posBuf[0] = p;
        tok = (await eng.step(at(p), { token: tokenBuf, pos: posBuf }, { eager })).outputs.token[0];
        ids?.push(tok);
      }
      return tok;
    }
    for (let p = start; p < start + n; p += ahead) {
      const launched = [];
      for (let i = 0; i < ahead && p + i < start + n; i++) {
        tokenBuf[0] = p + i === start ? tok : -1;
        posBuf[0] = p + i;
        launched.push(eng.launch(at(p + i), { token: tokenBuf, pos: posBuf }, { instance: i }));
      }
      for (const l of launched) {
        tok = (await eng.finish(l)).outputs.token[0];
        ids?.push(tok);
      }
    }
    return tok;
  };
  const phase = async (pos: number, n: number, eager: boolean): Promise<Phase> => {
    eng.resetState();
    let tok = 1;
    const w0 = performance.now();
    // Rewriting the same positions is the same work as the first time (K/V rows overwritten in place). With
    // steps in flight the warm-up runs as many as there are instances, so that each is recorded (and, on
    // WebGPU, its staging buffer mapped once) before the timing starts.
    const wn = warmup > 0 && !eager ? Math.max(warmup, ahead) : warmup;
    do tok = await decode(tok, pos, wn, eager); while (wn > 0 && performance.now() - w0 < warmupMs);
    if (pos === 0) {
      eng.resetState(); // time from an empty cache at position 0, as a fresh sequence does
      tok = 1;
    }
    const start = pos === 0 ? 0 : pos + wn;
    const ids: number[] = [];
    timed.take();
    const t1 = performance.now();
    await decode(tok, start, n, eager, ids);
    const ms = (performance.now() - t1) / n;
    const dt: DeviceTimes = timed.take();
    // Attention at position p reads p + 1 rows of K and V; the step also writes one.
    const meanRows = start + (n - 1) / 2 + 1;
    const bytes = row.weightBytesPerToken + kvBytesPerPosition * (meanRows + 1);
    const rooflineMs = bytes / bandwidth * 1000;
    return {
      pos: start, tokens: n, tokPerSec: 1000 / ms, msPerToken: ms,
      hostMicros: (ms - dt.wait / n) * 1000, issueMicros: (dt.write + dt.issue) / n * 1000, waitMicros: dt.wait / n * 1000,
      engineMicros: eng.stats().hostMicrosPerStep, bytesPerToken: bytes, rooflineMs, rooflineFraction: rooflineMs / ms,
      tokenIds: ids,
    };
  };
  const say = (what: string, p: Phase) =>
    log(`${name}: ${what} at pos ${p.pos}: ${p.tokPerSec.toFixed(1)} tok/s, ${p.msPerToken.toFixed(3)} ms/token ` +
      `(host ${p.hostMicros.toFixed(0)} µs, issue ${p.issueMicros.toFixed(0)} µs, wait ${p.waitMicros.toFixed(0)} µs), ` +
      `${pct(p.rooflineFraction)} of roofline`);

  if (opts.eager ?? true) say("eager", row.eager = await phase(0, tokens, true));
  say("replay", row.replay = await phase(0, tokens, false));
  if (row.eager) row.eagerMatchesReplay = row.eager.tokenIds.join() === row.replay.tokenIds.join();
  const deepAt = Math.min(deep, cap - Math.max(warmup, ahead) - deepTokens); // its warm-up runs `ahead` steps
  if (deep > 0 && deepAt > 0) say("replay", row.deep = await phase(deepAt, deepTokens, false));
  eng.removeEntry(id);
  if (shortId !== undefined) eng.removeEntry(shortId);
}

// ---- command line ----------------------------------------------------------------------------------------

const usage = (prog: string) => `usage: ${prog} [--shape NAME[,NAME...]|all] [--backend auto|ptx|rocm|vulkan|wgpu|js[,...]] (a list: a table per backend) [--tokens N]
  [--warmup N] [--warmup-ms MS] (warm-up tokens, repeated until MS have passed: default 4 and 1000, so that a
  GPU that idled while the weights were built has raised its clock) [--deep POS] [--deep-tokens N] [--cap N] [--dtype D[,D...]] [--kv f16|f32]
  [--bandwidth B/s] [--seed N] [--no-eager] [--custom key=value,...] [--json] [--out FILE]
  [--attention-splits N] [--attention-unroll N] (decode attention's split-K chunks and positions per group per
  loop trip; default the lowering's) [--attention-fuse on|off] (split-K attention and the vocab argmax merged by
  their own last workgroup, one dispatch each; default the lowering's: on for vulkan and wgpu)
  [--plan-fuse on|off|LIST] (the dispatch-saving plan fusions: gather + cast, outputs straight into readback, per-head
  norm + rope + cache write, norm + residual; default the lowering's: on for vulkan and wgpu; LIST: one at a time,
  e.g. no-outputs-in-place,no-gather-cast; names: gather-cast, outputs-in-place, norm-rope, norm-add, attention-fuse)
  [--quantized-x on|off] (quantized gemvs on int8 x and dot4; default the lowering's: on for q8_0/q4_0/q4_k/q5_k/q6_k
  where caps.dot4 (ptx; vulkan where the driver reports the packed int8 dot accelerated; wgpu on a GPU adapter), off
  for q4_1/q5_0/q5_1) [--xq-prep on|off|no-norm|on,off,...] (the int8 path's x quantized once per gemv by a kernel
  of its own, CompileOptions.xqPrep; no-norm: only the gemvs without a fused norm; default the lowering's: off; a
  list gives a row per value on one load of the weights) [--ahead K[,K...]] (replayed steps in flight: K > 1 feeds each
  step the token its predecessor sampled on the device, launches K steps back to back and reads their tokens
  after; default 1, each token read before the next step; a list gives a row per value) [--short-decode on|off[,...]]
  (the step's short-context entry taken while a row sees few positions, as the Driver does: kernels/lower/attention.ts
  SHORT_DECODE; default on, where the target has one; a list gives a row per value)
shapes: ${Object.keys(SHAPES).join(", ")}, custom (with --custom dim=64,hidden=172,layers=5,heads=8,kvHeads=4,...)
dtypes: ${SYNTHETIC_DTYPES.join(", ")} (a list gives one row per shape and dtype; q4_k_m, q5_k_m, q6_k, q4_0
  and q8_0 are llama-quantize's per-tensor mixes, bytes per token counted from the quantized tensors)`;

/** Parses the command line into BenchOptions (plus output flags). Throws RangeError on a bad flag. */
export function parseBenchArgs(args: string[]): BenchOptions & { backends: BackendChoice[]; json: boolean; out?: string; help: boolean } {
  // A value that starts with "-" (`--tokens -3`) is joined to its flag so that the range check, not the
  // parser, answers it.
  const flagsTakingNoValue = new Set(["--no-eager", "--json", "--help", "-h"]);
  const joined: string[] = [];
  for (let i = 0; i < args.length; i++) {
    const a = args[i], next = args[i + 1];
    if (a.startsWith("--") && !a.includes("=") && !flagsTakingNoValue.has(a) && next !== undefined && next.startsWith("-") && next !== "-") {
      joined.push(`${a}=${next}`);
      i++;
    } else joined.push(a);
  }
  const { values } = parseArgs({
    args: joined,
    options: {
      shape: { type: "string" }, backend: { type: "string" }, tokens: { type: "string" }, warmup: { type: "string" },
      deep: { type: "string" }, "deep-tokens": { type: "string" }, "warmup-ms": { type: "string" }, cap: { type: "string" }, dtype: { type: "string" },
      kv: { type: "string" }, bandwidth: { type: "string" }, seed: { type: "string" }, "no-eager": { type: "boolean" },
      custom: { type: "string" }, json: { type: "boolean" }, out: { type: "string" }, "timeout-ms": { type: "string" },
      "attention-splits": { type: "string" }, "attention-unroll": { type: "string" }, "attention-fuse": { type: "string" },
      "quantized-x": { type: "string" }, "plan-fuse": { type: "string" }, "xq-prep": { type: "string" }, ahead: { type: "string" }, "short-decode": { type: "string" },
      help: { type: "boolean", short: "h" },
    },
    strict: true,
  });
  const int = (k: string, v: string | undefined, min: number): number | undefined => {
    if (v === undefined) return undefined;
    const n = Number(v);
    if (!Number.isInteger(n) || n < min) throw new RangeError(`--${k} must be an integer >= ${min}, got ${v}`);
    return n;
  };
  const backends = (values.backend ?? "auto").split(",").map((s) => s.trim());
  for (const b of backends) {
    if (b !== "auto" && !isBackendName(b)) throw new RangeError(`--backend: unknown backend ${JSON.stringify(b)} (auto, ptx, rocm, vulkan, wgpu, js)`);
  }
  const names = (values.shape ?? (values.custom ? "custom" : "all")).split(",").map((s) => s.trim()).filter(Boolean);
  if (names.length === 0) throw new RangeError(`--shape ${JSON.stringify(values.shape)} names no shape (${Object.keys(SHAPES).join(", ")}, all, custom)`);
  const shapes: (string | Shape)[] = names.flatMap((n): (string | Shape)[] =>
    n === "all" ? [...REAL_SHAPES] : n === "custom" ? [{ name: "custom", config: parseCustom(values.custom ?? "") }] : [n]
  );
  const dtypes = (values.dtype ?? "bf16").split(",").map((s) => s.trim().toLowerCase());
  for (const d of dtypes) if (!(SYNTHETIC_DTYPES as readonly string[]).includes(d)) throw new RangeError(`--dtype: "${d}" is not one of ${SYNTHETIC_DTYPES.join(", ")}`);
  const kv = values.kv ?? "f16";
  if (kv !== "f16" && kv !== "f32") throw new RangeError(`--kv must be f16 or f32`);
  const bandwidth = values.bandwidth === undefined ? undefined : Number(values.bandwidth);
  if (bandwidth !== undefined && !(bandwidth > 0)) throw new RangeError(`--bandwidth must be positive bytes per second`);
  const fuse = values["attention-fuse"];
  if (fuse !== undefined && fuse !== "on" && fuse !== "off") throw new RangeError(`--attention-fuse must be on or off, got "${fuse}"`);
  const planFuse: CompileOptions = {};
  for (const f of (values["plan-fuse"] ?? "").split(",").map((s) => s.trim()).filter(Boolean)) {
    const o = f === "on" ? { gatherCast: true, outputsInPlace: true, normRope: true, normAdd: true } : f === "off" ? fusionFlag("no-plan-fuse") : fusionFlag(f);
    if (!o) throw new RangeError(`--plan-fuse: on, off, or a list of [no-]${Object.keys(FUSIONS).join(", [no-]")}; not "${f}"`);
    Object.assign(planFuse, o);
  }
  const qx = values["quantized-x"];
  if (qx !== undefined && qx !== "on" && qx !== "off") throw new RangeError(`--quantized-x must be on or off, got "${qx}"`);
  const xp = values["xq-prep"]?.split(",").map((s) => s.trim());
  if (xp && (xp.length === 0 || xp.some((v) => v !== "on" && v !== "off" && v !== "no-norm"))) throw new RangeError(`--xq-prep must be on, off, no-norm or a list of them, got "${values["xq-prep"]}"`);
  const xqs = xp?.map((v): BenchVariant => ({ label: `xq-prep ${v}`, compile: { xqPrep: v === "no-norm" ? v : v === "on" } }));
  const aheads = values.ahead?.split(",").map((v) => int("ahead", v.trim(), 1)!);
  if (aheads?.some((k) => k > MAX_INSTANCES)) throw new RangeError(`--ahead must be at most ${MAX_INSTANCES}`);
  const ahead = !aheads ? xqs : (xqs ?? [{ label: "", compile: {} }]).flatMap((v) =>
    aheads.map((k): BenchVariant => ({ label: [v.label, `ahead ${k}`].filter(Boolean).join(", "), compile: v.compile, ahead: k }))
  );
  const sd = values["short-decode"]?.split(",").map((s) => s.trim());
  if (sd && (sd.length === 0 || sd.some((v) => v !== "on" && v !== "off"))) throw new RangeError(`--short-decode must be on, off or a list of them, got "${values["short-decode"]}"`);
  const variants = !sd ? ahead : (ahead ?? [{ label: "", compile: {} }]).flatMap((v) =>
    sd.map((o): BenchVariant => ({ ...v, label: [v.label, `short ${o}`].filter(Boolean).join(", "), short: o === "on" }))
  );
  return {
    shapes, backend: backends[0] as BackendChoice, backends: backends as BackendChoice[],
    tokens: int("tokens", values.tokens, 1), warmup: int("warmup", values.warmup, 0), warmupMs: int("warmup-ms", values["warmup-ms"], 0) ?? 1000, deep: int("deep", values.deep, 0),
    deepTokens: int("deep-tokens", values["deep-tokens"], 1), cap: int("cap", values.cap, 2),
    dtype: dtypes[0] as SyntheticDtype, dtypes: dtypes as SyntheticDtype[], kvDtype: kv, bandwidth, seed: int("seed", values.seed, 0),
    eager: !values["no-eager"], timeoutMs: int("timeout-ms", values["timeout-ms"], 1),
    compile: {
      attentionSplits: int("attention-splits", values["attention-splits"], 1),
      attentionUnroll: int("attention-unroll", values["attention-unroll"], 1),
      attentionFuse: fuse === undefined ? undefined : fuse === "on",
      quantizedX: qx === undefined ? undefined : qx === "on",
      ...planFuse,
    },
    ...(variants ? { variants } : {}),
    json: values.json ?? false, out: values.out, help: values.help ?? false,
  };
}

/**
 * The command line: prints the table (or JSON) on stdout; returns the exit code. A bad flag is one line on
 * stderr prefixed with `prog` (exit 2); a failure to run is one line too (exit 1).
 */
export async function main(args: string[], opts: { prog?: string; prefix?: string } = {}): Promise<number> {
  const prog = opts.prog ?? "bench/decode.ts";
  // deno-lint-ignore no-control-regex -- control characters are what it escapes
  const fail = (msg: string) => console.error(`${opts.prefix ?? prog}: ${msg.split("\n")[0].replace(/[\u0000-\u001f\u007f-\u009f]/g, (c) => `\\x${c.charCodeAt(0).toString(16).padStart(2, "0")}`)}`);
  let o: ReturnType<typeof parseBenchArgs>;
  try {
    o = parseBenchArgs(args);
  } catch (e) {
    fail(`${(e as Error).message.replace(/\. To specify .*$/, "")} (${prog} --help lists the flags)`);
    return 2;
  }
  if (o.help) {
    console.log(usage(prog));
    return 0;
  }
  // one table (and JSON object) per backend, in the order given; several backends' JSON is an array of them
  const results: BenchResult[] = [];
  for (const backend of o.backends) {
    try {
      results.push(await runBench({ ...o, backend }));
    } catch (e) {
      // A bad option, or no device: say so without a stack (shape failures are reported in their rows).
      fail(e instanceof RangeError ? `${e.message} (${prog} --help lists the flags)` : `${(e as Error).name}: ${(e as Error).message}`);
      return e instanceof RangeError ? 2 : 1;
    }
  }
  const data = results.map(({ table: _, ...d }) => d), json = JSON.stringify(data.length === 1 ? data[0] : data, null, 2);
  if (o.out) writeFileSync(o.out, json + "\n");
  console.log(o.json ? json : results.map((r) => r.table).join("\n\n"));
  return results.some((res) => res.rows.some((r) => r.error)) ? 1 : 0;
}

if (import.meta.main) {
  const code = await main(argv.slice(2));
  exit(code); // explicitly: a GPU runtime may keep handles alive past the last await

}
