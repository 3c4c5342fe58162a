// Device time of one matmul y[m, n] = x[m, k] W[n, k]^T (bf16 W, f32 x and y) per kernel variant, on the PTX
// device: the FMA kernel (kernels/lib/matmul.ts, tile 8 and 32) beside the tensor-core one
// (kernels/lib/mma_matmul.ts) in several tilings. Each variant launches `launches` times in one recording with
// W rotated over copies (L2 holds none of them when W is small), replayed; µs per launch, TFLOP/s and W GB/s.
//
//   deno run -A bench/mma.ts                                  (the Llama 1B / 8B projections at m = 1..2048)
//   deno run -A bench/mma.ts --cases 32x2048x2048,512x8192x2048 --variants fma8,mma,mma:4x4
//   deno run -A bench/mma.ts --cases 2048x14336x4096 --variants mma:xw,staged,staged:128x256x32:w2x4
import { replayMicros } from "./kernels.ts";
import { exit } from "node:process";
import { parseArgs } from "node:util";
import { PtxDevice } from "../backends/ptx/mod.ts";
import type { Device, DeviceBuffer, DeviceStep } from "../backends/device.ts";
import type { Kernel } from "../kernels/ir.ts";
import { matmul } from "../kernels/lib/matmul.ts";
import { mmaMatmul, mmaMatmulFits } from "../kernels/lib/mma_matmul.ts";
import { type StagedLayout, stagedLayout, stagedMatmul, stagedMatmulFits } from "../kernels/lib/mma_staged.ts";

const L2_DEFEAT = 256 << 20;

/**
 * A variant name -> its kernel: fma8, fma32, mma (defaults), unsplit, mma:MTxNT:ksK:uU:wNWxMW:unsplit:xw (any
 * parts; wNWxMW: warps along N and M per workgroup; xw: x as prepared MMA words, the prep kernel not timed),
 * staged (kernels/lib/mma_staged.ts, default layout; x as prepared words, the prep not timed) and
 * staged:BMxBNxBK:sS:wWMxWN:unsplit (any parts).
 */
export function variantKernel(dev: Device, v: string, m: number, n: number, k: number): Kernel | undefined {
  const caps = dev.target.caps;
  if (v.startsWith("fma")) return matmul(caps, { n, k, batch: m, w: "bf16", tile: Number(v.slice(3)) || 8 });
  if (v === "staged" || v.startsWith("staged:")) {
    const l = { ...stagedLayout(m, n), ...parseStaged(v.split(":").slice(1)) };
    if (!stagedMatmulFits(caps, "bf16", n, k, l, l.split ?? true)) return undefined;
    return stagedMatmul(caps, { n, k, batch: m, w: "bf16", ...l });
  }
  if (!mmaMatmulFits(caps, "bf16", n, k)) return undefined;
  if (v === "unsplit") return mmaMatmul(caps, { n, k, batch: m, w: "bf16", split: false });
  if (v === "mma") return mmaMatmul(caps, { n, k, batch: m, w: "bf16" });
  try {
    return mmaMatmul(caps, { n, k, batch: m, w: "bf16", ...parseLayout(v.split(":").slice(1)) });
  } catch {
    return undefined; // a tiling that does not fit this shape
  }
}

/** Layout parts: MTxNT, ksK, uU, wNWxMW, unsplit, xw. */
export function parseLayout(parts: string[]): { mt?: number; nt?: number; ks?: number; unroll?: number; split?: boolean; prepared?: boolean; nw?: number; mw?: number } {
  const o: { mt?: number; nt?: number; ks?: number; unroll?: number; split?: boolean; prepared?: boolean; nw?: number; mw?: number } = {};
  for (const part of parts) {
    if (/^\d+x\d+$/.test(part)) [o.mt, o.nt] = part.split("x").map(Number);
    else if (part.startsWith("ks")) o.ks = Number(part.slice(2));
    else if (part.startsWith("u")) o.unroll = Number(part.slice(1));
    else if (part === "unsplit") o.split = false;
    else if (part === "xw") o.prepared = true;
    else if (/^w\d+x\d+$/.test(part)) [o.nw, o.mw] = part.slice(1).split("x").map(Number);
    else throw new RangeError(`layout: unknown part ${part}`);
  }
  return o;
}

