// Conformance cases of the staged tensor-core matmul over GGUF blocks (kernels/lib/mma_staged.ts `blocks`,
// kernels/lib/mma_blocks.ts) and its split over k (`splitK`, stagedCombine): run on the JS device with the MMA
// emulated (tests/kernels/mma_staged.test.ts) and on a real PTX device (tests/ptx/mma_staged.test.ts).
//
// Reference: x and the blocks' exact values each rounded to bf16 as the kernel rounds them (x as hi + lo parts where
// split), so only the f32 sums' order is left: rel k·2^-22.
import type { KernelCase } from "./cases.ts";
import type { Device } from "../../backends/device.ts";
import { stagedCombine, stagedMatmul } from "../../kernels/lib/mma_staged.ts";
import { type BlockDType, dequantize } from "../../graph/dtype.ts";
import { bf16ToF32, f32ToBf16 } from "../../graph/half.ts";
import { quantizeBlocks } from "../../llm/formats/ggml-quants.ts";
import { bytes, matmulWant, Rng } from "./data.ts";
import { mmaCaps, runPartialCombine, type StagedCase } from "./mma_cases.ts";

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
  const name = stagedBlockName(c);
  let cached: Uint8Array[] | undefined, w: Float64Array;
  const pad = (b: Uint8Array) => (b.byteLength % 16 ? Uint8Array.from({ length: Math.ceil(b.byteLength / 16) * 16 }, (_, i) => b[i] ?? 0) : b);
  return {
    name,
    make: (caps) => stagedMatmul(mmaCaps(caps, emulate), { n: c.n, k: c.k, batch: c.batch, w: "bf16", split: !!c.split, bias: c.bias, residual: c.residual, blocks: c.t, ...c.layout }),
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
