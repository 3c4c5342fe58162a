// Device time per kernel of a decode plan: each distinct kernel of the plan launched `launches` times back to
// back in one recording (its weight bindings rotated over copies so that L2 holds none of them), replayed a
// few times; µs per launch (the gap between dependent launches included, as in a token), its planned bytes
// per µs, and the token's sum (each kernel's time x its count in the plan). Optionally sweeps the gemv tuning
// (kernels/lib/gemv.ts) and reports each gemv kernel's best variant; --sequence times the whole step as one
// recording. Zeroed weights and K/V (the memory traffic of a read does not depend on its values), the position
// slot at --pos (default 0; attention's work follows it).
//
//   deno run -A bench/kernels.ts --shape llama-3.2-1b,qwen2.5-0.5b [--pos 64[,4100]] [--cap 8192] [--sequence]
//     [--sequence-only] [--only REGEX] [--dtype q4_k_m|q8_0|...] [--splits 32,128 --attn-unroll 2,4] [--sweep]
//     [--lanes 32,64,128 --rows 1,2 --unroll 2,4,8 [--ahead 4,8]] [--pdl on|off|exit|both|all] [--out FILE]
//     [--quantized-x on|off] (CompileOptions.quantizedX; default the lowering's) [--xq-prep on|off|no-norm] (CompileOptions.xqPrep)
// (--ahead: block-weight gemvs' chunk loads in flight per lane, GemvTune.ahead; default the library's; --lanes 0,
// --rows 0 and --unroll 0: the library's)
// With --dtype a block type or mix, the block-weight gemvs read --rows as row units per team (1..16) and --lanes
// as the team's width (any multiple of the subgroup, one workgroup); --unroll stays the chunk loop's.
// --splits / --attn-unroll time each decode-attention variant (CompileOptions.attentionSplits/attentionUnroll);
// --only keeps the kernels whose name matches.
// --backend vulkan,wgpu (ptx among them or not) times a whole decode step on each of those devices instead,
// from the timestamps they write around every dispatch (bench/profile.ts), prints each device's Caps, and
// one table with every backend's µs and GB/s per kernel side by side (ptx's from the launches above).
//
//   deno run -A bench/kernels.ts --shape llama-3.2-1b,qwen2.5-0.5b [--pos 64] [--sequence] [--sweep]
//     [--lanes 32,64,128 --rows 1,2 --unroll 2,4,8] [--pdl on|off|exit|both|all] [--out FILE]
//   deno run -A bench/kernels.ts --shape llama-3.2-1b --backend ptx,vulkan,wgpu [--pos 64] [--sweep] [--out FILE]
//   deno run -A bench/kernels.ts --shape llama-3.2-1b --wall --backend vulkan:all-barriers+no-spin,vulkan,wgpu:no-early-map,wgpu
//   (any backend's "no-plan-fuse" variant plans without CompileOptions gatherCast/outputsInPlace/normRope/normAdd;
//   "no-gather-cast", "no-outputs-in-place", "no-norm-rope", "no-norm-add", "no-attention-fuse" turn one off, and
//   the name without "no-" turns it on: FUSIONS; "splitsN": decode attention in N split-K chunks;
//   "attention-unrollN": N positions per position group per trip (CompileOptions.attentionUnroll);
//   "[no-]xq-prep": CompileOptions.xqPrep (as --xq-prep, which sets every entry's default); "no-attention-prep": the
//   fused attention leaves the o projection's x to a prep of its own (CompileOptions.attentionPrep); "attention-skip-empty": the fused attention's empty chunks neither write nor count;
//   "drop-NAME" (--wall only): the step without its kernels whose name contains NAME, timing only (what fusing them away could save);
//   "no-attention-local": nor does it combine in the workgroup at short context (CompileOptions.attentionLocal); "no-attention-live":
//   split-K chunks cut over all N chunks, not whole trips of the live positions; "no-attention-spread": nor a short row's
//   positions a slot or two a team over the workgroup, nor tail trips (CompileOptions.attentionSpread); "no-gemv-hints" /
//   "gemv-hints-weights": the decode gemvs' loads without cache hints / with the weights' alone (CompileOptions.gemvHints); "groupN": N query heads per
//   attention team; "attention-prefetch": each trip's successor's K/V loaded ahead; "[no-]decode-flash": decode attention on
//   MMA tiles or not (CompileOptions.decodeFlash); "attention-stagesN": its K/V through N cp.async stages; vulkan:no-robust
//   opens the device without robustBufferAccess, and vulkan:restrict renders read-only bindings Restrict, both
//   for timing only; vulkan:any-queue takes the first queue family with compute, not a compute-only one)
// --tail argmax|greedy|sample: the step ends in argmax (default) or the Driver's plain sampler, drawing greedily or
// at temperature 0.8 with top-k 40 and top-p 0.95 (with the zeroed weights every logit ties: --weights random for
// a row the filters can cut).
// (--wall: the whole step's wall time per backend entry, no timestamps, after --warmup-ms (default 1000) of
// synchronized replays, median of 5 rounds; variants name a device's old ways;
// no-dot4 hides the native int8 dot, so a --dtype q4_k_m/q8_0 plan takes the float gemv where it took the integer one)
import { argv, exit } from "node:process";
import { readFileSync, writeFileSync } from "node:fs";
import { parseFlags, syntheticDtype } from "./flags.ts";
import { PtxDevice } from "../backends/ptx/mod.ts";
import type { Device, DeviceBuffer, DeviceStep } from "../backends/device.ts";
import { compileGraph, type CompileOptions } from "../kernels/lower.ts";
import type { Program, Step } from "../kernels/program.ts";
import { KernelBuilder } from "../kernels/ir.ts";
import type { GemvTune } from "../kernels/lib/mod.ts";
import { familyOf } from "../llm/registry.ts";
import { appendSampler, SAMPLER_SLOT, samplerSlot } from "../llm/sampling.ts";
import type { WeightRole } from "../graph/weights.ts";
import { isShapeName, SHAPES } from "./shapes.ts";
import { FUSIONS, fusionFlag } from "./fusions.ts";
import { type SyntheticDtype, syntheticLlama } from "../llm/synthetic.ts";
import { type BackendName, isBackendName, type OpenOptions, probeBackend } from "../backends/open.ts";
import type { VulkanOptions } from "../backends/vulkan/mod.ts";
import type { WgpuOptions } from "../backends/wgpu/mod.ts";
import type { RocmDeviceOptions } from "../backends/rocm/mod.ts";
import { SAMPLED } from "./driver.ts";
import { allocProgram, deviceSteps, kernelTable, type Profile, profileSteps, sameBuffers, type SlotFill, streamKernel } from "./profile.ts";

