// Conformance cases of the tensor-core matmul (kernels/lib/mma_matmul.ts) against a float64 reference, and its
// batch-invariance check. Run on the JS device with the MMA emulated (mma_js.test.ts: caps.mma forced on, the
// JS renderer's lockstep path emulates the warp tile) and on a real PTX device (tests/ptx/mma.test.ts).
//
// Tolerance: x enters the MMA as hi + lo 16-bit parts (split, the default), which keeps x to within 2^-17 of
// itself; products are exact and the sum is f32 (the hardware's order): |got - want| <= rel * sum |x w| with
// rel = 2^-15 + k * 2^-23. Unsplit (x rounded once to bf16/f16): rel = 2^-7 (bf16) / 2^-10 (f16) + k * 2^-23.
import type { Caps } from "../../kernels/target.ts";
import type { Kernel } from "../../kernels/ir.ts";
import { mmaMatmul, type MmaMatmulShape, mmaPrepX, mmaServingLayout, type MmaServingTune } from "../../kernels/lib/mma_matmul.ts";
import { stagedMatmul, type StagedMatmulShape } from "../../kernels/lib/mma_staged.ts";
import type { Device, DeviceBuffer } from "../../backends/device.ts";
import { KernelFault } from "../../backends/errors.ts";
import { JsDevice } from "../../backends/js/device.ts";
import { Engine } from "../../backends/executor.ts";
import { compileGraph, type CompileOptions } from "../../kernels/lower.ts";
import type { Graph } from "../../graph/ir.ts";
import type { WeightMap, WeightStore } from "../../graph/weights.ts";
import { checkCase } from "./harness.ts";
import { attentionCase, type KernelCase } from "./cases.ts";
import { flashAttention } from "../../kernels/lib/flash.ts";
import { flashPrepBytes, flashPrepKV, flashStaged } from "../../kernels/lib/flash_staged.ts";
import { attentionCombine } from "../../kernels/lib/attention_combine.ts";
import { asF32, bytes, floats, matmulWant, Rng } from "./data.ts";

export type MmaCaseShape = Omit<MmaMatmulShape, "name">;

/** The caps a case builds with: the device's, with mma forced on where `emulate` (the JS device). */
export function mmaCaps(caps: Caps, emulate: boolean): Caps {
  // emulated: an sm_90-sized shared memory (227 KB), which the pipelined matmul's cases need
  return emulate ? { ...caps, mma: true, staging: true, wgmma: true, subgroups: true, subgroupSize: 32, maxSharedBytes: Math.max(caps.maxSharedBytes, 227 * 1024) } : caps;
}

function caseName(s: MmaCaseShape): string {
  const opt = [s.bias && "bias", s.residual && "residual", s.split === false && "unsplit", s.ks && `ks=${s.ks}`, s.mt && `mt=${s.mt}`, s.nt && `nt=${s.nt}`,
    (s.nw || s.mw) && `warps=${s.nw ?? "-"}x${s.mw ?? "-"}`, s.unroll && `unroll=${s.unroll}`, s.stages && `stages=${s.stages}`];
  return `mma matmul ${s.w} n=${s.n} k=${s.k} m=${s.batch}${opt.filter(Boolean).map((x) => ` ${x}`).join("")}`;
}

/** Inputs x [m, k] f32, W [n, k], bias, residual, y (NaN-filled). Deterministic per shape. */
export function mmaInputs(s: MmaCaseShape, seed = caseName(s)): { ins: Uint8Array[]; w: Float64Array } {
  const rng = new Rng(seed);
  const x = rng.f32(s.batch * s.k);
  const f = floats(rng, s.w, s.n * s.k);
  const ins = [bytes(x), f.bytes];
  if (s.bias) ins.push(bytes(rng.f32(s.n)));
  if (s.residual) ins.push(bytes(rng.f32(s.batch * s.n)));
  ins.push(bytes(new Float32Array(s.batch * s.n).fill(NaN)));
  return { ins, w: f.values };
}

