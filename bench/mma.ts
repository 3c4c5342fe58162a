// Device time of one matmul y[m, n] = x[m, k] W[n, k]^T (bf16 W, f32 x and y) per kernel variant, on the PTX
// device: the FMA kernel (kernels/lib/matmul.ts, tile 8 and 32) beside the tensor-core one
// (kernels/lib/mma_matmul.ts) in several tilings. Each variant launches `launches` times in one recording with
// W rotated over copies (L2 holds none of them when W is small), replayed; µs per launch, TFLOP/s and W GB/s.
//
//   deno run -A bench/mma.ts                                  (the Llama 1B / 8B projections at m = 1..2048)
//   deno run -A bench/mma.ts --cases 32x2048x2048,512x8192x2048 --variants fma8,mma,mma:4x4
//   deno run -A bench/mma.ts --cases 2048x14336x4096 --variants mma:xw,staged,staged:128x256x32:w2x4
//   deno run -A bench/mma.ts --serve llama-3-8b --m 1,8,32,64 --ks 8,16 --budget 55   (--ks 0: each matmul's serving split)
//   deno run -A bench/mma.ts --backend vulkan --cases 512x8192x2048 --variants tiled,coop,coop:128x128:w64x32:k64,coop:f32
// On Vulkan: tiled (kernels/lib/tiled_matmul.ts, the FMA path) and coop (kernels/lib/coop_matmul.ts, cooperative
// matrices; x as prepared words unless f32; coop:BMxBN:wWMxWN:kBK any parts, else coopLayout's).
// --serve: the serving entries' matmuls of each shape (q/o, k/v, gate/up, down, head) at the entry sizes --m,
// one row per layout (ks, nt, unroll, nw; mt follows m: ceil(m / 16) tiles of 16 rows, at most 4), GB/s of W
// per m, then the best layout per (ks, m). ks is part of a row's summation order, so one ks per shape must
// serve every m (batch invariance); the rest may differ per m. --budget bounds each shape set in seconds.
import { replayMicros } from "./kernels.ts";
import { exit } from "node:process";
import { parseArgs } from "node:util";
import { PtxDevice } from "../backends/ptx/mod.ts";
import { JsDevice } from "../backends/js/device.ts";
import { JS_CAPS } from "../kernels/target.ts";
import type { Device, DeviceBuffer, DeviceStep } from "../backends/device.ts";
import type { Kernel } from "../kernels/ir.ts";
import { matmul } from "../kernels/lib/matmul.ts";
import { mmaMatmul, type MmaMatmulShape, mmaMatmulFits, mmaServingKSplit, mmaServingLayout } from "../kernels/lib/mma_matmul.ts";
import { type StagedLayout, stagedLayout, stagedMatmul, stagedMatmulFits } from "../kernels/lib/mma_staged.ts";
import { isShapeName, SHAPES } from "./shapes.ts";
import { type CoopLayout, coopLayout, coopMatmul, coopMatmulFits } from "../kernels/lib/coop_matmul.ts";
import { tiledLayout, tiledMatmul } from "../kernels/lib/tiled_matmul.ts";
import { openVulkanDevice } from "../backends/vulkan/mod.ts";

const L2_DEFEAT = 256 << 20;

/**
 * A variant name -> its kernel: fma8, fma32, mma (defaults), unsplit, mma:MTxNT:ksK:uU:wNWxMW:unsplit:xw (any
 * parts; wNWxMW: warps along N and M per workgroup; xw: x as prepared MMA words, the prep kernel not timed),
 * staged (kernels/lib/mma_staged.ts, default layout; x as prepared words, the prep not timed) and
 * staged:BMxBNxBK:sS:wWMxWN:unsplit:wg:pP (any parts); serve (the server's entries' kernel and tiling at m rows).
 */