const L2_DEFEAT = 256 << 20; // bytes of distinct weight copies per kernel (the H200's L2 is 50 MB)

export interface KernelTime {
  name: string;
  count: number;
  micros: number;
  bytes: number;
}

/** Weight dtype or llama-quantize mix of the decode plans (--dtype; default bf16). */
let weightDtype: SyntheticDtype = "bf16";

/**
 * What ends the decode step (--tail): "argmax" (default, as bench/decode.ts), or the Driver's plain sampler
 * (llm/sampling.ts appendSampler) drawing greedily ("greedy": temperature 0) or "sample" (temperature 0.8, top-k
 * 40, top-p 0.95).
 */
let decodeTail: "argmax" | "greedy" | "sample" = "argmax";

/** --quantized-x / --xq-prep: compile options every plan starts from, the --backend entries' too. */
let baseCompile: CompileOptions = {};
const TAILS = ["argmax", "greedy", "sample"] as const;

/** The sampler slot's words for --tail (others: undefined, the program's own fill). */
const tailFill: SlotFill = (name) =>
  name === SAMPLER_SLOT && decodeTail !== "argmax"
    ? new Uint8Array(samplerSlot(decodeTail === "sample" ? SAMPLED : {}, 7).buffer)
    : undefined;

export function decodeProgram(shape: string, dev: Device, opts: CompileOptions, cap = 2048, dtype = weightDtype): Program {
  const c = SHAPES[shape as keyof typeof SHAPES];
  const dtypeOf = dtype === "bf16"
    ? (r: WeightRole) => (r.role.endsWith("norm") || r.role.endsWith(".bias") ? "f32" : "bf16")
    : syntheticLlama(c, { dtype }).dtypeOf;
  const { tracer, logits } = familyOf("llama").trace(c, { rows: 1, cap, kvDtype: "f16" }, { dtypeOf });
  if (decodeTail === "argmax") tracer.output("token", tracer.argmax(logits, 1));
  else appendSampler(tracer, logits);
  return compileGraph(tracer.build(), dev.target, opts);
}

/** µs per launch of `step` (a kernel of `prog`), launched `launches` times in one recording. */
export async function timeStep(dev: Device, prog: Program, step: Extract<Step, { k: "kernel" }>, launches: number, pos = 0, fill?: SlotFill): Promise<number> {
  const bufs: DeviceBuffer[] = [];
  const alloc = (bytes: number) => {
    const b = dev.alloc(bytes, "device");
    bufs.push(b);
    return b;
  };
  try {
    const compiled = dev.compile(step.kernel);
    // One buffer per binding (weights: copies to rotate through), literals with their contents.
    const choices = step.bindings.map((bd) => {
      const pb = prog.buffers[bd.buffer];
      const n = pb.kind === "weight" ? Math.max(1, Math.min(64, Math.ceil(L2_DEFEAT / bd.bytes))) : 1;
      return Array.from({ length: n }, () => {
        const b = alloc(bd.bytes);
        if (pb.init) dev.write(b, 0, pb.init.subarray(bd.offset, bd.offset + bd.bytes));
        if (pb.kind === "slot" && pb.name === "pos") dev.write(b, 0, new Uint8Array(Int32Array.of(pos).buffer));
        const given = pb.kind === "slot" ? fill?.(pb.name, pb.bytes) : undefined;
        if (given) dev.write(b, 0, given.subarray(bd.offset, bd.offset + bd.bytes));
        return { buffer: b, offset: 0, bytes: bd.bytes };
      });
    });
    const steps: DeviceStep[] = Array.from({ length: launches }, (_, i) => ({
      k: "kernel", compiled, grid: step.grid, work: step.work, bindings: choices.map((c) => c[i % c.length]),
    }));
    return await replayMicros(dev, steps, 4, launches);
  } finally {
    for (const b of bufs) dev.free(b);
  }
}