export function mmaCase(s: MmaCaseShape, emulate: boolean): KernelCase {
  const name = caseName(s);
  let w: Float64Array;
  let cached: Uint8Array[] | undefined;
  const inputs = () => {
    if (!cached) {
      const r = mmaInputs(s, name);
      cached = r.ins;
      w = r.w;
    }
    return cached.map((b) => b.slice());
  };
  return {
    name,
    make: (caps) => mmaMatmul(mmaCaps(caps, emulate), s),
    inputs,
    expect(ins) {
      const { k } = s;
      const { want, mag } = matmulWant(asF32(ins[0]), w, s, ins);
      const xr = s.split === false ? (s.w === "bf16" ? 2 ** -7 : 2 ** -10) : 2 ** -15;
      return [{ binding: ins.length - 1, type: "f32", want, mag, tol: { abs: 1e-30, rel: xr + k * 2 ** -23 } }];
    },
  };
}

/** The issue's shapes: M in {1, 3, 8, 17, 64, 130}, N and K off the tile, bias and residual, both splits. */
export function mmaShapes(): MmaCaseShape[] {
  return [
    { n: 8, k: 32, batch: 1, w: "bf16" },
    { n: 24, k: 64, batch: 3, w: "bf16", bias: true },
    { n: 40, k: 96, batch: 8, w: "f16", residual: true },
    { n: 37, k: 200, batch: 17, w: "bf16", bias: true, residual: true },
    { n: 19, k: 136, batch: 64, w: "bf16", ks: 2 },
    { n: 64, k: 256, batch: 130, w: "bf16" },
    { n: 33, k: 520, batch: 5, w: "bf16", ks: 4 },
    { n: 24, k: 384, batch: 18, w: "bf16", unroll: 2 },
    { n: 72, k: 96, batch: 70, w: "bf16", ks: 1, nw: 2, mw: 2, residual: true },
    { n: 40, k: 256, batch: 45, w: "bf16", ks: 2, nw: 1, mw: 2 },
    { n: 16, k: 64, batch: 9, w: "bf16", split: false },
    { n: 16, k: 48, batch: 20, w: "f16", split: false, mt: 1, nt: 1 },
    // the wide default tiles (m >= 256, n >= 2048: 4 x 8), rows and columns past a tile's edge
    { n: 2056, k: 32, batch: 257, w: "bf16" },
  ];
}

/**
 * A matmul's inputs (x, W, bias?, residual?, y) for row r alone: `x` that row's x bytes, W and the bias as they
 * are, row r of the residual, a NaN-filled y of one row.
 */
export function rowInputs(ins: Uint8Array[], s: { n: number; bias?: boolean; residual?: boolean }, r: number, x: Uint8Array): Uint8Array[] {
  const { n } = s, one = [x, ins[1]];
  let i = 2;
  if (s.bias) one.push(ins[i++]);
  if (s.residual) one.push(ins[i++].slice(r * n * 4, (r + 1) * n * 4));
  one.push(bytes(new Float32Array(n).fill(NaN)));
  return one;
}

export interface InvarianceResult {
  /** Rows whose bits differ between the batch-1 run and the same row inside the batch, with the first column. */
  mismatches: string[];
}

/**
 * Batch invariance: row r alone (m = 1) must give the same bits as row r inside a batch of `m` rows. `run`
 * dispatches one kernel over given input bytes and returns y's bytes.
 */
export async function checkInvariance(
  caps: Caps,
  emulate: boolean,
  base: Omit<MmaCaseShape, "batch">,
  m: number,
  rows: number[],
  run: (kernel: ReturnType<typeof mmaMatmul>, ins: Uint8Array[]) => Promise<Uint8Array>,
): Promise<InvarianceResult> {
  const full = { ...base, batch: m };
  const { ins } = mmaInputs(full, "invariance");
  const all = new Uint32Array((await run(mmaMatmul(mmaCaps(caps, emulate), full), ins)).slice().buffer);
  const mismatches: string[] = [];
  const { n, k } = base;
  for (const r of rows) {
    const one = rowInputs(ins, base, r, ins[0].slice(r * k * 4, (r + 1) * k * 4));
    const alone = new Uint32Array((await run(mmaMatmul(mmaCaps(caps, emulate), { ...base, batch: 1 }), one)).slice().buffer);
    for (let c = 0; c < n; c++) {
      if (alone[c] !== all[r * n + c]) {
        mismatches.push(`row ${r} col ${c}: alone ${alone[c].toString(16)} vs in m=${m} ${all[r * n + c].toString(16)}`);
        break;
      }
    }
  }
  return { mismatches };
}

// ---- flash attention (kernels/lib/flash.ts) -----------------------------------------------------------