export function variantKernel(dev: Device, v: string, m: number, n: number, k: number): Kernel | undefined {
  const caps = dev.target.caps;
  if (v.startsWith("fma")) return matmul(caps, { n, k, batch: m, w: "bf16", tile: Number(v.slice(3)) || 8 });
  if (v === "tiled") return tiledLayout(caps, "bf16", m, n) && tiledMatmul(caps, { n, k, batch: m, w: "bf16" });
  if (v === "coop" || v.startsWith("coop:")) {
    const parts = v.split(":").slice(1), given: Partial<CoopLayout> = {};
    for (const p of parts) {
      if (/^\d+x\d+$/.test(p)) [given.bm, given.bn] = p.split("x").map(Number);
      else if (/^w\d+x\d+$/.test(p)) [given.wm, given.wn] = p.slice(1).split("x").map(Number);
      else if (/^k\d+$/.test(p)) given.bk = Number(p.slice(1));
      else if (p !== "f32") throw new RangeError(`coop layout: unknown part ${p}`);
    }
    const base = coopLayout(caps, m, n, k);
    if (!base) return undefined;
    const l = { ...base, ...given };
    return coopMatmulFits(caps, "bf16", n, k, l) ? coopMatmul(caps, { n, k, batch: m, w: "bf16", layout: l, prepared: !parts.includes("f32") }) : undefined;
  }
  if (v === "staged" || v.startsWith("staged:")) {
    const asked = parseStaged(v.split(":").slice(1));
    // a layout asked for in full is warp MMA unless it says wg; bare `staged` takes the default, wg or not
    const full = asked.bm !== undefined || asked.wm !== undefined || asked.stages !== undefined;
    const l = { ...stagedLayout(m, n, k, asked.split ?? true, !!caps.wgmma), ...(full ? { wg: false, wgPending: 0 } : {}), ...asked };
    if (!stagedMatmulFits(caps, "bf16", n, k, l, l.split ?? true)) return undefined;
    return stagedMatmul(caps, { n, k, batch: m, w: "bf16", ...l });
  }
  if (!mmaMatmulFits(caps, "bf16", n, k)) return undefined;
  // the server's entries' kernel at m rows (x split and prepared, mmaServingLayout's tiling)
  if (v === "serve") return mmaMatmul(caps, { n, k, batch: m, w: "bf16", prepared: true, ...mmaServingLayout(n, k, m) });
  if (v === "unsplit") return mmaMatmul(caps, { n, k, batch: m, w: "bf16", split: false });
  if (v === "mma") return mmaMatmul(caps, { n, k, batch: m, w: "bf16" });
  try {
    return mmaMatmul(caps, { n, k, batch: m, w: "bf16", ...parseLayout(v.split(":").slice(1)) });
  } catch {
    return undefined; // a tiling that does not fit this shape
  }
}

/** Layout parts: MTxNT, ksK, uU, wNWxMW, unsplit, xw, pS (S cp.async stages: needs xw). */
export function parseLayout(parts: string[]): Partial<MmaMatmulShape> {
  const o: Partial<MmaMatmulShape> = {};
  for (const part of parts) {
    if (/^\d+x\d+$/.test(part)) [o.mt, o.nt] = part.split("x").map(Number);
    else if (part.startsWith("ks")) o.ks = Number(part.slice(2));
    else if (part.startsWith("u")) o.unroll = Number(part.slice(1));
    else if (part === "unsplit") o.split = false;
    else if (part === "xw") o.prepared = true;
    else if (/^w\d+x\d+$/.test(part)) [o.nw, o.mw] = part.slice(1).split("x").map(Number);
    else if (/^p\d+$/.test(part)) o.stages = Number(part.slice(1));
    else throw new RangeError(`layout: unknown part ${part}`);
  }
  return o;
}

/**
 * Staged layout parts: BMxBNxBK, sS (stages), wWMxWN (warps, or with wg warpgroups, along M and N), unsplit, wg
 * (warpgroup MMA, caps.wgmma), pP (with wg: MMA groups in flight, 0 or 1).
 */
export function parseStaged(parts: string[]): StagedLayout & { split?: boolean } {
  const o: StagedLayout & { split?: boolean } = {};
  for (const part of parts) {
    if (/^\d+x\d+x\d+$/.test(part)) [o.bm, o.bn, o.bk] = part.split("x").map(Number);
    else if (/^s\d+$/.test(part)) o.stages = Number(part.slice(1));
    else if (/^w\d+x\d+$/.test(part)) [o.wm, o.wn] = part.slice(1).split("x").map(Number);
    else if (part === "unsplit") o.split = false;
    else if (part === "wg") o.wg = true;
    else if (/^p\d$/.test(part)) o.wgPending = Number(part.slice(1));
    else throw new RangeError(`staged layout: unknown part ${part}`);
  }
  return o;
}

/** Buffers for timing matmuls of one (n, k) at up to `m` rows: x, y, and W copies that L2 cannot hold at once. */
export interface MatmulBuffers {
  x: DeviceBuffer;
  y: DeviceBuffer;
  ws: DeviceBuffer[];
  free(): void;
}