/** Wall ms per token of a whole program: queued back to back, and synchronized each (the median of the rounds). */
export interface WallTimes {
  queued: number;
  synced: number;
  /** Slowest minus fastest round (0 with one round): how far one round could be off. */
  queuedSpread: number;
  syncedSpread: number;
}

/**
 * The whole program as one recording (every buffer allocated, zeroed weights, position 0): ms per token with
 * `reps` replays queued back to back, and with a synchronize after each (as a decode loop runs it). Before
 * timing, replays run synchronized for `warmupMs` (an idle H200 runs Vulkan and WebGPU work at ~345 MHz for
 * the first 0.3-0.7 s: bench/decode.ts BenchOptions.warmupMs); with `rounds` > 1 queued and synced alternate
 * that many times and each is the median round.
 */
export async function timeProgram(
  dev: Device, prog: Program, reps = 20, pos = 0, weights: "zero" | "random" = "zero", fill?: SlotFill,
  { warmupMs = 0, rounds = 1 }: { warmupMs?: number; rounds?: number } = {},
): Promise<WallTimes> {
  const bufs = allocProgram(dev, prog, pos, weights, fill);
  try {
    const rec = dev.record(deviceSteps(dev, prog, bufs));
    try {
      for (let i = 0; i < 3; i++) dev.replay(rec);
      await dev.synchronize(60_000);
      for (const w0 = performance.now(); performance.now() - w0 < warmupMs;) {
        dev.replay(rec);
        await dev.synchronize(60_000);
      }
      const queued: number[] = [], synced: number[] = [];
      for (let round = 0; round < rounds; round++) {
        let t0 = performance.now();
        for (let r = 0; r < reps; r++) dev.replay(rec);
        await dev.synchronize(60_000);
        queued.push((performance.now() - t0) / reps);
        t0 = performance.now();
        for (let r = 0; r < reps; r++) {
          dev.replay(rec);
          await dev.synchronize(60_000);
        }
        synced.push((performance.now() - t0) / reps);
      }
      const median = (xs: number[]) => xs.sort((x, y) => x - y)[xs.length >> 1];
      const spread = (xs: number[]) => Math.max(...xs) - Math.min(...xs);
      return { queued: median(queued), synced: median(synced), queuedSpread: spread(queued), syncedSpread: spread(synced) };
    } finally {
      dev.releaseRecording(rec);
    }
  } finally {
    for (const b of bufs) dev.free(b);
  }
}

/** Launch count that keeps one replay near 2 ms (estimated from the planned bytes at 3 TB/s, 3 µs floor). */
export function launchesFor(bytes: number): number {
  const est = Math.max(3, bytes / 3e6);
  return Math.max(16, Math.min(400, Math.round(2000 / est)));
}

/** Distinct kernels of a program with their counts and a representative step. */
export function distinct(prog: Program): { step: Extract<Step, { k: "kernel" }>; count: number }[] {
  const by = new Map<string, { step: Extract<Step, { k: "kernel" }>; count: number }>();
  for (const s of prog.steps) {
    if (s.k !== "kernel") continue;
    const e = by.get(s.kernel.name);
    if (e) e.count++;
    else by.set(s.kernel.name, { step: s, count: 1 });
  }
  return [...by.values()];
}

export function floor(dev: Device): Promise<number> {
  const b = new KernelBuilder("empty", { workgroup: 32, grid: 1 });
  const y = b.buffer("y", "u32", "w");
  b.if(b.lid.x.eq(1000), () => b.store(y, 0, 1));
  const k = b.build();
  const prog: Program = { buffers: [{ id: 0, kind: "arena", name: "y", bytes: 16 }], steps: [], slots: [], state: [], outputs: [], weights: [] };
  return timeStep(dev, prog, { k: "kernel", kernel: k, bindings: [{ buffer: 0, offset: 0, bytes: 16 }], grid: k.grid, work: { bytes: 0, flops: 0 } }, 400);
}

/** The role of a gemv kernel across tunings: its name without the tuning suffix. */
/** A gemv's name without its tuning (each part of a sibling launch, kernels/lower/siblings.ts, without it and the binding map). */
const role = (name: string) => name.replace(/@[\d.]+$/, "").split("+").map((n) => n.replace(/_l\d+r\d+u\d+t\d+(_g\d+)?$/, "")).join("+");
/** Its tuning: what follows the role, or the whole name of a sibling launch. */
const tuning = (name: string) => (name.startsWith(`${role(name)}_`) ? name.slice(role(name).length + 1) : name);