export interface FlashCfg {
  rows: number;
  heads: number;
  kvHeads: number;
  hd: number;
  cap: number;
  pos: number;
  kv?: "f32" | "f16" | "bf16";
  pt?: "u32" | "i32";
  split?: boolean;
}

/** attention()'s case (same inputs and reference) run through the MMA kernel; unsplit gets f16 tolerance. */
export function flashCase(c: FlashCfg, emulate: boolean, fault = false): KernelCase {
  const base = attentionCase(c, fault);
  return {
    ...base,
    name: `flash ${base.name}${c.split === false ? " unsplit" : ""}`,
    make: (caps) => flashAttention(mmaCaps(caps, emulate), { rows: c.rows, heads: c.heads, kvHeads: c.kvHeads, hd: c.hd, cap: c.cap, kv: c.kv, pos: c.pt, split: c.split }),
    expect(ins) {
      const e = base.expect(ins);
      return c.split === false ? e.map((x) => ({ ...x, tol: { abs: 1e-5, rel: 4e-3 } })) : e;
    },
  };
}

export function flashCfgs(): FlashCfg[] {
  return [
    { rows: 16, heads: 4, kvHeads: 1, hd: 16, cap: 40, pos: 0 },
    { rows: 5, heads: 2, kvHeads: 2, hd: 32, cap: 24, pos: 9, kv: "f16" },
    { rows: 37, heads: 4, kvHeads: 2, hd: 64, cap: 80, pos: 20, pt: "i32" },
    { rows: 20, heads: 3, kvHeads: 1, hd: 16, cap: 64, pos: 30, kv: "bf16" },
    { rows: 33, heads: 2, kvHeads: 1, hd: 32, cap: 48, pos: 0, split: false },
  ];
}

// ---- prepared x (mmaPrepX then mmaMatmul { prepared }) ------------------------------------------------

/**
 * Runs mmaPrepX and the prepared matmul `make(caps)` of shape `s` over inputs `ins` (x f32, then the matmul's own
 * bindings) on `dev`; returns every input buffer's bytes afterwards (the last is y).
 */
async function prepareAndRun(dev: Device, s: MmaCaseShape, ins: Uint8Array[], emulate: boolean, make: (caps: Caps) => Kernel): Promise<Uint8Array[]> {
  const caps = mmaCaps(dev.target.caps, emulate);
  const prep = mmaPrepX(caps, { m: s.batch, k: s.k, ab: s.w, split: s.split });
  const mm = make(caps);
  const bufs = ins.map((b) => {
    const d = dev.alloc(b.byteLength, "device");
    dev.write(d, 0, b);
    return d;
  });
  const xw = dev.alloc((s.split === false ? 1 : 2) * s.batch * s.k * 2, "device");
  const bind = (b: DeviceBuffer) => ({ buffer: b, offset: 0, bytes: b.bytes });
  try {
    dev.run([
      { k: "kernel", compiled: dev.compile(prep), grid: prep.grid, work: { bytes: 0, flops: 0 }, bindings: [bind(bufs[0]), bind(xw)] },
      { k: "kernel", compiled: dev.compile(mm), grid: mm.grid, work: { bytes: 0, flops: 0 }, bindings: [bind(xw), ...bufs.slice(1).map(bind)] },
    ]);
    await dev.synchronize(60_000);
    return (await Promise.all(bufs.map((b) => dev.read(b, 0, b.bytes)))).map((b) => b.slice());
  } finally {
    for (const b of [...bufs, xw]) dev.free(b);
  }
}

/**
 * Runs mmaPrepX and the prepared matmul (`make`: mmaMatmul's, or another kernel on the same words, e.g. the
 * staged one) over the case's inputs on `dev` and returns the case's problems (empty = pass): the same
 * reference and tolerance as the one-kernel case.
 */
export async function runPrepared(
  dev: Device,
  s: MmaCaseShape,
  emulate: boolean,
  make: (caps: Caps) => Kernel = (caps) => mmaMatmul(caps, { ...s, prepared: true }),
): Promise<string[]> {
  const kc = mmaCase(s, emulate);
  const ins = kc.inputs();
  return checkCase(kc, { inputs: ins, outputs: await prepareAndRun(dev, s, ins, emulate, make) });
}