/** Staged layout parts: BMxBNxBK, sS (stages), wWMxWN (warps along M and N), unsplit. */
export function parseStaged(parts: string[]): StagedLayout & { split?: boolean } {
  const o: StagedLayout & { split?: boolean } = {};
  for (const part of parts) {
    if (/^\d+x\d+x\d+$/.test(part)) [o.bm, o.bn, o.bk] = part.split("x").map(Number);
    else if (/^s\d+$/.test(part)) o.stages = Number(part.slice(1));
    else if (/^w\d+x\d+$/.test(part)) [o.wm, o.wn] = part.slice(1).split("x").map(Number);
    else if (part === "unsplit") o.split = false;
    else throw new RangeError(`staged layout: unknown part ${part}`);
  }
  return o;
}

export async function timeKernel(dev: Device, kernel: Kernel, m: number, n: number, k: number): Promise<number> {
  const bufs: DeviceBuffer[] = [];
  const alloc = (bytes: number) => {
    const b = dev.alloc(Math.max(16, bytes), "device");
    bufs.push(b);
    return b;
  };
  try {
    const compiled = dev.compile(kernel);
    const wBytes = n * k * 2;
    const copies = Math.max(1, Math.min(32, Math.ceil(L2_DEFEAT / wBytes)));
    const x = alloc(m * k * 4), y = alloc(m * n * 4);
    dev.write(x, 0, new Uint8Array(m * k * 4)); // zeros: the memory traffic does not depend on values
    const ws = Array.from({ length: copies }, () => alloc(wBytes));
    const flops = 2 * m * n * k;
    const launches = Math.max(4, Math.min(200, Math.round(2e-3 / Math.max(3e-6, wBytes / 3e12 + flops / 300e12))));
    const steps: DeviceStep[] = Array.from({ length: launches }, (_, i) => ({
      k: "kernel", compiled, grid: kernel.grid, work: { bytes: wBytes, flops },
      bindings: [x, ws[i % copies], y].map((b) => ({ buffer: b, offset: 0, bytes: b.bytes })),
    }));
    return await replayMicros(dev, steps, 5, launches);
  } finally {
    for (const b of bufs) dev.free(b);
  }
}

export async function main(args: string[]): Promise<number> {
  const { values } = parseArgs({
    args, strict: true, allowPositionals: false,
    options: {
      // m x n x k: the 1B's q/o (2048x2048), gate/up (8192x2048), down (2048x8192); the 8B's gate/up
      cases: { type: "string", default: "1x2048x2048,8x2048x2048,32x2048x2048,64x2048x2048,32x8192x2048,32x2048x8192,256x2048x2048,256x8192x2048,256x2048x8192,512x8192x2048,2048x8192x2048,256x14336x4096,2048x14336x4096" },
      variants: { type: "string", default: "fma8,fma32,mma,unsplit,mma:1x2,mma:2x2,mma:4x2,mma:4x4,mma:2x4,mma:8x2" },
    },
  });
  const dev = await PtxDevice.open();
  try {
    const variants = values.variants!.split(",");
    console.log(`| m x n x k | ${variants.join(" | ")} | best |`);
    console.log(`| --- | ${variants.map(() => "---").join(" | ")} | --- |`);
    for (const c of values.cases!.split(",")) {
      const [m, n, k] = c.split("x").map(Number);
      const cells: string[] = [];
      let best = { v: "", us: Infinity };
      for (const v of variants) {
        if (v.startsWith("fma") && m >= 1024 && n * k > 2 ** 26) { cells.push("-"); continue; } // minutes of FMA
        const kern = variantKernel(dev, v, m, n, k);
        if (!kern) { cells.push("n/a"); continue; }
        try {
          const us = await timeKernel(dev, kern, m, n, k);
          const tf = (2 * m * n * k) / (us * 1e6);
          cells.push(`${us.toFixed(1)} µs ${tf.toFixed(0)} TF ${((n * k * 2) / (us * 1e3)).toFixed(0)} GB/s`);
          if (us < best.us) best = { v, us };
        } catch (e) {
          cells.push(`error: ${(e as Error).message.slice(0, 60)}`);
        }
      }
      console.log(`| ${c} | ${cells.join(" | ")} | ${best.v} |`);
    }
  } finally {
    await dev.destroy();
  }
  return 0;
}

if (import.meta.main) {
  try {
    exit(await main((globalThis as unknown as { Deno?: { args: string[] } }).Deno?.args ?? []));
  } catch (e) {
    console.error(`mma bench: ${(e as Error).message}`);
    exit(1);
  }
}