/** What a device's renderer gets: its Caps, and what the backend knows beyond them. */
function describe(dev: Device): string {
  const extra = dev as unknown as { enabled?: unknown; features?: unknown; gpu?: { limits: Record<string, number> } };
  const out: Record<string, unknown> = { device: dev.target.device, caps: dev.target.caps };
  if (extra.enabled) out.vulkan = extra.enabled;
  if (extra.features) out.wgpu = extra.features;
  if (extra.gpu) {
    const l = extra.gpu.limits, keep: Record<string, number> = {};
    for (const k in l) if (typeof l[k] === "number" && /Compute|Storage|Workgroup|Subgroup/.test(k)) keep[k] = l[k];
    out.limits = keep;
  }
  return JSON.stringify(out);
}

/** ptx's per-kernel times (launches back to back, weights rotated past L2) in the profile's form. */
async function ptxProfile(dev: Device, prog: Program, pos: number): Promise<Profile> {
  const rows = [];
  for (const { step, count } of distinct(prog)) {
    const micros = await timeStep(dev, prog, step, launchesFor(step.work.bytes), pos, tailFill);
    rows.push({ first: prog.steps.indexOf(step), name: step.kernel.name, count, micros, busy: micros, bytes: step.work.bytes });
  }
  const t = await timeProgram(dev, prog, 20, pos, "zero", tailFill);
  const deviceMs = rows.reduce((a, r) => a + r.count * r.micros, 0) / 1000;
  return { backend: "ptx", device: dev.target.device, steps: prog.steps.length, deviceMs, wallMs: t.synced, rows };
}

/** The gemv tunings a sweep tries (bench/kernels.ts --lanes, --rows, --unroll; 0: the library's). */
interface SweepGrid {
  lanes: number[];
  rows: number[];
  unroll: number[];
}
/** One point of a sweep as GemvTune: a 0 keeps the library's choice. */
const sweepTune = (lanes: number, rows: number, unroll: number, ahead?: number): Partial<GemvTune> =>
  ({ ...(lanes ? { lanes } : {}), ...(rows ? { rows } : {}), ...(unroll ? { unroll } : {}), ...(ahead ? { ahead } : {}) });

/**
 * --backend with --sweep: the whole step again for every gemv tuning (lanes x rows x unroll) over the same
 * buffers; each gemv role's default and best µs per launch by the timestamps, and the tuning that won.
 */
async function sweepProfile(dev: Device, shape: string, base: Profile, bufs: DeviceBuffer[], prog0: Program, grid: SweepGrid, compile: CompileOptions): Promise<Record<string, number>> {
  const best = new Map<string, { tune: string; micros: number; def: number }>();
  for (const r of base.rows) if (r.name.startsWith("gemv")) best.set(role(r.name), { tune: `default ${tuning(r.name)}`, micros: r.micros, def: r.micros });
  const sweep: Record<string, number> = {};
  for (const lanes of grid.lanes) {
    for (const rows of grid.rows) {
      for (const unroll of grid.unroll) {
        let prog: Program;
        try {
          prog = decodeProgram(shape, dev, { ...compile, gemvTune: sweepTune(lanes, rows, unroll) });
        } catch (e) {
          console.log(`  l${lanes}r${rows}u${unroll}: ${(e as Error).message}`);
          continue;
        }
        if (!sameBuffers(prog0, prog)) continue;
        const p = await profileSteps(dev, prog, bufs, 5);
        for (const r of p?.rows ?? []) {
          if (!r.name.startsWith("gemv") || sweep[r.name] !== undefined) continue;
          sweep[r.name] = r.micros;
          const e = best.get(role(r.name));
          if (e && r.micros < e.micros) Object.assign(e, { tune: tuning(r.name), micros: r.micros });
        }
      }
    }
  }
  console.log(`${shape} on ${dev.target.backend}: gemv tuning sweep (${Object.keys(sweep).length} kernels, µs per launch by timestamps)`);
  for (const [k, e] of best) console.log(`  ${k.slice(0, 60).padEnd(60)} default ${e.def.toFixed(2).padStart(8)}  best ${e.micros.toFixed(2).padStart(8)}  ${e.tune}`);
  return sweep;
}

/** GB/s of a pure 16-byte-load stream over 1 GiB (or the largest binding; 2, 4 and 8 loads in flight per invocation). */
async function streamRates(dev: Device): Promise<string> {
  let bytes = 1 << 30;
  while (bytes > dev.target.caps.maxBindingBytes) bytes /= 2;
  const out: string[] = [];
  for (const unroll of [2, 4, 8]) {
    const k = streamKernel(dev.target.caps, bytes, unroll);
    const prog: Program = {
      buffers: [{ id: 0, kind: "arena", name: "x", bytes }, { id: 1, kind: "arena", name: "y", bytes: 16 }],
      steps: [{ k: "kernel", kernel: k, grid: k.grid, work: { bytes, flops: 0 }, bindings: [{ buffer: 0, offset: 0, bytes }, { buffer: 1, offset: 0, bytes: 16 }] }],
      slots: [], state: [], outputs: [], weights: [],
    };
    const step = prog.steps[0] as Extract<Step, { k: "kernel" }>;
    let us: number | undefined;
    if (dev.target.backend === "ptx") us = await timeStep(dev, prog, step, 8);
    else {
      const bufs = allocProgram(dev, prog);
      try {
        us = (await profileSteps(dev, prog, bufs, 5))?.rows[0].micros;
      } finally {
        for (const x of bufs) dev.free(x);
      }
    }
    out.push(us === undefined ? `u${unroll} untimed` : `u${unroll} ${(bytes / us / 1000).toFixed(0)} GB/s`);
  }
  return `${bytes >> 20} MiB stream read: ${out.join(", ")}`;
}