/** y's bytes of mmaPrepX then the prepared mmaMatmul of shape `s` over inputs `ins` (x f32, W, bias, residual, y). */
export async function preparedY(dev: Device, s: MmaCaseShape, ins: Uint8Array[], emulate: boolean): Promise<Uint8Array> {
  const out = await prepareAndRun(dev, s, ins, emulate, (caps) => mmaMatmul(caps, { ...s, prepared: true }));
  return out[out.length - 1];
}

/**
 * Shapes for the cp.async pipeline (MmaMatmulShape.stages): padded halves (m <= 8), a k % 32 tail, a leftover
 * chunk after the K split, fewer trips than stages, an unroll, warps along M, unsplit x, wide tiles.
 */
export function pipelinedShapes(): MmaCaseShape[] {
  return [
    { n: 24, k: 64, batch: 3, w: "bf16", bias: true, stages: 2 },
    { n: 37, k: 200, batch: 17, w: "bf16", bias: true, residual: true, stages: 3 },
    { n: 33, k: 520, batch: 5, w: "bf16", ks: 4, stages: 4 },
    { n: 24, k: 384, batch: 18, w: "bf16", unroll: 2, stages: 3 },
    { n: 40, k: 256, batch: 45, w: "bf16", ks: 2, nw: 1, mw: 2, stages: 2 },
    { n: 16, k: 64, batch: 9, w: "f16", split: false, stages: 3 },
    { n: 72, k: 224, batch: 32, w: "bf16", ks: 2, mt: 2, nt: 8, residual: true, stages: 5 },
  ];
}

/**
 * The pipelined matmul against the direct-load one on the same prepared words: bit for bit (the same words meet
 * the same MMAs in the same order), then against the float64 reference. The problems (empty = pass).
 */
export async function checkPipelined(dev: Device, s: MmaCaseShape, emulate: boolean): Promise<string[]> {
  const { ins } = mmaInputs(s, "pipelined");
  const direct = new Uint32Array((await preparedY(dev, { ...s, stages: undefined }, ins, emulate)).buffer);
  const piped = new Uint32Array((await preparedY(dev, s, ins, emulate)).buffer);
  const at = direct.findIndex((v, i) => v !== piped[i]);
  if (at >= 0) return [`element ${at}: direct ${direct[at].toString(16)} vs pipelined ${piped[at].toString(16)}`];
  return runPrepared(dev, s, emulate);
}

/**
 * The serving entries' invariance (kernels/lib/mma_matmul.ts mmaServingLayout): rows `rows` of a batch of `m`
 * under the layout for m rows against each row alone under the layout for 1 row (other tiles, unroll and warps
 * per workgroup; the same ks), prepared x as the lowering runs it. Mismatches as in checkInvariance.
 */
export async function checkServingInvariance(
  dev: Device, emulate: boolean, base: Omit<MmaCaseShape, "batch">, m: number, rows: number[], tune: MmaServingTune,
): Promise<InvarianceResult> {
  const { n, k } = base;
  const at = (batch: number): MmaCaseShape => ({ ...base, batch, ...mmaServingLayout(n, k, batch, tune) });
  const { ins } = mmaInputs({ ...base, batch: m }, "serving invariance");
  const all = new Uint32Array((await preparedY(dev, at(m), ins, emulate)).buffer);
  const mismatches: string[] = [];
  for (const r of rows) {
    const one = rowInputs(ins, base, r, ins[0].slice(r * k * 4, (r + 1) * k * 4));
    const alone = new Uint32Array((await preparedY(dev, at(1), one, emulate)).buffer);
    for (let c = 0; c < n; c++) {
      if (alone[c] !== all[r * n + c]) {
        mismatches.push(`row ${r} col ${c}: alone ${alone[c].toString(16)} vs in m=${m} ${all[r * n + c].toString(16)}`);
        break;
      }
    }
  }
  return { mismatches };
}

/** flashAttention with `splits` then attentionCombine over the case's inputs; the case's problems (empty = pass). */
export function runFlashSplit(dev: Device, c: FlashCfg, splits: number, emulate: boolean): Promise<string[]> {
  const kc = flashCase(c, emulate);
  const caps = mmaCaps(dev.target.caps, emulate);
  const ins = kc.inputs();
  const fk = flashAttention(caps, { rows: c.rows, heads: c.heads, kvHeads: c.kvHeads, hd: c.hd, cap: c.cap, kv: c.kv, pos: c.pt, split: c.split, splits });
  const ck = attentionCombine(caps, { rows: c.rows, heads: c.heads, hd: c.hd, splits });
  return runPartialCombine(dev, kc, ins, fk, ck, c.rows * c.heads * splits * (c.hd + 2) * 4);
}

