// Conformance cases of the tensor-core matmuls over GGUF blocks: the staged kernel (kernels/lib/mma_staged.ts
// `blocks`, kernels/lib/mma_blocks.ts) and its split over k (`splitK`, stagedCombine), and the register-operand
// kernel of the serving entries (kernels/lib/mma_matmul.ts `blocks`): run on the JS device with the MMA emulated
// (tests/kernels/mma_staged.test.ts, mma_js.test.ts) and on a real PTX device (tests/ptx/mma_staged.test.ts,
// tests/ptx/mma.test.ts).
//
// Reference: x and the blocks' exact values each rounded to bf16 as the kernel rounds them (x as hi + lo parts where
// split), so only the f32 sums' order is left: rel k·2^-22.
import type { KernelCase } from "./cases.ts";
import type { Device } from "../../backends/device.ts";
import { stagedCombine, stagedMatmul } from "../../kernels/lib/mma_staged.ts";
import { type MmaMatmulShape, mmaMatmul, mmaServingLayout } from "../../kernels/lib/mma_matmul.ts";
import type { Caps } from "../../kernels/target.ts";
import type { Kernel } from "../../kernels/ir.ts";
import { type BlockDType, dequantize } from "../../graph/dtype.ts";
import { bf16ToF32, f32ToBf16 } from "../../graph/half.ts";
import { quantizeBlocks } from "../../llm/formats/ggml-quants.ts";
import { bytes, matmulWant, Rng } from "./data.ts";
import { mmaCaps, rowInputs, runPartialCombine, type StagedCase } from "./mma_cases.ts";
import { runCase } from "./harness.ts";

/** A block case: W as blocks of `t` (ggml's quantization of U(-1, 1)), x as prepared bf16 words, the layout. */
export interface StagedBlockCase {
  t: BlockDType;
  n: number;
  k: number;
  batch: number;
  bias?: boolean;
  residual?: boolean;
  /** x as hi + lo bf16 parts (the serving entries'); default rounded once. */
  split?: boolean;
  layout: StagedCase["layout"];
}

export function stagedBlockName(c: StagedBlockCase): string {
  const l = c.layout;
  return `staged ${c.t} blocks n=${c.n} k=${c.k} m=${c.batch}${c.bias ? " bias" : ""}${c.residual ? " residual" : ""}${c.split ? " split" : ""} block ${l.bm}x${l.bn}x64 ${l.stages ?? 4} stages ${
    l.wg ? `${l.wm}x${l.wn} warpgroups${l.wgPending ? " 1 pending" : ""}` : `${l.wm}x${l.wn} warps`}`;
}

/**
 * Every block type; a row of one slice and of several (q6_k: both halves of its 128-value spans), rows and
 * columns off the tile, warp and warpgroup tiles, one group in flight, bias and residual; rows of an odd and an
 * even number of blocks.
 */
export function stagedBlockCases(): StagedBlockCase[] {
  const wg = { bk: 64, wg: true };
  return [
    { t: "q4_k", n: 72, k: 512, batch: 40, layout: { ...wg, bm: 64, bn: 64, stages: 3, wm: 1, wn: 1 } },
    { t: "q6_k", n: 40, k: 512, batch: 17, residual: true, layout: { bm: 32, bn: 32, bk: 64, stages: 2, wm: 1, wn: 1 } },
    { t: "q8_0", n: 64, k: 128, batch: 33, bias: true, layout: { bm: 32, bn: 64, bk: 64, stages: 3, wm: 1, wn: 2 } },
    { t: "q4_0", n: 24, k: 192, batch: 16, layout: { ...wg, bm: 64, bn: 64, stages: 4, wm: 1, wn: 1, wgPending: 1 } },
    { t: "q5_k", n: 136, k: 256, batch: 20, residual: true, layout: { bm: 32, bn: 128, bk: 64, stages: 3, wm: 1, wn: 2 } },
    { t: "q5_0", n: 16, k: 64, batch: 16, layout: { bm: 16, bn: 16, bk: 64, stages: 2, wm: 1, wn: 1 } },
    { t: "q4_1", n: 32, k: 128, batch: 9, layout: { ...wg, bm: 64, bn: 32, stages: 2, wm: 1, wn: 1 } },
    { t: "q5_1", n: 48, k: 64, batch: 24, bias: true, layout: { bm: 32, bn: 48, bk: 64, stages: 2, wm: 1, wn: 3 } },
    // rows of an odd number of blocks (q6_k's quants then read as 16-bit words), and of an even number (u32 words)
    { t: "q6_k", n: 24, k: 768, batch: 16, layout: { ...wg, bm: 64, bn: 32, stages: 3, wm: 1, wn: 1 } },
    { t: "q8_0", n: 40, k: 192, batch: 20, layout: { bm: 32, bn: 32, bk: 64, stages: 2, wm: 1, wn: 1 } },
    // x as hi + lo parts (the serving entries' layout), one row and several
    { t: "q4_k", n: 64, k: 512, batch: 1, split: true, residual: true, layout: { ...wg, bm: 64, bn: 64, stages: 4, wm: 1, wn: 1, wgPending: 1 } },
    { t: "q6_k", n: 72, k: 256, batch: 9, split: true, layout: { bm: 64, bn: 64, bk: 64, stages: 3, wm: 2, wn: 2 } },
  ];
}