/** --backend: each backend's Caps and whole-step profile per shape, then one table per shape. */
/**
 * A --backend entry: a backend name, optionally with variants after a colon ("vulkan:all-barriers+no-spin",
 * "wgpu:no-early-map"), so one run can put a device's old ways beside its new ones.
 */
export function backendVariant(entry: string, timestamps: boolean, wall = false): { name: BackendName; opts: OpenOptions; compile: CompileOptions; drop: string[] } {
  const [name, flags = ""] = entry.split(":");
  const drop: string[] = [];
  if (!isBackendName(name)) throw new RangeError(`--backend: unknown backend ${name}`);
  const vulkan: VulkanOptions = { timestamps }, wgpu: WgpuOptions = { timestamps }, rocm: RocmDeviceOptions = { timestamps };
  const compile: CompileOptions = { ...baseCompile };
  for (const f of flags.split("+").filter(Boolean)) {
    const fuse = fusionFlag(f);
    if (fuse) Object.assign(compile, fuse);
    else if (name === "vulkan" && f === "all-barriers") vulkan.allBarriers = true;
    else if (name === "vulkan" && f === "no-spin") vulkan.spinMs = 0;
    else if (name === "vulkan" && f === "no-unroll") vulkan.unroll = false;
    else if (name === "vulkan" && f === "no-dot4") vulkan.noDot4 = true;
    else if (name === "vulkan" && f === "no-robust") vulkan.unsafeNoRobustAccess = true;
    else if (name === "vulkan" && f === "attention-team-count") compile.attentionCount = "team";
    else if (name === "vulkan" && f === "restrict") vulkan.restrictReads = true;
    else if (name === "vulkan" && f === "any-queue") vulkan.queue = "any";
    else if (/^splits\d+$/.test(f)) compile.attentionSplits = Number(f.slice(6));
    else if (/^attention-unroll\d+$/.test(f)) compile.attentionUnroll = Number(f.slice(16));
    else if (f === "attention-skip-empty") compile.attentionSkipEmpty = true;
    else if (f === "no-attention-local") compile.attentionLocal = false;
    else if (/^attention-wg\d+$/.test(f)) compile.attentionWorkgroup = Number(f.slice(12));
    else if (f === "xq-prep") compile.xqPrep = true;
    else if (f === "no-xq-prep") compile.xqPrep = false;
    else if (f === "no-attention-prep") compile.attentionPrep = false;
    else if (f === "no-attention-live") compile.attentionLive = false;
    else if (f === "no-attention-spread") compile.attentionSpread = false;
    else if (f === "no-gemv-hints") compile.gemvHints = false;
    else if (f === "gemv-hints-weights") compile.gemvHints = "weights";
    else if (f === "attention-prefetch") compile.attentionPrefetch = true;
    else if (f === "decode-flash") compile.decodeFlash = true;
    else if (f === "no-decode-flash") compile.decodeFlash = false;
    else if (/^attention-stages\d$/.test(f)) compile.attentionStages = Number(f.slice(16));
    else if (/^group\d+$/.test(f)) compile.attentionGroup = Number(f.slice(5));
    else if (f === "siblings") compile.siblings = true;
    else if (f === "no-siblings") compile.siblings = false;
    else if (name === "wgpu" && f === "no-dot4") wgpu.dot4 = false;
    else if (name === "wgpu" && f === "no-unroll") wgpu.unroll = false;
    else if (name === "rocm" && f === "all-barriers") rocm.allBarriers = true;
    else if (name === "wgpu" && f === "all-rw") wgpu.allReadWrite = true;
    else if (name === "wgpu" && f === "no-early-map") wgpu.earlyMap = false;
    else if (name === "wgpu" && f === "pass-per-dispatch") wgpu.passPerDispatch = true;
    else if (name === "wgpu" && /^parts\d+$/.test(f)) wgpu.submitParts = Number(f.slice(5));
    else if (wall && /^drop-\w+$/.test(f)) drop.push(f.slice(5));
    else throw new RangeError(`--backend: unknown variant ${f} of ${name} (any: no-plan-fuse, ${Object.keys(FUSIONS).map((k) => `[no-]${k}`).join(", ")}, splitsN, attention-unrollN, attention-skip-empty, no-attention-local, attention-wgN, no-attention-live, no-attention-spread, no-gemv-hints, gemv-hints-weights, attention-prefetch, [no-]decode-flash, attention-stagesN, groupN, [no-]siblings, [no-]xq-prep, no-attention-prep, drop-NAME (--wall); vulkan: all-barriers, no-spin, no-unroll, no-dot4, no-robust, attention-team-count, restrict, any-queue; wgpu: no-early-map, no-unroll, all-rw, pass-per-dispatch, partsN, no-dot4; rocm: all-barriers)`);
  }
  return { name, opts: { vulkan, wgpu, rocm }, compile, drop };
}