/**
 * A split-K case through its two kernels: `partial` over the case's first `leading` bindings (attention's q, k, v,
 * pos) into a scratch of `partBytes`, then `combine` over the scratch and the rest (attention's out); the case's
 * problems (empty = pass), its fault case's when the dispatch faults.
 */
export async function runPartialCombine(dev: Device, kc: KernelCase, ins: Uint8Array[], partial: Kernel, combine: Kernel, partBytes: number, leading = 4): Promise<string[]> {
  const bufs = ins.map((b) => {
    const d = dev.alloc(b.byteLength, "device");
    dev.write(d, 0, b);
    return d;
  });
  const part = dev.alloc(partBytes, "device");
  const bind = (b: DeviceBuffer) => ({ buffer: b, offset: 0, bytes: b.bytes });
  try {
    dev.run([
      { k: "kernel", compiled: dev.compile(partial), grid: partial.grid, work: { bytes: 0, flops: 0 }, bindings: [...bufs.slice(0, leading).map(bind), bind(part)] },
      { k: "kernel", compiled: dev.compile(combine), grid: combine.grid, work: { bytes: 0, flops: 0 }, bindings: [bind(part), ...bufs.slice(leading).map(bind)] },
    ]);
    try {
      await dev.synchronize(60_000);
    } catch (e) {
      if (e instanceof KernelFault) return checkCase(kc, { inputs: ins, fault: e });
      throw e;
    }
    const outputs = await Promise.all(bufs.map((b) => dev.read(b, 0, b.bytes)));
    return checkCase(kc, { inputs: ins, outputs });
  } finally {
    for (const b of [...bufs, part]) dev.free(b);
  }
}

// ---- the staged matmul (kernels/lib/mma_staged.ts) ----------------------------------------------------

/** A staged case: the matmul shape (reference and tolerance as mmaCase) and the staged layout. */
export interface StagedCase {
  s: MmaCaseShape;
  layout: Omit<StagedMatmulShape, "n" | "k" | "batch" | "w" | "bias" | "residual" | "split" | "name">;
}

export function stagedName(c: StagedCase): string {
  const l = c.layout;
  const block = `block ${l.bm ?? 128}x${l.bn ?? 128}x${l.bk ?? (l.wg ? 64 : 32)} ${l.stages ?? 4} stages`;
  const warps = l.wg ? `${l.wm ?? 2}x${l.wn ?? 1} warpgroups${l.wgPending ? ` ${l.wgPending} pending` : ""}` : `${l.wm ?? 2}x${l.wn ?? 4} warps`;
  return `staged ${mmaCase(c.s, true).name.replace(/^mma matmul /, "")} ${block} ${warps}`;
}

/** Tiles past m and n, odd n, K of fewer slices than stages, both bk, unsplit, f16, bias and residual. */
export function stagedCases(): StagedCase[] {
  return [
    { s: { n: 64, k: 64, batch: 40, w: "bf16" }, layout: { bm: 64, bn: 64, stages: 3 } },
    { s: { n: 72, k: 96, batch: 17, w: "bf16", bias: true, residual: true }, layout: { bm: 32, bn: 64, stages: 2, wm: 1, wn: 2 } },
    { s: { n: 37, k: 128, batch: 5, w: "bf16", bias: true }, layout: { bm: 16, bn: 32, bk: 64, stages: 4, wm: 1, wn: 2 } },
    { s: { n: 48, k: 64, batch: 33, w: "bf16", split: false }, layout: { bm: 32, bn: 32, wm: 1, wn: 1 } },
    { s: { n: 40, k: 160, batch: 70, w: "f16", residual: true }, layout: { bm: 64, bn: 32, wm: 2, wn: 1, stages: 4 } },
    { s: { n: 136, k: 64, batch: 130, w: "bf16" }, layout: {} },
    // the prefill layout for x rounded once (mma_staged.ts stagedLayout): K slices of 64, 2 x 2 warps of 64 x 64
    { s: { n: 136, k: 192, batch: 130, w: "bf16", split: false, residual: true }, layout: { bm: 128, bn: 128, bk: 64, stages: 3, wm: 2, wn: 2 } },
    // warpgroup MMA (caps.wgmma): tiles past m and n, x split (two wgmmas a step), f16 with bias, 64-row subtiles
    // of a 128-row warpgroup tile with one group in flight, n = 256 in one wgmma
    { s: { n: 136, k: 192, batch: 130, w: "bf16", split: false, residual: true }, layout: { bm: 128, bn: 128, bk: 64, stages: 3, wm: 2, wn: 1, wg: true } },
    { s: { n: 72, k: 128, batch: 70, w: "f16", bias: true }, layout: { bm: 64, bn: 64, bk: 64, stages: 2, wm: 1, wn: 1, wg: true } },
    { s: { n: 200, k: 320, batch: 150, w: "bf16", split: false }, layout: { bm: 128, bn: 256, bk: 64, stages: 4, wm: 1, wn: 2, wg: true, wgPending: 1 } },
    { s: { n: 256, k: 128, batch: 64, w: "bf16", split: false, residual: true }, layout: { bm: 64, bn: 256, bk: 64, stages: 3, wm: 1, wn: 1, wg: true } },
  ];
}