export function matmulBuffers(dev: Device, m: number, n: number, k: number): MatmulBuffers {
  const bufs: DeviceBuffer[] = [];
  const alloc = (bytes: number) => {
    const b = dev.alloc(Math.max(16, bytes), "device");
    bufs.push(b);
    return b;
  };
  try {
    const wBytes = n * k * 2;
    const copies = Math.max(1, Math.min(32, Math.ceil(L2_DEFEAT / wBytes)));
    // x big enough for f32 rows or prepared words (2 parts of bf16 pairs: the same bytes); zeros: the memory
    // traffic does not depend on values
    const x = alloc(m * k * 4), y = alloc(m * n * 4);
    dev.write(x, 0, new Uint8Array(m * k * 4));
    const ws = Array.from({ length: copies }, () => alloc(wBytes));
    return { x, y, ws, free: () => bufs.forEach((b) => dev.free(b)) };
  } catch (e) {
    for (const b of bufs) dev.free(b);
    throw e;
  }
}

export async function timeKernel(dev: Device, kernel: Kernel, m: number, n: number, k: number, given?: MatmulBuffers, budgetMs = 2): Promise<number> {
  const bufs = given ?? matmulBuffers(dev, m, n, k);
  try {
    const compiled = dev.compile(kernel);
    const wBytes = n * k * 2, { x, y, ws } = bufs;
    const flops = 2 * m * n * k;
    const launches = Math.max(4, Math.min(200, Math.round((budgetMs * 1e-3) / Math.max(3e-6, wBytes / 3e12 + flops / 300e12))));
    const steps: DeviceStep[] = Array.from({ length: launches }, (_, i) => ({
      k: "kernel", compiled, grid: kernel.grid, work: { bytes: wBytes, flops },
      bindings: [x, ws[i % ws.length], y].map((b) => ({ buffer: b, offset: 0, bytes: b.bytes })),
    }));
    return await replayMicros(dev, steps, given ? 3 : 5, launches);
  } finally {
    if (!given) bufs.free();
  }
}

/** The matmuls of a serving entry of a shape: name, n, k (q/o and k/v, gate/up, down, the head). */
export function servingMatmuls(shape: string): { name: string; n: number; k: number }[] {
  if (!isShapeName(shape)) throw new RangeError(`unknown shape ${shape}`);
  const c = SHAPES[shape], q = c.heads * c.headDim, kv = c.kvHeads * c.headDim;
  return [
    { name: "q/o", n: q, k: c.dim }, { name: "k/v", n: kv, k: c.dim }, { name: "gate/up", n: c.hidden, k: c.dim },
    { name: "down", n: c.dim, k: c.hidden }, { name: "head", n: c.vocab, k: c.dim },
  ];
}

type Layout = Pick<MmaMatmulShape, "ks" | "nt" | "unroll" | "nw" | "stages">;

/** Layouts swept at m rows (mt follows m): (nt, unroll, nw, stages) for skinny and for 32+ rows, at each ks. */
function servingLayouts(m: number, kss: number[]): Layout[] {
  // nw > 1 puts warps of one K slice on neighbouring columns in a workgroup (x loads shared in L1); stages > 0
  // brings each lane's words through a cp.async pipeline that deep (MmaMatmulShape.stages)
  const tiles = m <= 16
    ? [[1, 1], [1, 2], [1, 4], [2, 2], [2, 4], [4, 2], [1, 4, 2], [1, 1, 0, 3], [2, 1, 0, 3], [2, 1, 0, 4], [2, 2, 0, 2]]
    : [[1, 2], [2, 1], [2, 2], [4, 1], [4, 2], [8, 1], [2, 1, 2], [4, 1, 2], [2, 1, 0, 2], [2, 1, 0, 3], [4, 1, 0, 2], [4, 1, 0, 3], [4, 1, 0, 4], [8, 1, 0, 2], [8, 1, 0, 3]];
  return kss.flatMap((ks) =>
    tiles.filter(([, , nw]) => !nw || ks * nw <= 32).map(([nt, unroll, nw, stages]) => ({ ks, nt, unroll, ...(nw ? { nw } : {}), ...(stages ? { stages } : {}) }))
  );
}

const layoutName = (l: Layout) => `ks${l.ks}:nt${l.nt}:u${l.unroll}${l.nw ? `:w${l.nw}` : ""}${l.stages ? `:p${l.stages}` : ""}`;

