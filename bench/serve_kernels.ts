// Where a serving step's device time goes: the server's batched entry (llm/serve/batch.ts servingGraph, lowered
// by servingCompile) at real shapes and at each --rows entry size, every distinct kernel launched back to back
// (weights rotated past L2, bench/kernels.ts timeStep): µs per launch, its count per step, W GB/s, its share;
// kernels grouped by kind (matmuls, their x prep, attention, the sampler, the rest); and the whole entry as one
// recording (queued back to back, and with a synchronize after each), so the sum can be checked against it.
// Rows sit at position --pos of distinct sequences (each its own blocks of the pool), as bench/serve.ts steps.
// No weights are loaded (zeroed device memory): a read costs the same whatever its values.
//
//   deno run -A bench/serve_kernels.ts --shape llama-3.2-1b,llama-3-8b --rows 1,32 [--pos 576] [--only REGEX]
//     [--mma-split off] [--tune default,ks16/s1x4/b4x1,...] [--breakdown off] [--dtype q4_k_m] [--out FILE.json]
// --tune: serving MMA layouts (kernels/lib/mma_matmul.ts MmaServingTune) to compare by the whole entry's
// time at each --rows: "default" (the library's), or ksK|kswide|ksauto, sNTxU[wNW][pS] (up to 16 rows), bNTxU[wNW][pS]
// (past 16; pS: an S-stage cp.async pipeline; mMT: MT 16-row tiles a warp), direct (past 16 rows, the direct loads' tiles of session 8), nosplit (x rounded once: CompileOptions.mmaSplit off), aN (N paged-attention splits), gN (N query heads per
// attention team: CompileOptions.attentionGroup), uN (paged attention's positions per group per trip: pagedUnroll),
// tload (paged attention loads a block-table entry per position: pagedTableInLanes off), pf (attention loads each
// trip's successor's K/V ahead: attentionPrefetch), flash / noflash (paged attention on MMA tiles or not: pagedFlash), fpN (its K/V through N cp.async stages: attentionStages),
// fma (the FMA matmuls: CompileOptions.mma "off"), nocoop (Vulkan: no cooperative-matrix serving kernel), cksN / ccN / cmN / csN / caN / ceN (its K parts, columns, row tiles, W stages, block loads issued N trips ahead, ce1: x's hi and lo of 8 rows in one matrix)
// joined by "/"; the per-kernel table is
// printed for the first.   (--backend js --shape stories260K: a check that it runs, anywhere)
import { argv, exit } from "node:process";
import { writeFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { isBackendName, probeBackend } from "../backends/open.ts";
import type { Device } from "../backends/device.ts";
import type { TargetSet } from "../kernels/target.ts";
import type { Program } from "../kernels/program.ts";
import type { ModelHandle } from "../llm/model.ts";
import { familyOf } from "../llm/registry.ts";
import { SLOTS } from "../llm/families/common.ts";
import { SAMPLE_ROWS, servingCompileWith, servingGraph } from "../llm/serve/batch.ts";
import { planPool } from "../llm/serve/pool.ts";
import { syntheticLlama } from "../llm/synthetic.ts";
import { distinct, launchesFor, timeProgram, timeStep } from "./kernels.ts";
import type { SlotFill } from "./profile.ts";
import type { MmaServingTune } from "../kernels/lib/mma_matmul.ts";

/** A --tune entry: "default", or parts ksK | kswide, sNTxU[wNW][pS], bNTxU[wNW][pS] (pS: S cp.async stages) joined by "/". */
export function parseTune(spec: string): MmaServingTune {
  const t: MmaServingTune = {};
  if (spec === "default") return t;
  for (const part of spec.split("/")) {
    let m: RegExpExecArray | null;
    if (part === "nosplit" || part === "tload" || part === "pf" || part === "flash" || part === "noflash" || /^fp\d$/.test(part) || /^[agu]\d+$/.test(part) || part === "fma" || part === "nocoop" || /^c(ks|c|m|s|a|e)\d+$/.test(part)) continue; // not layouts: the entry's mmaSplit and attention options (tuneEntry)
    if (part === "direct") t.pipeline = false;
    else if (part === "kswide") t.ks = "wide";
    else if (part === "ksauto") t.ks = "auto";
    else if ((m = /^ks(\d+)$/.exec(part))) t.ks = Number(m[1]);
    else if ((m = /^([sb])(\d+)x(\d+)(?:w(\d+))?(?:p(\d+))?(?:m(\d+))?$/.exec(part))) {
      const tiles = { nt: Number(m[2]), unroll: Number(m[3]), ...(m[4] ? { nw: Number(m[4]) } : {}), ...(m[5] ? { stages: Number(m[5]) } : {}), ...(m[6] ? { mt: Number(m[6]) } : {}) };
      if (m[1] === "s") t.small = tiles;
      else t.big = tiles;
    } else throw new RangeError(`--tune: unknown part ${part} of ${spec} (ksK, kswide, ksauto, direct, sNTxU[wNW][pS], bNTxU[wNW][pS][mMT], nosplit, aN, gN, uN, tload, pf, flash, noflash, fpN, fma, nocoop, cksN, ccN, cmN, csN, caN, ceN)`);
  }
  return t;
}
import { isShapeName, SHAPES } from "./shapes.ts";
import { syntheticDtype } from "./flags.ts";
import type { SyntheticDtype } from "../llm/synthetic.ts";

const BLOCK = 16;

export interface EntryProgram {
  prog: Program;
  fill: SlotFill;
}

/**
 * The serving entry of `rows` rows for a shape, lowered for `target`, with slot contents that put row i at
 * position `pos` of its own sequence (blocks 1 + i * maxBlocks ...), every row sampled, greedy.
 */
export function servingEntry(
  shape: string, target: TargetSet, rows: number, pos: number, slots = 32, mmaSplit?: boolean, mmaServing?: MmaServingTune, attn: EntryTune = {},
  dtype: SyntheticDtype = "bf16",
): EntryProgram {
  if (!isShapeName(shape)) throw new RangeError(`unknown shape ${shape}`);
  const c = SHAPES[shape];
  const syn = syntheticLlama(c, { dtype });
  const model = { arch: "llama", family: familyOf("llama"), config: c, store: syn.store, map: syn.map, tokenizer: { eog: new Set<number>() }, path: shape } as unknown as ModelHandle;
  const ctx = Math.ceil((pos + 2) / BLOCK) * BLOCK;
  const maxRows = Math.max(rows, slots);
  const pool = planPool({ layers: c.layers, kvHeads: c.kvHeads, headDim: c.headDim, elemBytes: 2 }, {
    ctx, slots: maxRows, block: BLOCK, fraction: 1, memory: { totalBytes: Infinity }, blocks: maxRows * Math.ceil(ctx / BLOCK) + 1,
  });
  const { graph } = servingGraph(model, rows, { slots, pool, kvDtype: "f16" }, 64, { rows: slots, writes: 256 });
  const prog = servingCompileWith({ mmaSplit, mmaServing, ...attn })(graph, target);
  const maxB = pool.maxBlocks, S = Math.min(rows, slots);
  const i32 = (n: number, f: (i: number) => number) => new Uint8Array(Int32Array.from({ length: n }, (_, i) => f(i)).buffer);
  const table = (i: number, j: number) => 1 + i * maxB + j;
  const fill: SlotFill = (name) => {
    if (name === SLOTS.pos) return i32(rows, () => pos);
    if (name === SLOTS.token) return i32(rows, (i) => 1 + i);
    if (name === SLOTS.blockTable) return i32(rows * maxB, (e) => table(Math.floor(e / maxB), e % maxB));
    if (name === SLOTS.writeSlot) return i32(rows, (i) => table(i, Math.floor(pos / BLOCK)) * BLOCK + (pos % BLOCK));
    if (name === SAMPLE_ROWS) return i32(S, (i) => i);
    return undefined;
  };
  return { prog, fill };
}

/** The kind a kernel's time is summed under. */
export function kernelKind(name: string): string {
  if (name.startsWith("mma_prep")) return "matmul x prep";
  if (/matmul|gemv|coop_serving/.test(name)) return "matmul";
  if (name.startsWith("attention")) return "attention";
  if (/^(sample|logits|logprobs)/.test(name)) return "sampler";
  if (name.startsWith("scatter")) return "scatter (KV write, counts)";
  return "other (norm, rope, gather, elementwise)";
}

export interface EntryRow {
  name: string;
  count: number;
  micros: number;
  bytes: number;
}

/** The whole entry's device ms (queued back to back) under a tune. */
async function entryMs(dev: Device, shape: string, rows: number, pos: number, mmaSplit: boolean | undefined, tune: MmaServingTune, attn: EntryTune, dtype: SyntheticDtype): Promise<number> {
  const { prog, fill } = servingEntry(shape, dev.target, rows, pos, 32, mmaSplit, tune, attn, dtype);
  return (await timeProgram(dev, prog, 20, pos, "zero", fill)).queued;
}

/** A --tune entry's x split: off with a "nosplit" part, else the run's --mma-split. */
const tuneSplit = (spec: string, split: boolean) => (spec.split("/").includes("nosplit") ? false : split);
/**
 * A serving entry's other compile options: attention (CompileOptions attentionSplits, attentionGroup, pagedUnroll,
 * ...), the FMA matmuls (`mma` "off"), the cooperative-matrix kernel's layout or none (coopServing).
 */
export interface EntryTune {
  mma?: "off";
  coopServing?: false | { ks?: number; cols?: number; mt?: number; stages?: 1 | 2 };
  attentionSplits?: number;
  attentionGroup?: number;
  pagedUnroll?: number;
  pagedTableInLanes?: boolean;
  attentionPrefetch?: boolean;
  pagedFlash?: boolean;
  attentionStages?: number;
}
/**
 * A --tune entry's other parts: "aN" splits, "gN" heads per team, "uN" paged unroll, ...; "fma" (the FMA matmuls),
 * "nocoop" (no cooperative-matrix serving kernel), "cksN" / "ccN" / "cmN" / "csN" / "caN" / "ceN" (its K parts,
 * columns, row tiles, W stages, block loads issued N trips ahead, x's parts of 8 rows in one matrix); else the
 * library's.
 */
const tuneEntry = (spec: string): EntryTune => {
  const parts = spec.split("/");
  const num = (c: string) => {
    const a = parts.find((p) => new RegExp(`^${c}\\d+$`).test(p));
    return a ? Number(a.slice(c.length)) : undefined;
  };
  const cs = num("cs");
  if (cs !== undefined && cs !== 1 && cs !== 2) throw new RangeError(`--tune: cs${cs} (W stages of the cooperative-matrix kernel: 1 or 2)`);
  const stages: 1 | 2 | undefined = cs;
  const ca = num("ca");
  if (ca !== undefined && ca !== 0 && ca !== 1 && ca !== 2) throw new RangeError(`--tune: ca${ca} (how many trips ahead the cooperative-matrix kernel loads block weights: 0, 1 or 2)`);
  const ahead: 0 | 1 | 2 | undefined = ca;
  const ce = num("ce");
  if (ce !== undefined && ce !== 0 && ce !== 1) throw new RangeError(`--tune: ce${ce} (x's hi and lo parts of 8 rows in one matrix: 1, or 0)`);
  const coop = { ks: num("cks"), cols: num("cc"), mt: num("cm"), stages, ahead, eights: ce === undefined ? undefined : ce === 1 };
  return {
    ...(parts.includes("fma") ? { mma: "off" as const } : {}),
    ...(parts.includes("nocoop") ? { coopServing: false as const } : Object.values(coop).some((v) => v !== undefined) ? { coopServing: coop } : {}),
    attentionSplits: num("a"), attentionGroup: num("g"), pagedUnroll: num("u"),
    ...(parts.includes("tload") ? { pagedTableInLanes: false } : {}),
    ...(parts.includes("pf") ? { attentionPrefetch: true } : {}),
    ...(parts.includes("flash") ? { pagedFlash: true } : parts.includes("noflash") ? { pagedFlash: false } : {}),
    ...(num("fp") ? { attentionStages: num("fp") } : {}),
  };
};

async function profileEntry(
  dev: Device, shape: string, rows: number, pos: number, only: RegExp | undefined, mmaSplit: boolean | undefined, tune: MmaServingTune, attn: EntryTune,
  dtype: SyntheticDtype,
): Promise<Record<string, unknown>> {
  const { prog, fill } = servingEntry(shape, dev.target, rows, pos, 32, mmaSplit, tune, attn, dtype);
  const out: EntryRow[] = [];
  for (const { step, count } of distinct(prog)) {
    if (only && !only.test(step.kernel.name)) continue;
    const micros = await timeStep(dev, prog, step, launchesFor(step.work.bytes), pos, fill);
    out.push({ name: step.kernel.name, count, micros, bytes: step.work.bytes });
  }
  const whole = only ? undefined : await timeProgram(dev, prog, 20, pos, "zero", fill);
  const total = out.reduce((a, r) => a + r.count * r.micros, 0);
  const kernels = prog.steps.filter((s) => s.k === "kernel").length;
  console.log(`\n### ${shape}, entry of ${rows} rows at pos ${pos}: ${kernels} kernels, launches sum to ${(total / 1000).toFixed(3)} ms` +
    (whole ? `; whole entry ${whole.queued.toFixed(3)} ms queued, ${whole.synced.toFixed(3)} ms with a sync each` : ""));
  console.log(`| kernel | n | µs | GB/s | step % |`);
  console.log(`| --- | --- | --- | --- | --- |`);
  for (const r of [...out].sort((a, b) => b.count * b.micros - a.count * a.micros)) {
    console.log(`| ${r.name} | ${r.count} | ${r.micros.toFixed(2)} | ${(r.bytes / r.micros / 1000).toFixed(0)} | ${((100 * r.count * r.micros) / total).toFixed(1)} |`);
  }
  const kinds = new Map<string, { us: number; n: number }>();
  for (const r of out) {
    const k = kinds.get(kernelKind(r.name)) ?? { us: 0, n: 0 };
    kinds.set(kernelKind(r.name), { us: k.us + r.count * r.micros, n: k.n + r.count });
  }
  console.log(`by kind: ${[...kinds].map(([k, v]) => `${k} ${(v.us / 1000).toFixed(3)} ms (${v.n} launches)`).join("; ")}`);
  return { rows, pos, kernels, totalMicros: total, whole, kernelsTimed: out };
}

async function main(args: string[]): Promise<number> {
  const { values } = parseArgs({
    args, strict: true, allowPositionals: false,
    options: {
      shape: { type: "string", default: "llama-3.2-1b,llama-3-8b" },
      rows: { type: "string", default: "1,32" },
      pos: { type: "string", default: "576" },
      only: { type: "string" },
      "mma-split": { type: "string", default: "on" },
      tune: { type: "string", default: "default" },
      breakdown: { type: "string", default: "on" },
      backend: { type: "string", default: "ptx" },
      dtype: { type: "string", default: "bf16" },
      out: { type: "string" },
    },
  });
  const dtype = syntheticDtype(values.dtype!);
  const shapes = values.shape!.split(",");
  for (const s of shapes) if (!isShapeName(s)) throw new RangeError(`--shape: unknown shape ${s}`);
  const rows = values.rows!.split(",").map(Number);
  for (const r of rows) if (!(Number.isInteger(r) && r >= 1)) throw new RangeError(`--rows: ${r} is not a positive integer`);
  const pos = Number(values.pos);
  if (!(Number.isInteger(pos) && pos >= 0)) throw new RangeError(`--pos: ${values.pos} is not a position`);
  const split = values["mma-split"];
  if (split !== "on" && split !== "off") throw new RangeError(`--mma-split: on or off, not ${split}`);
  const only = values.only ? new RegExp(values.only) : undefined;
  const name = values.backend!;
  if (!isBackendName(name)) throw new RangeError(`--backend: unknown backend ${name}`);
  const dev = await probeBackend(name);
  if (typeof dev === "string") throw new Error(`${name}: ${dev}`);
  const result: Record<string, unknown> = {};
  try {
    const tunes = values.tune!.split(",");
    const parsed = tunes.map(parseTune);
    for (const shape of shapes) {
      if (values.breakdown !== "off") for (const r of rows) result[`${shape}:${r}`] = await profileEntry(dev, shape, r, pos, only, tuneSplit(tunes[0], split === "on"), parsed[0], tuneEntry(tunes[0]), dtype);
      if (tunes.length < 2) continue;
      // every tune's whole entry at every size: the step's device time and its ratio to the first size's
      console.log(`\n### ${shape}: whole entry, device ms queued back to back, by tune (pos ${pos})`);
      console.log(`| tune | ${rows.map((r) => `b${r} ms`).join(" | ")} | b${rows[rows.length - 1]} / b${rows[0]} |`);
      console.log(`| --- | ${rows.map(() => "---").join(" | ")} | --- |`);
      for (const [i, tune] of tunes.entries()) {
        const ms: number[] = [];
        for (const r of rows) ms.push(await entryMs(dev, shape, r, pos, tuneSplit(tune, split === "on"), parsed[i], tuneEntry(tune), dtype).catch((e) => {
          console.error(`${shape} b${r} ${tune}: ${(e as Error).message}`);
          return NaN;
        }));
        result[`${shape}:tune:${tune}`] = ms;
        console.log(`| ${tune} | ${ms.map((x) => x.toFixed(3)).join(" | ")} | ${(ms[ms.length - 1] / ms[0]).toFixed(2)} |`);
      }
    }
  } finally {
    await dev.destroy();
  }
  if (values.out) writeFileSync(values.out, JSON.stringify(result, null, 1) + "\n");
  return 0;
}

if (import.meta.main) {
  try {
    exit(await main(argv.slice(2)));
  } catch (e) {
    console.error(`serve kernels bench: ${(e as Error).message}`);
    exit(1);
  }
}