/** mmaPrepX then the staged matmul; the case's problems (empty = pass). */
export function runStaged(dev: Device, c: StagedCase, emulate: boolean): Promise<string[]> {
  return runPrepared(dev, c.s, emulate, (caps) => stagedMatmul(caps, { ...c.s, ...c.layout }));
}

// ---- the staged flash attention (kernels/lib/flash_staged.ts) ------------------------------------------

export type FlashStagedCfg = FlashCfg & { warps?: number; bkv?: number };

/** hd 64 and 128, rows past a tile, cap at the chunk's end, GQA, f16/bf16/f32 K and V, i32 pos, unsplit. */
export function flashStagedCfgs(): FlashStagedCfg[] {
  return [
    { rows: 37, heads: 4, kvHeads: 2, hd: 64, cap: 80, pos: 20, pt: "i32" },
    { rows: 70, heads: 2, kvHeads: 1, hd: 128, cap: 150, pos: 50, kv: "f16" },
    { rows: 16, heads: 2, kvHeads: 2, hd: 64, cap: 16, pos: 0 },
    { rows: 33, heads: 2, kvHeads: 1, hd: 64, cap: 100, pos: 7, split: false },
    { rows: 40, heads: 2, kvHeads: 1, hd: 128, cap: 120, pos: 45, kv: "f16", split: false }, // unsplit hd 128: 64-position tiles
    { rows: 20, heads: 3, kvHeads: 1, hd: 64, cap: 64, pos: 30, kv: "bf16", warps: 2, bkv: 32 },
  ];
}

export function flashStagedName(c: FlashStagedCfg): string {
  return `staged ${flashCase(c, true).name}${c.warps ? ` warps=${c.warps}` : ""}${c.bkv ? ` bkv=${c.bkv}` : ""}`;
}

/** flashPrepKV then flashStaged over flashCase's inputs; the case's problems (empty = pass). */
export async function runFlashStaged(dev: Device, c: FlashStagedCfg, emulate: boolean): Promise<string[]> {
  const kc = flashCase(c, emulate);
  const caps = mmaCaps(dev.target.caps, emulate);
  const ins = kc.inputs();
  const shape = { rows: c.rows, heads: c.heads, kvHeads: c.kvHeads, hd: c.hd, cap: c.cap, kv: c.kv, pos: c.pt, split: c.split, warps: c.warps, bkv: c.bkv };
  const prep = flashPrepKV(caps, shape), fk = flashStaged(caps, shape);
  const bufs = ins.map((b) => {
    const d = dev.alloc(b.byteLength, "device");
    dev.write(d, 0, b);
    return d;
  });
  const halves = [0, 1].map(() => dev.alloc(flashPrepBytes(shape), "device"));
  const bind = (b: DeviceBuffer) => ({ buffer: b, offset: 0, bytes: b.bytes });
  try {
    dev.run([
      { k: "kernel", compiled: dev.compile(prep), grid: prep.grid, work: { bytes: 0, flops: 0 }, bindings: [...bufs.slice(1, 4).map(bind), ...halves.map(bind)] },
      { k: "kernel", compiled: dev.compile(fk), grid: fk.grid, work: { bytes: 0, flops: 0 }, bindings: [bind(bufs[0]), ...halves.map(bind), bind(bufs[3]), bind(bufs[4])] },
    ]);
    await dev.synchronize(60_000);
    const outputs = await Promise.all(bufs.map((b) => dev.read(b, 0, b.bytes)));
    return checkCase(kc, { inputs: ins, outputs });
  } finally {
    for (const b of [...bufs, ...halves]) dev.free(b);
  }
}