/**
 * A "drop-NAME" variant's program: its kernel steps whose name contains one of `drop` taken out, so --wall
 * bounds what fusing them away could save (timing only: what the step computes is then wrong).
 */
function withoutKernels(prog: Program, drop: string[]): Program {
  if (!drop.length) return prog;
  const steps = prog.steps.filter((s) => !(s.k === "kernel" && drop.some((d) => s.kernel.name.includes(d))));
  if (steps.length === prog.steps.length) throw new RangeError(`--backend drop-${drop.join("/")}: no kernel of the step has that in its name`);
  return { ...prog, steps };
}

/** --wall: ms per token of the whole step (no timestamps), queued back to back and synchronized each, per backend entry. */
async function wallBackends(backends: string[], shapes: string[], positions: number[], weights: "zero" | "random", warmupMs: number, cap = 2048): Promise<number> {
  for (const pos of positions) if (!(Number.isInteger(pos) && pos >= 0 && pos < cap)) throw new RangeError(`--pos ${pos} outside the capacity ${cap}`);
  for (const shape of shapes) for (const pos of positions) {
    console.log(`\n${shape} (pos ${pos}, cap ${cap}): whole decode step as one recording, ${weights} weights, ms per token after ${warmupMs} ms of warm-up replays (median of 5 rounds of 30 ± half the spread)`);
    console.log(`${"backend".padEnd(32)} ${"queued".padStart(14)} ${"synced".padStart(14)} ${"tok/s".padStart(8)}`);
    for (const entry of backends) {
      const { name, opts, compile, drop } = backendVariant(entry, false, true);
      const dev = await probeBackend(name, opts);
      if (typeof dev === "string") {
        console.log(`${entry.padEnd(32)} skipped: ${dev}`);
        continue;
      }
      try {
        const prog = withoutKernels(decodeProgram(shape, dev, compile, cap), drop);
        const t = await timeProgram(dev, prog, 30, pos, weights, tailFill, { warmupMs, rounds: 5 });
        const ms = (x: number, spread: number) => `${x.toFixed(3)} ±${(spread / 2).toFixed(3)}`;
        console.log(`${entry.padEnd(32)} ${ms(t.queued, t.queuedSpread).padStart(14)} ${ms(t.synced, t.syncedSpread).padStart(14)} ${(1000 / t.synced).toFixed(0).padStart(8)}`);
      } catch (e) {
        console.log(`${entry.padEnd(32)} failed: ${(e as Error).message}`);
      } finally {
        await dev.destroy();
      }
    }
  }
  return 0;
}

async function profileBackends(backends: string[], shapes: string[], pos: number, out: string | undefined, grid?: SweepGrid, weights: "zero" | "random" = "zero"): Promise<number> {
  const result: Record<string, unknown> = {};
  for (const shape of shapes) {
    const profiles: Profile[] = [];
    for (const b of backends) {
      const { name, opts, compile } = backendVariant(b, true);
      const dev = await probeBackend(name, opts);
      if (typeof dev === "string") {
        console.log(`${b}: skipped: ${dev}`);
        continue;
      }
      try {
        console.log(`${b} caps: ${describe(dev)}`);
        if (shape === shapes[0]) console.log(`${b}: ${await streamRates(dev).catch((e) => `stream read failed: ${(e as Error).message}`)}`);
        const prog = decodeProgram(shape, dev, compile);
        if (name === "ptx") {
          const p = await ptxProfile(dev, prog, pos);
          console.log(`${shape} on ptx: ${p.steps} steps, kernels ${p.deviceMs.toFixed(3)} ms per token by launches, wall ${p.wallMs.toFixed(3)} ms per synchronized step`);
          profiles.push(p);
          result[`${b}:${shape}`] = p;
          continue;
        }
        const bufs = allocProgram(dev, prog, pos, weights, tailFill);
        try {
          const p = await profileSteps(dev, prog, bufs, 10);
          if (!p) {
            console.log(`${b}: skipped: ${dev.target.device} writes no timestamps (Vulkan timestampValidBits 0, or no WebGPU timestamp-query)`);
            continue;
          }
          console.log(`${shape} on ${b}: ${p.steps} steps, kernels ${p.deviceMs.toFixed(3)} ms per token by timestamps, wall ${p.wallMs.toFixed(3)} ms per synchronized step`);
          p.backend = b;
          profiles.push(p);
          result[`${b}:${shape}`] = p;
          if (grid) result[`sweep:${b}:${shape}`] = await sweepProfile(dev, shape, p, bufs, prog, grid, compile);
        } finally {
          for (const x of bufs) dev.free(x);
        }
      } catch (e) {
        console.log(`${b}: ${shape} failed: ${(e as Error).message}`); // the other backends still run
      } finally {
        await dev.destroy();
      }
    }
    console.log(`\n${shape} (pos ${pos}): µs per launch (start to next start) and planned bytes per µs\n${kernelTable(profiles)}\n`);
  }
  if (out) writeFileSync(out, JSON.stringify(result, null, 1) + "\n");
  return 0;
}