/**
 * The case as a KernelCase: the reference multiplies x and the blocks' exact values each rounded to bf16 as the
 * kernel rounds them, so only the f32 sums' order is left (rel k·2^-22): a value staged in the wrong place, a
 * wrong half or an unrounded weight fails it.
 */
export function stagedBlockCase(c: StagedBlockCase, emulate: boolean): KernelCase {
  return blockCase(c, stagedBlockName(c), (caps) =>
    stagedMatmul(mmaCaps(caps, emulate), { n: c.n, k: c.k, batch: c.batch, w: "bf16", split: !!c.split, bias: c.bias, residual: c.residual, blocks: c.t, ...c.layout }));
}

/** A matmul over blocks of `t` with x prepared (bindings xw, W, bias?, residual?, y), checked as stagedBlockCase says. */
function blockCase(c: Omit<StagedBlockCase, "layout">, name: string, make: (caps: Caps) => Kernel): KernelCase {
  let cached: Uint8Array[] | undefined, w: Float64Array;
  const pad = (b: Uint8Array) => (b.byteLength % 16 ? Uint8Array.from({ length: Math.ceil(b.byteLength / 16) * 16 }, (_, i) => b[i] ?? 0) : b);
  return {
    name,
    make,
    inputs() {
      if (!cached) {
        const rng = new Rng(name);
        const blocks = quantizeBlocks(c.t, rng.f32(c.n * c.k, -1, 1));
        w = Float64Array.from(dequantize(c.t, blocks, c.n * c.k), (v) => bf16ToF32(f32ToBf16(v)));
        const x = rng.f32(c.batch * c.k);
        // x's words: part 0 its bf16 rounding (hi), with split part 1 the rest's (lo), as mmaPrepX lays them out
        const lo = Float32Array.from(x, (v) => v - bf16ToF32(f32ToBf16(v)));
        const pair = (v: Float32Array, i: number) => (f32ToBf16(v[2 * i]) | (f32ToBf16(v[2 * i + 1]) << 16)) >>> 0;
        const half = (c.batch * c.k) / 2;
        const words = Uint32Array.from({ length: (c.split ? 2 : 1) * half }, (_, i) => (i < half ? pair(x, i) : pair(lo, i - half)));
        cached = [bytes(words), pad(blocks)];
        if (c.bias) cached.push(bytes(rng.f32(c.n)));
        if (c.residual) cached.push(bytes(rng.f32(c.batch * c.n)));
        cached.push(bytes(new Float32Array(c.batch * c.n).fill(NaN)));
      }
      return cached.map((b) => b.slice());
    },
    expect(ins) {
      const words = new Uint32Array(ins[0].buffer, ins[0].byteOffset, ins[0].byteLength / 4), half = (c.batch * c.k) / 2;
      const part = (p: number, i: number) => bf16ToF32(words[p * half + (i >> 1)] >>> (16 * (i & 1)));
      const x = Float64Array.from({ length: c.batch * c.k }, (_, i) => part(0, i) + (c.split ? part(1, i) : 0));
      const { want, mag } = matmulWant(x, w, c, ins);
      return [{ binding: ins.length - 1, type: "f32", want, mag, tol: { abs: 1e-30, rel: c.k * 2 ** -22 } }];
    },
  };
}

/**
 * A block case split over k (StagedMatmulShape.splitK): the staged kernel into partials [splits, m, n], then
 * stagedCombine with the case's bias and residual into y; checked as stagedBlockCase is. The problems (empty = pass).
 */
export function runStagedSplitK(dev: Device, c: StagedBlockCase, splits: number, emulate: boolean): Promise<string[]> {
  const kc = stagedBlockCase(c, emulate);
  const caps = mmaCaps(dev.target.caps, emulate);
  const mm = stagedMatmul(caps, { n: c.n, k: c.k, batch: c.batch, w: "bf16", split: !!c.split, blocks: c.t, splitK: splits, ...c.layout });
  const ck = stagedCombine(caps, { n: c.n, batch: c.batch, splits, bias: c.bias, residual: c.residual });
  // the matmul reads x's words and the blocks, the combine the bias and residual and writes y
  return runPartialCombine(dev, kc, kc.inputs(), mm, ck, splits * c.batch * c.n * 4, 2);
}

/** Split-K block cases: q4_k over 4 splits of 2 slices, q6_k (two slices a trip) over 2, bias and residual in the combine. */
export function stagedSplitKCases(): [StagedBlockCase, number][] {
  const wg = { bk: 64, wg: true, wm: 1, wn: 1, wgPending: 1 };
  return [
    [{ t: "q4_k", n: 64, k: 512, batch: 3, split: true, residual: true, layout: { ...wg, bm: 64, bn: 64, stages: 6 } }, 4],
    [{ t: "q6_k", n: 72, k: 512, batch: 20, bias: true, layout: { ...wg, bm: 64, bn: 64, stages: 6 } }, 2],
    [{ t: "q8_0", n: 40, k: 256, batch: 9, split: true, layout: { bm: 64, bn: 64, bk: 64, stages: 3, wm: 2, wn: 2 } }, 4],
  ];
}