/**
 * The staged matmul's batch invariance within itself: row r alone (m = 1) and inside m rows give the same bits
 * (mmaPrepX then the kernel, the same layout). Returns the mismatching rows (empty = pass).
 */
export async function stagedInvariance(dev: Device, c: StagedCase, rows: number[], emulate: boolean): Promise<string[]> {
  const caps = mmaCaps(dev.target.caps, emulate);
  const { n, k } = c.s, parts = c.s.split === false ? 1 : 2;
  const w = floats(new Rng("invariance-w"), c.s.w, n * k).bytes;
  const run = async (m: number, x: Uint8Array): Promise<Uint32Array> => {
    const s = { ...c.s, batch: m, bias: false, residual: false };
    const prep = mmaPrepX(caps, { m, k, ab: s.w, split: s.split }), mm = stagedMatmul(caps, { ...s, ...c.layout });
    const bufs = [x, w, new Uint8Array(m * n * 4)].map((b) => {
      const d = dev.alloc(b.byteLength, "device");
      dev.write(d, 0, b);
      return d;
    });
    const xw = dev.alloc(parts * m * k * 2, "device");
    const bind = (b: DeviceBuffer) => ({ buffer: b, offset: 0, bytes: b.bytes });
    try {
      dev.run([
        { k: "kernel", compiled: dev.compile(prep), grid: prep.grid, work: { bytes: 0, flops: 0 }, bindings: [bind(bufs[0]), bind(xw)] },
        { k: "kernel", compiled: dev.compile(mm), grid: mm.grid, work: { bytes: 0, flops: 0 }, bindings: [bind(xw), bind(bufs[1]), bind(bufs[2])] },
      ]);
      await dev.synchronize(60_000);
      return new Uint32Array((await dev.read(bufs[2], 0, bufs[2].bytes)).slice().buffer);
    } finally {
      for (const b of [...bufs, xw]) dev.free(b);
    }
  };
  const m = c.s.batch;
  const x = bytes(new Rng("invariance-x").f32(m * k));
  const all = await run(m, x);
  const bad: string[] = [];
  for (const r of rows) {
    const alone = await run(1, x.slice(r * k * 4, (r + 1) * k * 4));
    const col = Array.from({ length: n }, (_, j) => j).find((j) => alone[j] !== all[r * n + j]);
    if (col !== undefined) bad.push(`row ${r} col ${col}: alone ${alone[col].toString(16)} vs in m=${m} ${all[r * n + col].toString(16)}`);
  }
  return bad;
}

/**
 * The logits of one `rows`-row prefill step (tokens (i·37 + 5) mod vocab, position 3) of a traced model on a JS
 * device with `caps`, compiled with `opts`: what the MMA and staged prefill tests compare against the FMA path.
 */
export async function prefillLogits(
  m: { store: WeightStore; map: WeightMap; graph: Graph },
  rows: number,
  vocab: number,
  caps: Caps,
  opts: CompileOptions = {},
): Promise<Float32Array> {
  const eng = new Engine(new JsDevice({ caps }), { compile: (g, t) => compileGraph(g, t, opts) });
  try {
    await eng.loadWeights(m.store, m.map);
    const id = eng.addEntry("prefill", m.graph);
    const token = Int32Array.from({ length: rows }, (_, i) => (i * 37 + 5) % vocab);
    return (await eng.step(id, { token, pos: new Int32Array([3]) })).outputs.logits as Float32Array;
  } finally {
    await eng.unload();
  }
}

/** The largest |a − b| and |b| over two logit rows of one length; throws on a non-finite a. */
export function logitGap(a: Float32Array, b: Float32Array): { worst: number; scale: number } {
  if (a.length !== b.length) throw new Error(`${a.length} logits against ${b.length}`);
  let worst = 0, scale = 0;
  for (let i = 0; i < a.length; i++) {
    if (!Number.isFinite(a[i])) throw new Error(`logit ${i} is ${a[i]}`);
    worst = Math.max(worst, Math.abs(a[i] - b[i]));
    scale = Math.max(scale, Math.abs(b[i]));
  }
  return { worst, scale };
}