async function main(args: string[]): Promise<number> {
  const { values } = parseFlags("bench/kernels.ts", {
    args,
    options: { shape: { type: "string" }, sweep: { type: "boolean" }, sequence: { type: "boolean" }, "sequence-only": { type: "boolean" }, pos: { type: "string" }, cap: { type: "string" }, splits: { type: "string" }, "attn-unroll": { type: "string" }, only: { type: "string" }, pdl: { type: "string" }, out: { type: "string" }, lanes: { type: "string" }, unroll: { type: "string" }, rows: { type: "string" }, ahead: { type: "string" }, backend: { type: "string" }, wall: { type: "boolean" }, weights: { type: "string" }, dtype: { type: "string" }, "quantized-x": { type: "string" }, "xq-prep": { type: "string" }, "warmup-ms": { type: "string" }, tail: { type: "string" }, help: { type: "boolean", short: "h" } },
  });
  if (values.help) {
    // the header comment is the usage
    const src = readFileSync(new URL(import.meta.url), "utf8").split("\n");
    console.log(src.slice(0, src.findIndex((l) => !l.startsWith("//"))).map((l) => l.replace(/^\/\/ ?/, "")).join("\n"));
    return 0;
  }
  const qx = values["quantized-x"];
  if (qx !== undefined && qx !== "on" && qx !== "off") throw new RangeError(`--quantized-x: on or off, not ${qx}`);
  const xp = values["xq-prep"];
  if (xp !== undefined && xp !== "on" && xp !== "off" && xp !== "no-norm") throw new RangeError(`--xq-prep: on, off or no-norm, not ${xp}`);
  const xq: CompileOptions = { ...(qx === undefined ? {} : { quantizedX: qx === "on" }), ...(xp === undefined ? {} : { xqPrep: xp === "no-norm" ? xp : xp === "on" }) };
  baseCompile = xq;
  if (values.tail) {
    if (!(TAILS as readonly string[]).includes(values.tail)) throw new RangeError(`--tail: one of ${TAILS.join(", ")}, not ${values.tail}`);
    decodeTail = values.tail as typeof decodeTail;
  }
  if (values.dtype) {
    weightDtype = syntheticDtype(values.dtype);
  }
  const shapes = (values.shape ?? "llama-3.2-1b,qwen2.5-0.5b,llama-3-8b").split(",");
  for (const s of shapes) if (!isShapeName(s)) throw new RangeError(`unknown shape ${s}`);
  const list = (v: string | undefined, d: number[]) => (v ? v.split(",").map(Number) : d);
  const weights = values.weights ?? "zero";
  if (weights !== "zero" && weights !== "random") throw new RangeError(`--weights: zero or random, not ${weights}`);
  const warmupMs = Number(values["warmup-ms"] ?? 1000);
  if (!(Number.isInteger(warmupMs) && warmupMs >= 0)) throw new RangeError(`--warmup-ms: a whole number of ms, not ${values["warmup-ms"]}`);
  if (values.backend && values.wall) return wallBackends(values.backend.split(","), shapes, (values.pos ?? "0").split(",").map(Number), weights, warmupMs, Number(values.cap ?? 2048));
  if (values.backend && values.backend !== "ptx") {
    const grid = values.sweep ? { lanes: list(values.lanes, [32, 64, 128, 256]), rows: list(values.rows, [1, 2]), unroll: list(values.unroll, [2, 4, 8]) } : undefined;
    return profileBackends(values.backend.split(","), shapes, Number((values.pos ?? "0").split(",")[0]), values.out, grid, weights);
  }
  const modes: (boolean | "exit")[] = values.pdl === "both" ? [false, true] : values.pdl === "all" ? [false, "exit", true]
    : [values.pdl === "off" ? false : values.pdl === "exit" ? "exit" : true];
  const positions = (values.pos ?? "0").split(",").map(Number);
  const cap = Number(values.cap ?? 2048);
  for (const p of positions) if (!(Number.isInteger(p) && p >= 0 && p < cap)) throw new RangeError(`--pos ${p} outside the capacity ${cap}`);
  // Variants of decode attention to compare in one run: split counts x unrolls (default: the library's).
  const attn: CompileOptions[] = list(values.splits, [0]).flatMap((sp) =>
    list(values["attn-unroll"], [0]).map((u) => ({ ...xq, ...(sp ? { attentionSplits: sp } : {}), ...(u ? { attentionUnroll: u } : {}) }))
  );
  const only = values.only ? new RegExp(values.only) : undefined;
  const result: Record<string, unknown> = {};
  for (const pdl of modes) {
    const dev = PtxDevice.open({ pdl });
    const tag = pdl === "exit" ? "pdl-exit" : pdl ? "pdl" : "plain";
    try {
      const empty = await floor(dev);
      console.log(`\n== ${dev.target.device}, ${tag} launches: empty kernel ${empty.toFixed(2)} µs per launch`);
      result[`${tag}:empty`] = empty;
      for (const shape of shapes) for (const variant of attn) for (const pos of positions) {
        const vtag = Object.entries(variant).map(([k, v]) => `${k}=${v}`).join(" ") || "default";
        const prog = decodeProgram(shape, dev, variant, cap);
        if (values.sequence) {
          const t = await timeProgram(dev, prog, 20, pos);
          console.log(`${shape} (${tag}, cap ${cap}, ${vtag}): the whole step at pos ${pos}, ${prog.steps.length} steps: ${t.queued.toFixed(3)} ms per token queued, ${t.synced.toFixed(3)} ms with a sync each`);
          result[`${tag}:${shape}:${cap}:${vtag}:${pos}:sequence`] = t;
          if (values["sequence-only"]) continue;
        }
        const rows: KernelTime[] = [];
        for (const { step, count } of distinct(prog)) {
          if (only && !only.test(step.kernel.name)) continue;
          const micros = await timeStep(dev, prog, step, launchesFor(step.work.bytes), pos);
          rows.push({ name: step.kernel.name, count, micros, bytes: step.work.bytes });
        }
        const total = rows.reduce((a, r) => a + r.count * r.micros, 0);
        console.log(`\n${shape} (${tag}, cap ${cap}, ${vtag}, pos ${pos}): ${prog.steps.length} steps, kernels sum to ${(total / 1000).toFixed(3)} ms per token`);
        console.log(`${"kernel".padEnd(72)} ${"n".padStart(4)} ${"µs".padStart(9)} ${"GB/s".padStart(7)} ${"token%".padStart(7)}`);
        for (const r of rows) {
          console.log(`${r.name.slice(0, 72).padEnd(72)} ${String(r.count).padStart(4)} ${r.micros.toFixed(2).padStart(9)} ${(r.bytes / r.micros / 1000).toFixed(0).padStart(7)} ${(100 * r.count * r.micros / total).toFixed(1).padStart(7)}`);
        }
        result[`${tag}:${shape}:${cap}:${vtag}:${pos}`] = { total, rows };
        if (!values.sweep || pdl !== modes[modes.length - 1] || variant !== attn[0] || pos !== positions[0]) continue;
        // gemv tuning sweep: every variant of (lanes, rows, unroll) for each gemv kernel of the plan.
        const best = new Map<string, { tune: string; micros: number; def?: number }>();
        for (const r of rows) if (r.name.startsWith("gemv")) best.set(role(r.name), { tune: `default ${tuning(r.name)}`, micros: r.micros, def: r.micros });
        const sweep: Record<string, number> = {};
        for (const lanes of list(values.lanes, [32, 64, 128, 256])) {
          for (const rw of list(values.rows, [1, 2])) {
            for (const unroll of list(values.unroll, [2, 4, 8])) for (const ahead of values.ahead ? list(values.ahead, []) : [undefined]) {
              const p2 = decodeProgram(shape, dev, { ...xq, gemvTune: sweepTune(lanes, rw, unroll, ahead) }, cap);
              for (const { step } of distinct(p2)) {
                if (!step.kernel.name.startsWith("gemv") || (only && !only.test(step.kernel.name))) continue;
                const us = await timeStep(dev, p2, step, launchesFor(step.work.bytes), pos);
                const tag = `${step.kernel.name}${ahead ? ` a${ahead}` : ""}`;
                sweep[tag] = us;
                console.log(`  ${tag.padEnd(80)} ${us.toFixed(2).padStart(9)} µs ${(step.work.bytes / us / 1000).toFixed(0).padStart(6)} GB/s`);
                const e = best.get(role(step.kernel.name));
                if (e && us < e.micros) Object.assign(e, { tune: `${tuning(step.kernel.name)}${ahead ? ` a${ahead}` : ""}`, micros: us });
              }
            }
          }
        }
        console.log(`\n${shape}: gemv tuning sweep (best of ${Object.keys(sweep).length} kernels)`);
        for (const [k, e] of best) console.log(`${k.slice(0, 60).padEnd(60)} default ${e.def!.toFixed(2).padStart(8)} µs  best ${e.micros.toFixed(2).padStart(8)} µs  ${e.tune}`);
        result[`sweep:${shape}`] = sweep;
      }
    } finally {
      await dev.destroy();
    }
  }
  if (values.out) writeFileSync(values.out, JSON.stringify(result, null, 1) + "\n");
  return 0;
}

if (import.meta.main) {
  // A bad value (main's checks throw RangeError; a bad flag is parseFlags'): one line, no stack.
  exit(await main(argv.slice(2)).catch((e) => {
    if (!(e instanceof RangeError)) throw e;
    console.error(`bench/kernels.ts: ${(e as Error).message} (bench/kernels.ts --help lists the flags)`);
    return 2;
  }));
}

/** µs per launch of `steps` recorded once, replayed `reps` times after one warm-up replay. */
export async function replayMicros(dev: Device, steps: DeviceStep[], reps: number, launches: number): Promise<number> {
  const rec = dev.record(steps);
  try {
    dev.replay(rec);
    await dev.synchronize(60_000);
    const t0 = performance.now();
    for (let r = 0; r < reps; r++) dev.replay(rec);
    await dev.synchronize(60_000);
    return ((performance.now() - t0) * 1000) / (reps * launches);
  } finally {
    dev.releaseRecording(rec);
  }
}