/** --serve: per matmul of each shape, every layout at every m; GB/s of W, and the best per (ks, m). */
async function serveSweep(dev: Device, shapes: string[], ms: number[], kss: number[], budgetS: number): Promise<void> {
  const caps = dev.target.caps;
  for (const shape of shapes) {
    const t0 = performance.now();
    console.log(`\n## ${shape}: serving matmuls, W GB/s by layout (mt = ceil(m / 16) <= 4), budget ${budgetS} s`);
    for (const mm of servingMatmuls(shape)) {
      const { n, k } = mm;
      const wide = mmaServingKSplit(n, k);
      const shapeKs = kss.map((ks) => (ks === 0 ? wide : ks)).filter((x, i, a) => a.indexOf(x) === i); // 0: the serving split
      const bufs = matmulBuffers(dev, Math.max(...ms), n, k);
      // rows: "default" (the serving entries' layout: mmaServingLayout), then the grid
      const table = new Map<string, Map<number, number>>();
      try {
        for (const m of ms) {
          const mt = Math.min(4, Math.ceil(m / 16));
          const candidates: [string, Partial<MmaMatmulShape>][] = [[`default ks${wide}`, mmaServingLayout(n, k, m)],
            ...servingLayouts(m, shapeKs).map((l): [string, Partial<MmaMatmulShape>] => [layoutName(l), { ...l, mt }])];
          for (const [name, l] of candidates) {
            if ((performance.now() - t0) / 1000 > budgetS) break;
            let kern: Kernel;
            try {
              kern = mmaMatmul(caps, { n, k, batch: m, w: "bf16", prepared: true, ...l });
            } catch {
              continue; // a layout this shape does not take
            }
            try {
              const us = await timeKernel(dev, kern, m, n, k, bufs, 1);
              if (!table.has(name)) table.set(name, new Map());
              table.get(name)!.set(m, us);
            } catch (e) {
              console.log(`  ${mm.name} m${m} ${name}: ${(e as Error).message.slice(0, 80)}`);
            }
          }
        }
      } finally {
        bufs.free();
      }
      const gbs = (us: number | undefined) => (us === undefined ? "-" : `${us.toFixed(1)} µs ${((n * k * 2) / (us * 1e3)).toFixed(0)}`);
      console.log(`\n### ${shape} ${mm.name} n=${n} k=${k} (serving default: ks ${wide}): µs and W GB/s`);
      console.log(`| layout | ${ms.map((m) => `m=${m}`).join(" | ")} |`);
      console.log(`| --- | ${ms.map(() => "---").join(" | ")} |`);
      for (const [name, row] of table) console.log(`| ${name} | ${ms.map((m) => gbs(row.get(m))).join(" | ")} |`);
      // the best per (ks, m): what a ks for this shape gives at every entry size
      console.log(`best per ks: ${[wide, ...shapeKs].filter((x, i, a) => a.indexOf(x) === i).map((ks) => {
        const per = ms.map((m) => {
          let best: [string, number] | undefined;
          for (const [name, row] of table) {
            const us = row.get(m);
            if (us !== undefined && (name.startsWith(`ks${ks}:`) || name === `default ks${ks}`) && (!best || us < best[1])) best = [name, us];
          }
          return best ? `m${m} ${best[1].toFixed(1)} (${best[0]})` : `m${m} -`;
        });
        return `\n  ks${ks}: ${per.join(", ")}`;
      }).join("")}`);
    }
    console.log(`${shape}: sweep took ${((performance.now() - t0) / 1000).toFixed(1)} s`);
  }
}

export async function main(args: string[]): Promise<number> {
  const { values } = parseArgs({
    args, strict: true, allowPositionals: false,
    options: {
      // m x n x k: the 1B's q/o (2048x2048), gate/up (8192x2048), down (2048x8192); the 8B's gate/up
      cases: { type: "string", default: "1x2048x2048,8x2048x2048,32x2048x2048,64x2048x2048,32x8192x2048,32x2048x8192,256x2048x2048,256x8192x2048,256x2048x8192,512x8192x2048,2048x8192x2048,256x14336x4096,2048x14336x4096" },
      variants: { type: "string", default: "fma8,fma32,mma,unsplit,mma:1x2,mma:2x2,mma:4x2,mma:4x4,mma:2x4,mma:8x2" },
      serve: { type: "string" },
      m: { type: "string", default: "1,8,32,64" },
      ks: { type: "string", default: "8,16" },
      budget: { type: "string", default: "55" },
      // js: the JS device with the warp MMA emulated, to check that a sweep runs (tiny shapes only)
      backend: { type: "string", default: "ptx" },
    },
  });
  const dev: Device = values.backend === "js"
    ? new JsDevice({ caps: { ...JS_CAPS, subgroups: true, subgroupSize: 32, maxWorkgroupSize: 1024, mma: true, coop: { bf16: true, f16: false } } })
    : values.backend === "vulkan" ? openVulkanDevice() : await PtxDevice.open();
  try {
    if (values.serve) {
      const nums = (v: string) => v.split(",").map(Number);
      await serveSweep(dev, values.serve.split(","), nums(values.m!), nums(values.ks!), Number(values.budget));
      return 0;
    }
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