/** A case of the register-operand MMA matmul over blocks (the serving entries'): the blocks, the rows, the layout. */
export type RegisterBlockCase = Omit<StagedBlockCase, "layout"> & { layout: Pick<MmaMatmulShape, "ks" | "mt" | "nt" | "unroll"> };

export function registerBlockName(c: RegisterBlockCase): string {
  const l = c.layout;
  return `mma matmul ${c.t} blocks n=${c.n} k=${c.k} m=${c.batch}${c.bias ? " bias" : ""}${c.residual ? " residual" : ""}${c.split ? " split" : ""} ks=${l.ks} ${l.mt ?? "-"}x${l.nt ?? "-"} tiles${l.unroll ? ` unroll ${l.unroll}` : ""}`;
}

export function registerBlockCase(c: RegisterBlockCase, emulate: boolean): KernelCase {
  return blockCase(c, registerBlockName(c), (caps) =>
    mmaMatmul(mmaCaps(caps, emulate), { n: c.n, k: c.k, batch: c.batch, w: "bf16", split: !!c.split, bias: c.bias, residual: c.residual, blocks: c.t, prepared: true, ...c.layout }));
}

/**
 * Every block type; one row (the padded half tile), a few, and two row tiles; k split over warps with and without a
 * rest on warp 0, a partial last trip (q8_0 rows of an odd number of blocks), columns off the tile, bias and
 * residual; rows of an odd and an even number of blocks.
 */
export function registerBlockCases(): RegisterBlockCase[] {
  return [
    { t: "q4_k", n: 40, k: 512, batch: 1, split: true, residual: true, layout: { ks: 2, mt: 1, nt: 2 } },
    { t: "q6_k", n: 24, k: 768, batch: 5, split: true, layout: { ks: 1, mt: 1, nt: 1, unroll: 2 } },
    { t: "q6_k", n: 8, k: 512, batch: 17, split: true, bias: true, layout: { ks: 4, mt: 2, nt: 1 } },
    { t: "q8_0", n: 16, k: 96, batch: 20, split: true, bias: true, layout: { ks: 1, mt: 2, nt: 1 } },
    { t: "q8_0", n: 20, k: 224, batch: 3, split: true, layout: { ks: 2, mt: 1, nt: 2 } },
    { t: "q4_0", n: 8, k: 128, batch: 33, layout: { ks: 2, mt: 2, nt: 1 } },
    { t: "q5_k", n: 16, k: 256, batch: 2, split: true, residual: true, layout: { ks: 2, mt: 1, nt: 2 } },
    { t: "q4_1", n: 16, k: 192, batch: 9, split: true, layout: { ks: 2, mt: 1, nt: 1 } },
    { t: "q5_0", n: 8, k: 64, batch: 16, split: true, layout: { ks: 1, mt: 1, nt: 1 } },
    { t: "q5_1", n: 8, k: 128, batch: 1, layout: { ks: 2, mt: 1, nt: 1 } },
    // three trips a warp two at a time: a pair, then one
    { t: "q4_k", n: 16, k: 768, batch: 4, split: true, layout: { ks: 2, mt: 1, nt: 2, unroll: 2 } },
  ];
}

/**
 * The serving entries' invariance over blocks: rows `rows` of a batch of `m` under mmaServingLayout's layout for m
 * rows against each row alone under the layout for 1 row (other tiles; the same K split), bit for bit. The mismatches.
 */
export async function registerBlockInvariance(dev: Device, c: Omit<RegisterBlockCase, "layout" | "batch">, m: number, rows: number[], emulate: boolean): Promise<string[]> {
  const at = (batch: number): RegisterBlockCase => ({ ...c, batch, split: true, layout: mmaServingLayout(c.n, c.k, batch, {}, c.t) });
  const y = async (kc: KernelCase, ins: Uint8Array[]) => {
    const r = await runCase(dev, { ...kc, inputs: () => ins });
    if (!r.outputs) throw new Error(r.fault?.message ?? "no outputs");
    return new Uint32Array(r.outputs[r.outputs.length - 1].slice().buffer);
  };
  const full = registerBlockCase(at(m), emulate), ins = full.inputs();
  const all = await y(full, ins);
  const { n, k } = c, half = (m * k) / 2, rowWords = k / 2;
  const words = new Uint32Array(ins[0].slice().buffer);
  const out: string[] = [];
  for (const r of rows) {
    // x's two parts of row r
    const xw = Uint32Array.from({ length: 2 * rowWords }, (_, i) => words[(i < rowWords ? 0 : half) + r * rowWords + (i % rowWords)]);
    const one = rowInputs(ins, c, r, bytes(xw));
    const alone = await y(registerBlockCase(at(1), emulate), one);
    const col = alone.findIndex((v, j) => v !== all[r * n + j]);
    if (col >= 0) out.push(`row ${r} col ${col}: alone ${alone[col].toString(16)} vs in m=${m} ${all[r * n + col].toString(16)}`);
  }
  return out;
}
